"""`oxinfer serve` on a reranker (the tiny cross-encoder fixture,
tests/fixtures/bert-cross-encoder) through plain HTTP (the `openai` client has no rerank):
`POST /v1/rerank` and `/rerank` scores within 1e-5 of sentence-transformers'
`CrossEncoder.predict`, best first, `top_n` and `return_documents`; bad input gets a clear 400,
and the embedding / chat endpoints of a reranker server and `/v1/rerank` of an embedding server
answer 400. The tiny Qwen3-Reranker (tests/fixtures/qwen3-reranker-tiny) is served the same way,
its scores within 1e-5 of the model card's computation, with the default instruction and with the
request's own. Concurrent requests (batched together by the server) keep their own scores."""

import json
import urllib.error
from concurrent.futures import ThreadPoolExecutor
import urllib.request
from pathlib import Path

import pytest

import conftest

ROOT = Path(__file__).resolve().parents[4]
CROSS = ROOT / "tests" / "fixtures" / "bert-cross-encoder"
TINY = ROOT / "tests" / "fixtures" / "bert-tiny"
REF = json.loads((CROSS / "reference.json").read_text())
DOCS = [p["document"] for p in REF["pairs"]]
SCORES = [p["score"] for p in REF["pairs"]]
QWEN = ROOT / "tests" / "fixtures" / "qwen3-reranker-tiny"


@pytest.fixture(scope="module")
def server():
    s = conftest.Server("--api-key", "k", model=str(CROSS))
    yield s
    s.stop()


def post(url, path, body, key="k"):
    req = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_scores_match_cross_encoder_predict(server):
    status, r = post(server.url, "/v1/rerank", {"query": REF["query"], "documents": DOCS})
    assert status == 200, r
    assert [x["index"] for x in r["results"]] == REF["rank"]
    for x in r["results"]:
        assert abs(x["relevance_score"] - SCORES[x["index"]]) <= 1e-5
    assert r["usage"]["total_tokens"] == sum(len(p["ids"]) for p in REF["pairs"])


def test_concurrent_requests_each_get_their_own_scores(server):
    # Requests waiting together run as one batch of pairs; each keeps its own query's scores.
    def one(i):
        docs = DOCS[i % len(DOCS):] or DOCS
        query = REF["query"] if i % 2 == 0 else "another question entirely"
        status, r = post(server.url, "/v1/rerank", {"query": query, "documents": docs})
        assert status == 200, r
        return i, query, docs, {x["index"]: x["relevance_score"] for x in r["results"]}

    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(one, range(36)))
    for i, query, docs, scores in results:
        status, alone = post(server.url, "/v1/rerank", {"query": query, "documents": docs})
        assert status == 200, alone
        for x in alone["results"]:
            assert abs(scores[x["index"]] - x["relevance_score"]) <= 1e-6, (i, x)
        if query == REF["query"]:
            first = i % len(DOCS)
            for j, s in scores.items():
                assert abs(s - SCORES[first + j]) <= 1e-5, (i, j)


def test_instruction_is_refused_by_a_cross_encoder(server):
    body = {"query": REF["query"], "documents": DOCS, "instruction": "find answers"}
    status, r = post(server.url, "/v1/rerank", body)
    assert status == 400, r
    assert "takes no instruction" in r["error"]["message"]
    assert r["error"]["param"] == "instruction"


def test_top_n_documents_and_alias_path(server):
    body = {"query": REF["query"], "documents": [{"text": d} for d in DOCS], "top_n": 2,
            "return_documents": True}
    status, r = post(server.url, "/rerank", body)
    assert status == 200, r
    assert [x["index"] for x in r["results"]] == REF["rank"][:2]
    assert r["results"][0]["document"]["text"] == DOCS[REF["rank"][0]]


@pytest.mark.parametrize("body,needle", [
    ({"query": "q", "documents": []}, "empty"),
    ({"query": "q", "documents": ["x"] * 2049}, "at most"),
    ({"query": "q", "documents": "x"}, "documents"),
    ({"query": 3, "documents": ["x"]}, "query"),
    ({"query": "q", "documents": ["x"], "top_n": 0}, "top_n"),
    ({"query": "q", "documents": ["capital " * 100], "truncate": False}, "limit"),
])
def test_bad_input_is_a_400(server, body, needle):
    status, r = post(server.url, "/v1/rerank", body)
    assert status == 400, r
    assert needle in r["error"]["message"]


def test_other_endpoints_say_what_the_server_serves(server):
    status, r = post(server.url, "/v1/embeddings", {"input": "x"})
    assert status == 400 and "reranker" in r["error"]["message"]
    s = conftest.Server("--api-key", "k", model=str(TINY))
    try:
        status, r = post(s.url, "/v1/rerank", {"query": "q", "documents": ["x"]})
        assert status == 400 and "not a reranker" in r["error"]["message"]
    finally:
        s.stop()


def test_qwen3_reranker_scores_match_the_model_card():
    ref = json.loads((QWEN / "reference.json").read_text())
    docs = [d["document"] for d in ref["documents"]]
    s = conftest.Server("--api-key", "k", model=str(QWEN))
    try:
        status, r = post(s.url, "/v1/rerank", {"query": ref["query"], "documents": docs})
        assert status == 200, r
        want = [d["score"] for d in ref["documents"]]
        assert [x["index"] for x in r["results"]] == sorted(range(len(docs)),
                                                           key=lambda i: -want[i])
        for x in r["results"]:
            assert abs(x["relevance_score"] - want[x["index"]]) <= 1e-5
        assert r["usage"]["total_tokens"] == sum(len(d["ids"]) for d in ref["documents"])
        # A task instruction of the request's own (tools/ref/ref_qwen3_reranker_instruction.py).
        ref = json.loads((QWEN / "reference_instruction.json").read_text())
        body = {"query": ref["query"], "documents": docs, "instruction": ref["instruction"]}
        status, r = post(s.url, "/v1/rerank", body)
        assert status == 200, r
        for x in r["results"]:
            assert abs(x["relevance_score"] - ref["documents"][x["index"]]["score"]) <= 1e-5
    finally:
        s.stop()
