"""A Gemma 4 drafter (`gemma4_assistant`) given to `oxinfer serve --draft`: requests that ask
for drafts (`"speculative": {"draft_max": N}`) draft from the served model's own state and get
the plain greedy reply, which is transformers' greedy continuation of the fixture's prompt.

The tiny fixtures (tests/fixtures/gemma4-tiny-dense and gemma4-assistant-tiny, made by
tools/ref/make_tiny_gemma4_assistant.py) have no tokenizer, so the test serves a copy of the
target with a word-level tokenizer whose token `wN` is id N: a prompt of such words is the
fixture's prompt ids, and a reply's words are its generated ids."""

import concurrent.futures
import json
import os
import re
import urllib.error
import urllib.request

import pytest

from conftest import Server

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "tests", "fixtures")
TARGET = os.path.join(FIXTURES, "gemma4-tiny-dense")
DRAFTER = os.path.join(FIXTURES, "gemma4-assistant-tiny")
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]


def word_level_tokenizer(vocab_size):
    """tokenizer.json of a word-level vocabulary: the four specials, then `wN` for id N."""
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    vocab.update({f"w{i}": i for i in range(len(SPECIALS), vocab_size)})
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, t in enumerate(SPECIALS)
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(server, prompt ids, transformers' greedy ids) for the target with a tokenizer, drafting
    with the tiny drafter; requests speculate only when they ask (`--draft-max 0`)."""
    model = tmp_path_factory.mktemp("gemma4-words")
    for name in ["config.json", "generation_config.json", "model.safetensors"]:
        os.symlink(os.path.abspath(os.path.join(TARGET, name)), model / name)
    with open(os.path.join(TARGET, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    (model / "tokenizer.json").write_text(json.dumps(word_level_tokenizer(vocab)))
    with open(os.path.join(DRAFTER, "reference.json")) as f:
        ref = json.load(f)
    s = Server("--parallel", "2", "--ctx", "256", "--draft", DRAFTER, "--draft-max", "0",
               model=str(model))
    yield s, ref["prompt"], ref["greedy_ids"]
    s.stop()


def complete(url, prompt_ids, adds_bos, **extra):
    """`/v1/completions` of the prompt ids written as words (the leading BOS left to the
    server when it adds one), greedy, as many tokens as transformers generated."""
    ids = prompt_ids[1:] if adds_bos else prompt_ids
    body = {"prompt": " ".join(SPECIALS[i] if i < 4 else f"w{i}" for i in ids),
            "temperature": 0, "max_tokens": 32}
    body.update(extra)
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def draft_counts(url):
    """(drafted, accepted) tokens from /metrics."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    found = {}
    for line in text.splitlines():
        for name in ["oxinfer_draft_tokens_total", "oxinfer_draft_accepted_tokens_total"]:
            if line.startswith(name + " "):
                found[name] = float(line.split()[1])
    return found["oxinfer_draft_tokens_total"], found["oxinfer_draft_accepted_tokens_total"]


def reply_ids(reply):
    return [int(w) for w in re.findall(r"w(\d+)", reply["choices"][0]["text"])]


def test_drafter_requests_give_transformers_greedy_reply(served):
    server, prompt, greedy = served
    url = server.url
    # Whether the server puts the BOS itself: the prompt must come to the fixture's 12 ids.
    status, plain = complete(url, prompt, adds_bos=True)
    assert status == 200, plain
    adds_bos = plain["usage"]["prompt_tokens"] == len(prompt)
    if not adds_bos:
        status, plain = complete(url, prompt, adds_bos=False)
        assert status == 200 and plain["usage"]["prompt_tokens"] == len(prompt), plain
    assert reply_ids(plain) == greedy, (reply_ids(plain), greedy)
    assert draft_counts(url) == (0, 0), "nothing drafted without the request asking"
    status, spec = complete(url, prompt, adds_bos, speculative={"draft_max": 4})
    assert status == 200, spec
    assert spec["choices"][0]["text"] == plain["choices"][0]["text"]
    drafted, accepted = draft_counts(url)
    assert drafted > 0 and 0 <= accepted <= drafted, (drafted, accepted)


def test_drafter_requests_run_beside_plain_ones(served):
    """Two requests at once, one drafting and one not, each get the plain reply."""
    server, prompt, greedy = served
    status, first = complete(server.url, prompt, adds_bos=True)
    adds_bos = first["usage"]["prompt_tokens"] == len(prompt)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        spec = pool.submit(complete, server.url, prompt, adds_bos, speculative={"draft_max": 3})
        plain = pool.submit(complete, server.url, prompt, adds_bos, max_tokens=20)
        (s1, r1), (s2, r2) = spec.result(), plain.result()
    assert s1 == 200 and s2 == 200, (r1, r2)
    assert reply_ids(r1) == greedy and reply_ids(r2) == greedy[:20], (reply_ids(r1), reply_ids(r2))


def test_drafter_for_another_model_stops_the_server():
    """A Gemma 4 drafter given to a server of another family (the default test model,
    SmolLM2): the start fails saying what the folder is and what the model is."""
    with pytest.raises(RuntimeError) as e:
        Server("--parallel", "1", "--ctx", "256", "--draft", DRAFTER)
    assert "drafter" in str(e.value) and "not Gemma 4" in str(e.value), str(e.value)
