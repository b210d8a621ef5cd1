"""Images and audio in `/v1/chat/completions` (OpenAI `image_url` and `input_audio` content
parts) on the tiny multimodal Gemma 4 fixture (tests/fixtures/tiny_gemma4_mm, itself checked
against transformers by crates/oxinfer/tests/gemma4_mm_tiny.rs and gemma4_audio_tiny.rs),
driven by the official `openai` client. The reference is `oxinfer run --image/--audio` on the
same files: the same greedy tokens (their bytes), the same text, and the first token's
log-probabilities equal to the CLI's `--dump-logits`. Bad media get one clear 400; encoder
outputs are cached by content (a counter in /metrics shows the second request is not encoded
again)."""

import base64
import json
import math
import struct
import subprocess
import tempfile
from pathlib import Path

import openai
import pytest

import conftest
from conftest import BIN
from test_openai import metric, raw

ROOT = Path(__file__).resolve().parents[4]
TINY = ROOT / "tests" / "fixtures" / "tiny_gemma4_mm"
SCENE = TINY / "scene.png"
LOGO = TINY / "logo.png"
SPEECH = TINY / "speech.wav"
N = 12


@pytest.fixture(scope="module")
def mm_server():
    s = conftest.Server("--parallel", "2", "--ctx", "512", model=str(TINY))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(mm_server):
    return openai.OpenAI(base_url=mm_server.url + "/v1", api_key="none", max_retries=0)


def image_part(path=SCENE, data=None, mime="image/png"):
    data = path.read_bytes() if data is None else data
    url = f"data:{mime};base64," + base64.b64encode(data).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def audio_part(data, fmt="wav"):
    return {"type": "input_audio",
            "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


def user(*parts, text="What is it?"):
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def token_bytes(model=TINY):
    """id → bytes of the fixture's vocabulary (byte-fallback tokens <0xNN>, specials as text)."""
    vocab = json.loads((model / "tokenizer.json").read_text())["model"]["vocab"]
    out = {}
    for s, i in vocab.items():
        if s.startswith("<0x") and len(s) == 6:
            out[i] = bytes([int(s[3:5], 16)])
        else:
            out[i] = s.encode()
    return out


def read_npy(path):
    """A little-endian float32 C-order .npy file: (shape, flat values)."""
    b = path.read_bytes()
    assert b[:6] == b"\x93NUMPY"
    hlen = struct.unpack("<H", b[8:10])[0]
    header = b[10:10 + hlen].decode()
    assert "'<f4'" in header and "'fortran_order': False" in header, header
    shape = tuple(int(x) for x in header.split("(")[1].split(")")[0].split(",") if x.strip())
    data = struct.unpack(f"<{math.prod(shape)}f", b[10 + hlen:])
    return shape, data


def cli(flag, path, text, n=N, model=TINY, extra=()):
    """`oxinfer run` (on `model`, with `extra` arguments) on one user message with a media file
    at temperature 0: the generated ids, the printed text and the last prompt position's
    logits."""
    with tempfile.TemporaryDirectory() as d:
        npy = Path(d) / "l.npy"
        base = [BIN, "run", "-m", str(model), flag, str(path), "-p", text, "--temp", "0",
                "--max-tokens", str(n), "-t", "2", *extra]
        ids = subprocess.run(base + ["--show-tokens", "--dump-logits", str(npy)],
                             capture_output=True, text=True, check=True).stdout.split()
        printed = subprocess.run(base, capture_output=True, check=True).stdout
        shape, logits = read_npy(npy)
        vocab = shape[1]
        return [int(i) for i in ids], printed[:-1], logits[-vocab:]


def log_softmax(xs):
    m = max(xs)
    s = math.log(sum(math.exp(x - m) for x in xs)) + m
    return [x - s for x in xs]


def check_against_cli(client, flag, path, part, text):
    ids, printed, last = cli(flag, path, text)
    r = client.chat.completions.create(
        model="tiny", messages=user(part, text=text), temperature=0, max_tokens=N,
        logprobs=True, top_logprobs=5,
    )
    c = r.choices[0]
    vocab = token_bytes()
    # The CLI shows every id, the end-of-generation token included; the server's log-probs
    # list each generated token.
    got = [bytes(t.bytes) for t in c.logprobs.content]
    want = [vocab[i] for i in ids[:len(got)]]
    assert got == want
    assert c.message.content.encode() == printed
    # The first token's top-5 log-probabilities from the server equal the log-softmax of the
    # CLI's logits at the last prompt position.
    lp = log_softmax(last)
    ref = sorted(range(len(lp)), key=lambda i: -lp[i])[:5]
    top = c.logprobs.content[0].top_logprobs
    assert [bytes(t.bytes) for t in top] == [vocab[i] for i in ref]
    for t, i in zip(top, ref):
        assert abs(t.logprob - lp[i]) < 1e-4, (t.logprob, lp[i])
    return r


def test_image_reply_matches_the_cli(client):
    r = check_against_cli(client, "--image", SCENE, image_part(), "What is it?")
    # 1 image: boi + 64 soft tokens + eoi, plus the text around it.
    assert r.usage.prompt_tokens > 66


def test_audio_reply_matches_the_cli(client):
    check_against_cli(client, "--audio", SPEECH, audio_part(SPEECH.read_bytes()), "Say it.")


def test_same_image_is_encoded_once(mm_server, client):
    logo = image_part(LOGO)
    before = metric(mm_server, "oxinfer_media_encoded_total")
    hits = metric(mm_server, "oxinfer_media_cache_hits_total")
    first = client.chat.completions.create(
        model="tiny", messages=user(logo, text="Describe."), temperature=0, max_tokens=4)
    assert metric(mm_server, "oxinfer_media_encoded_total") == before + 1
    # The same request again: the soft tokens come from the cache, and the reply is the same.
    again = client.chat.completions.create(
        model="tiny", messages=user(logo, text="Describe."), temperature=0, max_tokens=4)
    assert again.choices[0].message.content == first.choices[0].message.content
    # The next turn resends the image: not encoded again either.
    turn2 = user(logo, text="Describe.") + [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Again?"},
    ]
    client.chat.completions.create(model="tiny", messages=turn2, temperature=0, max_tokens=4)
    assert metric(mm_server, "oxinfer_media_encoded_total") == before + 1
    assert metric(mm_server, "oxinfer_media_cache_hits_total") == hits + 2
    assert metric(mm_server, "oxinfer_media_cache_entries") >= 1


def bad_request(client, messages):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=messages, max_tokens=2)
    return e.value.body["message"]


