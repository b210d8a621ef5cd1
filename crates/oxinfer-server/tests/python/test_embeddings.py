"""`oxinfer serve` on an embedding model (the tiny BERT sentence-transformers fixture,
tests/fixtures/bert-tiny), driven by the official `openai` client's `embeddings.create`. The
reference is `oxinfer embed` (itself checked against sentence-transformers), also for concurrent
requests (batched together by the server); bad input gets a clear 400, and a chat model's server
answers /v1/embeddings with a 400."""

import base64
import json
import math
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

import conftest
from conftest import BIN

ROOT = Path(__file__).resolve().parents[4]
TINY = ROOT / "tests" / "fixtures" / "bert-tiny"
TEXTS = [t["text"] for t in json.loads((TINY / "reference.json").read_text())["texts"]]
REF_IDS = [t["ids"] for t in json.loads((TINY / "reference.json").read_text())["texts"]]


class EmbedServer(conftest.Server):
    """A `Server` on the tiny embedding model."""

    def __init__(self, *args):
        super().__init__(*args, model=str(TINY))


@pytest.fixture(scope="module")
def embed_server():
    s = EmbedServer("--api-key", "k")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(embed_server):
    return openai.OpenAI(base_url=embed_server.url + "/v1", api_key="k", max_retries=0)


def cli_embeddings(texts):
    """`oxinfer embed` JSON lines for `texts`."""
    args = [BIN, "embed", "-m", str(TINY), "-t", "2"]
    for t in texts:
        args += ["-p", t]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [json.loads(line)["embedding"] for line in out.splitlines()]


def close(a, b, tol=1e-5):
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b))


def test_list_of_strings_matches_cli(client):
    r = client.embeddings.create(model="bert-tiny", input=TEXTS, encoding_format="float")
    want = cli_embeddings(TEXTS)
    assert [d.index for d in r.data] == list(range(len(TEXTS)))
    for d, w in zip(r.data, want):
        assert close(d.embedding, w)
        assert abs(math.sqrt(sum(x * x for x in d.embedding)) - 1) < 1e-5
    assert r.usage.prompt_tokens == sum(len(i) for i in REF_IDS)
    assert r.usage.total_tokens == r.usage.prompt_tokens
    assert r.model == "bert-tiny"


def test_concurrent_requests_each_get_their_own_embeddings(client):
    # The server runs the texts of the requests waiting together as one batch; each request
    # must still get exactly its own rows.
    want = cli_embeddings(TEXTS)

    def one(i):
        text = TEXTS[i % len(TEXTS)]
        inputs = [text, TEXTS[(i + 1) % len(TEXTS)]] if i % 3 == 0 else text
        r = client.embeddings.create(model="bert-tiny", input=inputs, encoding_format="float")
        return i, [d.embedding for d in r.data]

    with ThreadPoolExecutor(16) as pool:
        for i, got in pool.map(one, range(64)):
            assert close(got[0], want[i % len(TEXTS)]), i
            if i % 3 == 0:
                assert len(got) == 2 and close(got[1], want[(i + 1) % len(TEXTS)]), i


def test_default_base64_and_single_string(client):
    # The client asks for base64 by default and decodes it.
    r = client.embeddings.create(model="bert-tiny", input=TEXTS[1])
    assert len(r.data) == 1 and close(r.data[0].embedding, cli_embeddings([TEXTS[1]])[0])


def test_raw_base64_is_little_endian_float32(embed_server):
    body = json.dumps({"input": "Hello world", "encoding_format": "base64"}).encode()
    req = urllib.request.Request(
        embed_server.url + "/v1/embeddings", data=body,
        headers={"Content-Type": "application/json", "Authorization": "Bearer k"})
    with urllib.request.urlopen(req) as resp:
        data = json.load(resp)["data"][0]["embedding"]
    raw = base64.b64decode(data)
    floats = list(struct.unpack(f"<{len(raw) // 4}f", raw))
    assert close(floats, cli_embeddings(["Hello world"])[0])


def test_token_arrays(client):
    ids = [i[1:-1] for i in REF_IDS[:2]]  # without [CLS]/[SEP]: the server adds them
    r = client.embeddings.create(model="bert-tiny", input=ids, encoding_format="float")
    for d, w in zip(r.data, cli_embeddings(TEXTS[:2])):
        assert close(d.embedding, w)
    one = client.embeddings.create(model="bert-tiny", input=ids[0], encoding_format="float")
    assert close(one.data[0].embedding, r.data[0].embedding)


def test_dimensions(client):
    ok = client.embeddings.create(model="bert-tiny", input="x", dimensions=16)
    assert len(ok.data[0].embedding) == 16
    with pytest.raises(openai.BadRequestError, match="Matryoshka"):
        client.embeddings.create(model="bert-tiny", input="x", dimensions=8)


def test_bad_input_gets_a_clear_400(client):
    with pytest.raises(openai.BadRequestError, match="empty list"):
        client.embeddings.create(model="bert-tiny", input=[])
    with pytest.raises(openai.BadRequestError, match="at most 2048"):
        client.embeddings.create(model="bert-tiny", input=["x"] * 10000)
    long = "word " * 100
    with pytest.raises(openai.BadRequestError, match="limit of 24"):
        client.embeddings.create(model="bert-tiny", input=["ok", long],
                                 extra_body={"truncate": False})
    cut = client.embeddings.create(model="bert-tiny", input=long)
    assert cut.usage.prompt_tokens == 24
    with pytest.raises(openai.BadRequestError, match="outside the vocabulary"):
        client.embeddings.create(model="bert-tiny", input=[[999999]])
    with pytest.raises(openai.BadRequestError, match="encoding_format"):
        client.embeddings.create(model="bert-tiny", input="x", encoding_format="int8")
    # Any model name is answered by the one model (as the chat server does), unless the server
    # was started with --strict-model-names.
    assert client.embeddings.create(model="text-embedding-3-small", input="x").model == "bert-tiny"
    strict = EmbedServer("--strict-model-names")
    try:
        c = openai.OpenAI(base_url=strict.url + "/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.NotFoundError):
            c.embeddings.create(model="gpt-4", input="x")
        assert c.embeddings.create(model="bert-tiny", input="x").data
    finally:
        strict.stop()


def test_generation_endpoints_say_they_are_unavailable(client):
    with pytest.raises(openai.BadRequestError, match="embedding model"):
        client.chat.completions.create(model="bert-tiny",
                                       messages=[{"role": "user", "content": "hi"}])


def test_api_key_is_required(embed_server):
    bad = openai.OpenAI(base_url=embed_server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.embeddings.create(model="bert-tiny", input="x")


def test_chat_model_server_refuses_embeddings(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="not an embedding model"):
        c.embeddings.create(model="SmolLM2-135M-Instruct.Q4_1", input="x")
