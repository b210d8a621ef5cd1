"""Speculative decoding per request: `"speculative": {"lookup": N}` gives the plain greedy
reply (scalar kernels, whose rows do not depend on how many run together), and bad values are
refused with 400 naming the field."""

import json
import os
import urllib.error
import urllib.request

import pytest

from conftest import Server

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


@pytest.fixture(scope="module")
def scalar_server():
    old = os.environ.get("OXINFER_KERNELS")
    os.environ["OXINFER_KERNELS"] = "scalar"
    try:
        s = Server("--parallel", "2", "--ctx", "512")
    finally:
        if old is None:
            del os.environ["OXINFER_KERNELS"]
        else:
            os.environ["OXINFER_KERNELS"] = old
    yield s
    s.stop()


def chat(url, **extra):
    body = {
        "messages": [{"role": "user", "content": PROMPT}],
        "temperature": 0,
        "max_tokens": 32,
        **extra,
    }
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
