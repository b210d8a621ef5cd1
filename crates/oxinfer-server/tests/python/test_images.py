"""`oxinfer serve` on a Stable Diffusion folder (the tiny SD 1.x fixture, tests/fixtures/tiny_sd1,
itself checked against diffusers by the image tests), driven by the official `openai` client's
`images.generate`. The reference is `oxinfer image` with the same prompt, size, steps and seed
(and `--batch n` for `n` images, which the server makes as one batch): the PNG files must be
byte-identical. Bad input gets a clear 400; text endpoints answer 400."""

import base64
import struct
import subprocess
import tempfile
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
    assert r.status_code == 400, r.text
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
    inpaint = ROOT / "tests" / "fixtures" / "tiny_sd_inpaint"
    p = subprocess.run([BIN, "serve", "-m", str(inpaint), "--port", "0"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode != 0 and "inpainting model" in p.stderr, p.stderr
    assert "text to image only" in p.stderr, p.stderr
