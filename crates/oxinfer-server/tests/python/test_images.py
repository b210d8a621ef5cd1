"""`oxinfer serve` on a Stable Diffusion folder (the tiny SD 1.x fixture, tests/fixtures/tiny_sd1,
itself checked against diffusers by the image tests), driven by the official `openai` client's
`images.generate`. The reference is `oxinfer image` with the same prompt, size, steps and seed
(and `--batch n` for `n` images, which the server makes as one batch): the PNG files must be
byte-identical. Bad input gets a clear 400; text endpoints answer 400."""

import base64
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import openai
import pytest

import conftest
from conftest import BIN
from test_openai import raw

ROOT = Path(__file__).resolve().parents[4]
TINY = ROOT / "tests" / "fixtures" / "tiny_sd1"


@pytest.fixture(scope="module")
def image_server():
    s = conftest.Server("--api-key", "k", "--queue", "2", model=str(TINY))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(image_server):
    return openai.OpenAI(base_url=image_server.url + "/v1", api_key="k", max_retries=0)


def cli_pngs(prompt, width, height, steps, seed, negative="", batch=1, extra=()):
    """The PNGs `oxinfer image --batch BATCH` (and `extra` arguments) writes for the same
    request (out.png, or out-1.png ... out-BATCH.png)."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "out.png"
        subprocess.run(
            [BIN, "image", "-m", str(TINY), "-p", prompt, "-n", negative, "--width", str(width),
             "--height", str(height), "--steps", str(steps), "--seed", str(seed), "-o", str(out),
             "--batch", str(batch), "-t", "2", *extra],
            capture_output=True, text=True, check=True,
        )
        if batch == 1:
            return [out.read_bytes()]
        return [(Path(d) / f"out-{i + 1}.png").read_bytes() for i in range(batch)]


def cli_png(prompt, width, height, steps, seed, negative=""):
    """The PNG `oxinfer image` writes for the same request."""
    return cli_pngs(prompt, width, height, steps, seed, negative)[0]


def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    return struct.unpack(">II", data[16:24])


def test_images_match_the_cli_byte_for_byte(client):
    r = client.images.generate(
        model="anything", prompt="a red cube on a table", n=2, size="64x48",
        response_format="b64_json",
        extra_body={"steps": 3, "seed": 11, "negative_prompt": "blurry"},
    )
    assert len(r.data) == 2
    files = [base64.b64decode(d.b64_json) for d in r.data]
    # One batch of two, as `oxinfer image --batch 2`; image i reports seed + i.
    want = cli_pngs("a red cube on a table", 64, 48, 3, 11, "blurry", batch=2)
    for i, f in enumerate(files):
        assert png_size(f) == (64, 48)
        assert f == want[i], i
        assert r.data[i].model_extra["seed"] == 11 + i
    assert files[0] != files[1], "image i uses seed + i"


def test_default_size_is_the_models_and_seed_is_returned(client, image_server):
    r = raw("POST", image_server.url + "/v1/images/generations",
            {"prompt": "x", "steps": 1}, headers={"authorization": "Bearer k"})
    assert r.status_code == 200, r.text
    item = r.json()["data"][0]
    data = base64.b64decode(item["b64_json"])
    # tiny_sd1: UNet sample_size 8, VAE scale 8.
    assert png_size(data) == (64, 64)
    assert data == cli_png("x", 64, 64, 1, item["seed"])


@pytest.mark.parametrize("body,param,words", [
    ({"prompt": "x", "size": "60x48"}, "size", ["60x48", "multiple of 8"]),
    ({"prompt": "x", "size": "big"}, "size", ["WIDTHxHEIGHT"]),
    ({"prompt": "x", "size": "4096x4096"}, "size", ["at most 2048"]),
    ({"prompt": "x", "n": 9}, "n", ["between 1 and 4"]),
    ({"prompt": "x", "steps": 0}, "steps", ["between 1"]),
    ({"prompt": "x", "response_format": "url"}, "response_format", ["b64_json"]),
    ({"prompt": "x", "scheduler": "pndm"}, "scheduler", ["pndm", "euler"]),
    ({"prompt": "  "}, "prompt", ["empty"]),
    ({"prompt": "x", "guidance_scale": -1}, "guidance_scale", ["between 0 and 50"]),
])
def test_bad_requests_are_400_naming_the_field(image_server, body, param, words):
    r = raw("POST", image_server.url + "/v1/images/generations", body,
            headers={"authorization": "Bearer k"})
    assert r.status_code == 400, (param, r.text)
    err = r.json()["error"]
    assert err["param"] == param, err
    for w in words:
        assert w in err["message"], err["message"]


def test_unknown_fields_and_missing_prompt_are_400(image_server):
    for body, word in [({"prompt": "x", "quality": "hd"}, "quality"), ({"n": 1}, "prompt")]:
        r = raw("POST", image_server.url + "/v1/images/generations", body,
                headers={"authorization": "Bearer k"})
        assert r.status_code == 400, r.text
        assert word in r.json()["error"]["message"]


def test_key_is_required(image_server):
    r = raw("POST", image_server.url + "/v1/images/generations", {"prompt": "x"})
    assert r.status_code == 401


def test_text_endpoints_say_this_is_an_image_model(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert "image model" in str(e.value) and "/v1/images/generations" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="m", input="hi")


def test_models_lists_the_image_model(client):
    m = client.models.list().data
    assert [x.id for x in m] == ["tiny_sd1"]


def test_chat_server_answers_images_with_a_400_naming_the_model(server):
    r = raw("POST", server.url + "/v1/images/generations", {"prompt": "x"})
    assert r.status_code == 400, r.text
    assert "not an image model" in r.json()["error"]["message"]


def test_lora_server_matches_the_cli_with_the_same_lora():
    """`oxinfer serve --lora FILE --lora-scale F` fuses the LoRA as `oxinfer image` does (the
    tiny kohya LoRA of tests/fixtures/tiny_sd1_lora, itself checked against diffusers by
    crates/oxinfer/tests/sd_lora.rs): the same PNG byte for byte, unlike the plain model's;
    a --lora for a text model is refused at start-up with one line."""
    lora = ["--lora", str(ROOT / "tests" / "fixtures" / "tiny_sd1_lora" / "kohya.safetensors"),
            "--lora-scale", "0.8"]
    s = conftest.Server(*lora, model=str(TINY))
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
        r = c.images.generate(model="tiny_sd1", prompt="a red cube on a table", size="64x48",
                              response_format="b64_json", extra_body={"steps": 2, "seed": 5})
        got = base64.b64decode(r.data[0].b64_json)
    finally:
        s.stop()
    assert got == cli_pngs("a red cube on a table", 64, 48, 2, 5, extra=lora)[0]
    assert got != cli_png("a red cube on a table", 64, 48, 2, 5), "the LoRA changes the image"
    p = subprocess.run([BIN, "serve", "-m", conftest.MODEL, "--port", "0", *lora],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "--lora applies to Stable Diffusion" in p.stderr, p.stderr


def test_single_file_checkpoint_serves_the_folders_images():
    """`oxinfer serve` on tiny_sd1 as one LDM file (tests/fixtures/tiny_sd1_ldm, configs and
    tokenizer from the folder with --image-config) answers with the PNG `oxinfer image` makes
    from the folder; an inpainting model is refused at start-up with one line."""
    file = ROOT / "tests" / "fixtures" / "tiny_sd1_ldm" / "tiny_sd1.safetensors"
    s = conftest.Server("--image-config", str(TINY), model=str(file))
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
        r = c.images.generate(model="tiny_sd1", prompt="a red cube on a table", size="64x48",
                              response_format="b64_json", extra_body={"steps": 2, "seed": 5})
        got = base64.b64decode(r.data[0].b64_json)
        assert got == cli_png("a red cube on a table", 64, 48, 2, 5)
        assert any("tiny_sd1" in line for line in s.log), s.log
    finally:
        s.stop()


# --- POST /v1/images/edits (OpenAI's images.edit): image to image and inpainting ---

INIT = ROOT / "tests" / "fixtures" / "tiny_sd_inpaint" / "init.png"  # 64x48 RGB
INPAINT = ROOT / "tests" / "fixtures" / "tiny_sd_inpaint"
# The region to repaint: x in [16, 48), y in [8, 32).
HOLE = (16, 48, 8, 32)


def write_png(path, width, height, channels, pixel):
    """A PNG of `channels` 1 (grey), 3 (RGB) or 4 (RGBA) from `pixel(x, y)` (a tuple), without
    PIL (the test venv has only the openai client)."""
    kind = {1: 0, 3: 2, 4: 6}[channels]
    rows = b"".join(b"\x00" + bytes(v for x in range(width) for v in pixel(x, y))
                    for y in range(height))

    def chunk(tag, data):
        return (struct.pack(">I", len(data)) + tag + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))
    data = (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, kind, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
    Path(path).write_bytes(data)
    return path


def in_hole(x, y):
    x0, x1, y0, y1 = HOLE
    return x0 <= x < x1 and y0 <= y < y1


@pytest.fixture(scope="module")
def masks(tmp_path_factory):
    """OpenAI's mask (RGBA, alpha 0 in the hole, opaque black-on-white noise elsewhere so its
    colours would mean something else under the white = repaint convention) and the same
    region as the CLI's white = repaint mask."""
    d = tmp_path_factory.mktemp("masks")
    openai_mask = write_png(d / "openai.png", 64, 48, 4,
                            lambda x, y: (0, 0, 0, 0) if in_hole(x, y)
                            else ((255, 255, 255, 255) if (x + y) % 3 else (0, 0, 0, 128)))
    cli_mask = write_png(d / "cli.png", 64, 48, 1,
                         lambda x, y: (255,) if in_hole(x, y) else (0,))
    no_alpha = write_png(d / "rgb.png", 64, 48, 3, lambda x, y: (255, 255, 255))
    small = write_png(d / "small.png", 32, 32, 4, lambda x, y: (0, 0, 0, 0))
    odd = write_png(d / "odd.png", 60, 48, 3, lambda x, y: (1, 2, 3))
    return {"openai": openai_mask, "cli": cli_mask, "rgb": no_alpha, "small": small, "odd": odd}