def png_header(width, height):
    """A PNG signature and an IHDR of width × height RGB, then empty IDAT and IEND."""
    import zlib

    def chunk(kind, data):
        c = kind + data
        return struct.pack(">I", len(data)) + c + struct.pack(">I", zlib.crc32(c))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"") + chunk(b"IEND", b"")


def wav_header(frames):
    """A 16 kHz mono 16-bit WAV of `frames` zero samples."""
    data = b"\0\0" * frames
    fmt = struct.pack("<HHIIHH", 1, 1, 16000, 32000, 2, 16)
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def test_bad_media_get_one_clear_400(mm_server, client):
    png = SCENE.read_bytes()
    cases = [
        (user(image_part(data=png[:len(png) // 2])), "cannot decode PNG"),
        (user(image_part(data=png_header(20000, 20000))), "20000×20000 pixels is too large"),
        (user(image_part(data=b"BM\x00\x00 not a bitmap")), "unsupported image format"),
        (user({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}),
         "bad base64"),
        (user({"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}),
         "no network fetches"),
        (user(audio_part(wav_header(0))), "audio without samples"),
        (user(audio_part(b"")), "empty audio (0 bytes)"),
        (user(audio_part(SPEECH.read_bytes(), fmt="mp3")), "audio format 'mp3' is not supported"),
        (user({"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}}),
         "cannot take video input"),
    ]
    for messages, want in cases:
        msg = bad_request(client, messages)
        assert want in msg, (want, msg)
        assert msg.startswith("messages[0].content[0]"), msg
    assert raw("GET", mm_server.url + "/health").json() == {"status": "ok"}
    # The server still answers a good request afterwards.
    r = client.chat.completions.create(model="tiny", messages=user(image_part()), max_tokens=2)
    assert r.choices[0].finish_reason in ("length", "stop")


def test_a_text_only_model_refuses_media(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    msg = bad_request(c, user(image_part()))
    assert "this model has no vision tower" in msg, msg
    msg = bad_request(c, user(audio_part(SPEECH.read_bytes())))
    assert "this model has no audio tower" in msg, msg
