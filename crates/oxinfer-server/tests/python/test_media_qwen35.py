"""Images and videos in `/v1/chat/completions` on the tiny Qwen 3.5 vision fixture
(tests/fixtures/qwen35-vl-tiny, checked against transformers by
crates/oxinfer/tests/qwen35_vision_tiny.rs and qwen35_video_tiny.rs): the reply to an
`image_url` part (a `video_url` part with an animated GIF) has the greedy tokens and first-token
log-probabilities of `oxinfer run --image --think` (`--video`) on the same file (the server
leaves the template's thinking on, as `--think` does), so the soft tokens and their multimodal
rotary positions ride with the request through continuous batching; a resent image or video is
not encoded again and gives the same reply; a remote video URL is refused with a 400."""

import base64
from pathlib import Path

import openai
import pytest

import conftest
from test_media import N, bad_request, cli, image_part, log_softmax, token_bytes, user
from test_openai import metric

ROOT = Path(__file__).resolve().parents[4]
TINY = ROOT / "tests" / "fixtures" / "qwen35-vl-tiny"
LOGO = TINY / "logo.png"
WIDE = TINY / "wide.png"
CLIP = TINY / "clip.gif"


def video_part(path=CLIP, url=None):
    url = url or "data:image/gif;base64," + base64.b64encode(path.read_bytes()).decode()
    return {"type": "video_url", "video_url": {"url": url}}


@pytest.fixture(scope="module")
def qwen_server():
    s = conftest.Server("--parallel", "2", "--ctx", "512", model=str(TINY))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(qwen_server):
    return openai.OpenAI(base_url=qwen_server.url + "/v1", api_key="none", max_retries=0)


def check_against_cli(client, flag, path, part, text):
    """The server's reply to `part` + `text` against `oxinfer run flag path --think`."""
    ids, _, last = cli(flag, path, text, model=TINY, extra=["--think"])
    r = client.chat.completions.create(
        model="tiny", messages=user(part, text=text), temperature=0,
        max_tokens=N, logprobs=True, top_logprobs=5,
    )
    vocab = token_bytes(TINY)
    got = [bytes(t.bytes) for t in r.choices[0].logprobs.content]
    assert got == [vocab[i] for i in ids[:len(got)]]
    lp = log_softmax(last)
    ref = sorted(range(len(lp)), key=lambda i: -lp[i])[:5]
    top = r.choices[0].logprobs.content[0].top_logprobs
    assert [bytes(t.bytes) for t in top] == [vocab[i] for i in ref]
    for t, i in zip(top, ref):
        assert abs(t.logprob - lp[i]) < 1e-4, (t.logprob, lp[i])
    return r


def test_image_reply_matches_the_cli(client):
    r = check_against_cli(client, "--image", LOGO, image_part(LOGO), "What is it?")
    # 54 soft tokens for the 160x120 logo (72x48 after smart_resize, 2x2 merge of 4-px patches).
    assert r.usage.prompt_tokens > 54


def test_video_reply_matches_the_cli_and_is_encoded_once(qwen_server, client):
    before = metric(qwen_server, "oxinfer_media_encoded_total")
    r = check_against_cli(client, "--video", CLIP, video_part(), "What happens?")
    # 2 frame groups of 12 soft tokens, each with its timestamp text and start / end ids.
    assert r.usage.prompt_tokens > 24 + 2 * 14
    again = client.chat.completions.create(
        model="tiny", messages=user(video_part(), text="What happens?"), temperature=0,
        max_tokens=N, logprobs=True)
    assert [t.bytes for t in again.choices[0].logprobs.content] == \
        [t.bytes for t in r.choices[0].logprobs.content]
    assert metric(qwen_server, "oxinfer_media_encoded_total") == before + 1


def test_remote_and_still_videos_are_refused(client):
    e = bad_request(client, user(video_part(url="https://example.org/a.gif")))
    assert "remote video URLs are refused" in e
    e = bad_request(client, user(video_part(url="data:image/png;base64,"
                                            + base64.b64encode(WIDE.read_bytes()).decode())))
    assert "a still PNG is not a video" in e


def test_resent_image_is_not_encoded_again(qwen_server, client):
    wide = image_part(WIDE)
    before = metric(qwen_server, "oxinfer_media_encoded_total")
    a = client.chat.completions.create(
        model="tiny", messages=user(wide, text="Describe."), temperature=0, max_tokens=6,
        logprobs=True)
    b = client.chat.completions.create(
        model="tiny", messages=user(wide, text="Describe."), temperature=0, max_tokens=6,
        logprobs=True)
    assert [t.bytes for t in a.choices[0].logprobs.content] == \
        [t.bytes for t in b.choices[0].logprobs.content]
    assert metric(qwen_server, "oxinfer_media_encoded_total") == before + 1


def test_gguf_with_mmproj_replies_as_the_cli():
    """A server on the GGUF twin (tests/fixtures/mmproj-gguf/qwen35-vl-tiny: llama.cpp's text
    model and mmproj file, paired because they share a folder; the CLI's logits on it are
    checked against transformers in crates/oxinfer-cli/tests/media_cli.rs) replies to an image
    as `oxinfer run` on the same folder: the same text, and the first token's top
    log-probabilities within 1e-4. (The tiny tokenizer is byte-fallback BPE, which llama.cpp's
    converter writes as byte-level: text prompts tokenize differently from the safetensors
    checkpoint, so the reference is the CLI on the GGUF.)"""
    gguf = ROOT / "tests" / "fixtures" / "mmproj-gguf" / "qwen35-vl-tiny"
    s = conftest.Server("--ctx", "512", model=str(gguf))
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
        _, printed, last = cli("--image", LOGO, "What is it?", model=gguf, extra=["--think"])
        r = c.chat.completions.create(
            model="tiny", messages=user(image_part(LOGO), text="What is it?"), temperature=0,
            max_tokens=N, logprobs=True, top_logprobs=5)
        assert r.choices[0].message.content.encode() == printed
        lp = sorted(log_softmax(last), reverse=True)[:5]
        top = r.choices[0].logprobs.content[0].top_logprobs
        for t, want in zip(top, lp):
            assert abs(t.logprob - want) < 1e-4, (t.logprob, want)
    finally:
        s.stop()
