"""Images in `/v1/chat/completions` on the tiny Qwen 3.5 vision fixture
(tests/fixtures/qwen35-vl-tiny, checked against transformers by
crates/oxinfer/tests/qwen35_vision_tiny.rs): the reply to an `image_url` part has the greedy
tokens and first-token log-probabilities of `oxinfer run --image --think` on the same file (the
server leaves the template's thinking on, as `--think` does), so the soft tokens and their
multimodal rotary positions ride with the request through continuous batching; a resent image
is not encoded again and gives the same reply."""

from pathlib import Path

import openai
import pytest

import conftest
from test_media import N, cli, image_part, log_softmax, token_bytes, user
from test_openai import metric

ROOT = Path(__file__).resolve().parents[4]
TINY = ROOT / "tests" / "fixtures" / "qwen35-vl-tiny"
LOGO = TINY / "logo.png"
WIDE = TINY / "wide.png"


@pytest.fixture(scope="module")
def qwen_server():
    s = conftest.Server("--parallel", "2", "--ctx", "512", model=str(TINY))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(qwen_server):
    return openai.OpenAI(base_url=qwen_server.url + "/v1", api_key="none", max_retries=0)


def test_image_reply_matches_the_cli(client):
    ids, _, last = cli("--image", LOGO, "What is it?", model=TINY, extra=["--think"])
    r = client.chat.completions.create(
        model="tiny", messages=user(image_part(LOGO), text="What is it?"), temperature=0,
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
    # 54 soft tokens for the 160x120 logo (72x48 after smart_resize, 2x2 merge of 4-px patches).
    assert r.usage.prompt_tokens > 54


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