def cli_edit(model, prompt, steps, seed, strength, mask=None, batch=1, negative=""):
    """What `oxinfer image --init INIT [--mask MASK] --strength S` writes."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "out.png"
        args = [BIN, "image", "-m", str(model), "-p", prompt, "-n", negative, "--steps",
                str(steps), "--seed", str(seed), "-o", str(out), "--batch", str(batch), "-t", "2",
                "--init", str(INIT), "--strength", str(strength)]
        if mask is not None:
            args += ["--mask", str(mask)]
        subprocess.run(args, capture_output=True, text=True, check=True)
        if batch == 1:
            return [out.read_bytes()]
        return [(Path(d) / f"out-{i + 1}.png").read_bytes() for i in range(batch)]


def edit_pngs(r):
    return [base64.b64decode(d.b64_json) for d in r.data]


def test_image_to_image_matches_the_cli_byte_for_byte(client):
    with open(INIT, "rb") as f:
        r = client.images.edit(image=f, prompt="a red cube on a table", n=2, size="64x48",
                               response_format="b64_json",
                               extra_body={"steps": 4, "seed": 7, "strength": 0.75,
                                           "negative_prompt": "blurry"})
    got = edit_pngs(r)
    want = cli_edit(TINY, "a red cube on a table", 4, 7, 0.75, batch=2, negative="blurry")
    assert [png_size(g) for g in got] == [(64, 48)] * 2
    assert got == want
    assert [d.model_extra["seed"] for d in r.data] == [7, 8]


def test_plain_unet_inpainting_matches_the_cli_with_the_converted_mask(client, masks):
    """OpenAI's mask (alpha 0 = edit) is the CLI's white = repaint mask of the same region."""
    with open(INIT, "rb") as f, open(masks["openai"], "rb") as m:
        r = client.images.edit(image=f, mask=m, prompt="a red cube on a table",
                               extra_body={"steps": 3, "seed": 3, "strength": 1.0})
    got = edit_pngs(r)[0]
    assert got == cli_edit(TINY, "a red cube on a table", 3, 3, 1.0, mask=masks["cli"])[0]
    # The mask matters: without it, the same request is plain image to image.
    assert got != cli_edit(TINY, "a red cube on a table", 3, 3, 1.0)[0]


def test_inpainting_model_serves_edits_and_refuses_generations(masks):
    s = conftest.Server(model=str(INPAINT))
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
        with open(INIT, "rb") as f, open(masks["openai"], "rb") as m:
            r = c.images.edit(image=f, mask=m, prompt="a red cube on a table",
                              extra_body={"steps": 3, "seed": 9, "strength": 0.9})
        got = edit_pngs(r)[0]
        assert got == cli_edit(INPAINT, "a red cube on a table", 3, 9, 0.9, mask=masks["cli"])[0]
        with open(INIT, "rb") as f, pytest.raises(openai.BadRequestError) as e:
            c.images.edit(image=f, prompt="x", extra_body={"steps": 1})
        assert "inpainting model" in str(e.value) and "mask" in str(e.value)
        with pytest.raises(openai.BadRequestError) as e:
            c.images.generate(prompt="x", extra_body={"steps": 1})
        assert "inpainting model" in str(e.value) and "/v1/images/edits" in str(e.value)
        assert any("inpainting model" in line for line in s.log), s.log
    finally:
        s.stop()


def multipart(files, data):
    """A multipart/form-data body of `data` (name: text) and `files` ((name, (file name,
    bytes, content type))), and its Content-Type."""
    b = "oxinfer-test-boundary"
    parts = [f'--{b}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in data.items()]
    for name, (fname, content, ctype) in files:
        parts.append(f'--{b}\r\nContent-Disposition: form-data; name="{name}"; '
                     f'filename="{fname}"\r\nContent-Type: {ctype}\r\n\r\n'.encode()
                     + content + b"\r\n")
    return b"".join(parts) + f"--{b}--\r\n".encode(), f"multipart/form-data; boundary={b}"


def post_edit(server, files, data, key="k"):
    body, ctype = multipart(files, data)
    headers = {"content-type": ctype, **({"authorization": f"Bearer {key}"} if key else {})}
    return raw("POST", server.url + "/v1/images/edits", body, headers=headers)


def edit_400(image_server, files, data, param, words):
    r = post_edit(image_server, files, data)
    assert r.status_code == 400, (param, r.text)
    err = r.json()["error"]
    assert err["param"] == param, err
    for w in words:
        assert w in err["message"], err["message"]


def test_bad_edits_are_400_naming_the_field(image_server, masks):
    init = INIT.read_bytes()
    img = ("image", ("init.png", init, "image/png"))
    ok = {"prompt": "x", "steps": "1"}
    cases = [
        ([], ok, "image", ["missing field 'image'"]),
        ([("image", ("a.png", b"hello, not an image", "image/png"))], ok, "image",
         ["not a PNG, JPEG or WebP"]),
        ([("image", ("a.png", init[: len(init) // 2], "image/png"))], ok, "image",
         ["does not decode"]),
        ([("image", ("a.png", masks["odd"].read_bytes(), "image/png"))], ok, "image",
         ["60x48", "multiple of 8"]),
        ([img, img], ok, "image", ["one image"]),
        ([img, ("mask", ("m.png", masks["small"].read_bytes(), "image/png"))], ok, "mask",
         ["32x32", "64x48", "same size"]),
        ([img, ("mask", ("m.png", masks["rgb"].read_bytes(), "image/png"))], ok, "mask",
         ["alpha"]),
        ([img], {**ok, "size": "64x64"}, "size", ["64x64", "64x48"]),
        ([img], {**ok, "size": "60x48"}, "size", ["multiple of 8"]),
        ([img], {**ok, "n": "9"}, "n", ["between 1 and 4"]),
        ([img], {**ok, "n": "two"}, "n", ["two"]),
        ([img], {**ok, "strength": "0"}, "strength", ["(0, 1]"]),
        ([img], {**ok, "strength": "1.5"}, "strength", ["(0, 1]"]),
        ([img], {**ok, "response_format": "url"}, "response_format", ["b64_json"]),
        ([img], {**ok, "quality": "hd"}, "quality", ["unknown field 'quality'"]),
        ([img], {"steps": "1"}, "prompt", ["prompt"]),
        ([img], {"prompt": " ", "steps": "1"}, "prompt", ["empty"]),
        ([img], {**ok, "steps": "0"}, "steps", ["between 1"]),
    ]
    for files, data, param, words in cases:
        edit_400(image_server, files, data, param, words)


def test_edits_need_multipart_and_the_key(image_server):
    r = raw("POST", image_server.url + "/v1/images/edits", {"prompt": "x"},
            headers={"authorization": "Bearer k"})
    assert r.status_code == 400 and "multipart/form-data" in r.json()["error"]["message"], r.text
    r = post_edit(image_server, [("image", ("i.png", INIT.read_bytes(), "image/png"))],
                  {"prompt": "x"}, key=None)
    assert r.status_code == 401


def test_edit_bodies_respect_max_body():
    s = conftest.Server("--max-body", "4096", model=str(TINY))
    try:
        r = post_edit(s, [("image", ("i.png", b"\x89PNG" + b"\0" * 8192, "image/png"))],
                      {"prompt": "x"}, key=None)
        assert r.status_code == 413, r.text
    finally:
        s.stop()


def test_chat_server_answers_edits_with_a_400_naming_the_model(server):
    r = post_edit(server, [("image", ("i.png", INIT.read_bytes(), "image/png"))],
                  {"prompt": "x"}, key=None)
    assert r.status_code == 400, r.text
    assert "not an image model" in r.json()["error"]["message"]
