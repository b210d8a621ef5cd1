"""Speculative decoding per request: `"speculative": {"lookup": N}` and, on a server started
with `--draft`, `{"draft_max": N}` give the plain greedy reply (scalar kernels, whose rows do
not depend on how many run together); bad values are refused with 400 naming the field, and a
draft model of another vocabulary stops the server at start with the first differing token."""

import json
import os
import urllib.error
import urllib.request

import pytest

from conftest import MODEL, Server

GEMMA = os.path.join(os.path.dirname(MODEL), "gemma-3-270m-q4_k_m.gguf")

PROMPT = (
    "Repeat this code exactly, but rename add to plus:\n"
    "fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n"
)


def post(url, body):
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def scalar(*args, **kw):
    """A server on the scalar kernels (the environment restored after its start)."""
    old = os.environ.get("OXINFER_KERNELS")
    os.environ["OXINFER_KERNELS"] = "scalar"
    try:
        return Server(*args, **kw)
    finally:
        if old is None:
            del os.environ["OXINFER_KERNELS"]
        else:
            os.environ["OXINFER_KERNELS"] = old


@pytest.fixture(scope="module")
def scalar_server():
    s = scalar("--parallel", "2", "--ctx", "512")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def draft_server():
    """SmolLM2 drafting for itself; requests speculate only when they ask (--draft-max 0)."""
    s = scalar("--parallel", "2", "--ctx", "512", "--draft", MODEL, "--draft-max", "0")
    yield s
    s.stop()


def draft_counts(url):
    """(drafted, accepted) tokens from /metrics."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    def value(name):
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"{name} missing from /metrics")
    return value("oxinfer_draft_tokens_total"), value("oxinfer_draft_accepted_tokens_total")


def chat(url, **extra):
    body = {
        "messages": [{"role": "user", "content": PROMPT}],
        "temperature": 0,
        "max_tokens": 32,
    }
    body.update(extra)
    return post(url, body)


def test_lookup_request_gives_the_plain_greedy_reply(scalar_server):
    status, plain = chat(scalar_server.url)
    assert status == 200, plain
    status, spec = chat(scalar_server.url, speculative={"lookup": 8})
    assert status == 200, spec
    assert spec["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]


def test_bad_speculative_fields_are_refused(scalar_server):
    status, err = chat(scalar_server.url, speculative={"lookup": 1000})
    assert status == 400 and "speculative" in json.dumps(err), err
    status, err = chat(scalar_server.url, speculative={"draft": 4})
    assert status == 400, err


def test_draft_model_request_gives_the_plain_greedy_reply(draft_server):
    url = draft_server.url
    status, plain = chat(url)
    assert status == 200, plain
    assert draft_counts(url) == (0, 0), "nothing drafted without the request asking"
    status, spec = chat(url, speculative={"draft_max": 4})
    assert status == 200, spec
    assert spec["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    drafted, accepted = draft_counts(url)
    assert drafted > 0, drafted
    # The model drafting for itself on the scalar kernels: its greedy drafts are the target's,
    # so only the draft that runs past the end-of-turn token loses tokens (at most draft_max).
    assert drafted - 4 <= accepted <= drafted, (drafted, accepted)
    # A reply cut by max_tokens: every drafted token is accepted.
    status, cut = chat(url, speculative={"draft_max": 4}, max_tokens=12)
    assert status == 200 and cut["choices"][0]["finish_reason"] == "length", cut
    d2, a2 = draft_counts(url)
    assert d2 > drafted and a2 - accepted == d2 - drafted, (d2 - drafted, a2 - accepted)


def test_draft_max_without_a_draft_model_is_refused(scalar_server):
    status, err = chat(scalar_server.url, speculative={"draft_max": 4})
    assert status == 400 and "--draft" in json.dumps(err), err
    status, err = chat(scalar_server.url, speculative={"draft_max": 0})
    assert status == 200, err
    status, err = chat(scalar_server.url, speculative={"draft_max": 65})
    assert status == 400 and "speculative" in json.dumps(err), err


@pytest.mark.skipif(not os.path.exists(GEMMA), reason="gemma-3-270m not fetched")
def test_draft_of_another_vocabulary_stops_the_server():
    with pytest.raises(RuntimeError) as e:
        Server("--parallel", "1", "--ctx", "256", "--draft", GEMMA)
    assert "vocabulary differs" in str(e.value) and "at token" in str(e.value), str(e.value)
