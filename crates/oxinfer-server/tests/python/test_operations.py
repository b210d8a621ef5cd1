"""Operating the server (issue 24 items 3, 5 and 7; issue 17 items 2, 3 and 8): the Host and
Origin checks a browser page meets, CORS for listed origins, HTTP timeouts and the connection
limit, model names, the port check, the request log, the status page, per-request timing in
/metrics, and no file paths in client-facing errors."""

import json
import os
import re
import socket
import subprocess
import time
import urllib.parse

import openai
import pytest

from conftest import BIN, MODEL, Server
from test_openai import MODEL_NAME, client, metric, raw

GEMMA = os.path.join(os.path.dirname(MODEL), "gemma-3-270m-q4_k_m.gguf")
PAGE = "http://localhost:3000"


@pytest.fixture(scope="module")
def guarded():
    """Strict model names with an alias, a listed host and origin, JSON request log."""
    s = Server("--parallel", "2", "--strict-model-names", "--alias", "gpt-4o-mini",
               "--allowed-host", "my-box.lan", "--cors-origin", PAGE, "--log-format", "json")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def tight():
    """Two connections at most, 2 s to send headers or a body."""
    s = Server("--parallel", "1", "--max-connections", "2", "--header-timeout", "2",
               "--body-timeout", "2")
    yield s
    s.stop()


def hostport(server):
    u = urllib.parse.urlparse(server.url)
    return u.hostname, u.port


def chat(server, headers=None, **extra):
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 2, "temperature": 0, **extra}
    return raw("POST", server.url + "/v1/chat/completions", body, headers)


# --- Host (DNS rebinding) and Origin (other sites) -------------------------------------------

def test_foreign_host_is_403_on_every_route(server):
    """A page whose name was re-pointed at 127.0.0.1 sends its own name as Host."""
    for method, path in [("GET", "/v1/models"), ("GET", "/health"), ("GET", "/"),
                         ("POST", "/v1/chat/completions")]:
        body = {"messages": [{"role": "user", "content": "Hi"}]} if method == "POST" else None
        r = raw(method, server.url + path, body, {"Host": "evil.example:8080"})
        assert r.status_code == 403, (path, r.text)
        err = r.json()["error"]
        assert err["param"] == "Host" and err["code"] == "host_not_allowed"
        assert "evil.example" in err["message"] and "--allowed-host" in err["message"]
    _, port = hostport(server)
    for ok in [f"localhost:{port}", f"127.0.0.1:{port}", "[::1]", "app.localhost"]:
        assert raw("GET", server.url + "/v1/models", headers={"Host": ok}).status_code == 200, ok


def test_allowed_host_is_accepted(guarded):
    assert raw("GET", guarded.url + "/health", headers={"Host": "my-box.lan:80"}).status_code == 200
    assert raw("GET", guarded.url + "/health", headers={"Host": "other.lan"}).status_code == 403


def test_request_from_another_site_is_403(server):
    """No origin is allowed by default: a page cannot read or drive the API, even with a
    JSON body (which a page can send with fetch after a preflight the server refuses)."""
    for origin in ["https://evil.example", "null", "http://localhost:3000"]:
        r = chat(server, {"Origin": origin})
        assert r.status_code == 403, (origin, r.text)
        err = r.json()["error"]
        assert err["param"] == "Origin" and err["code"] == "origin_not_allowed"
        assert "--cors-origin" in err["message"]
        assert "access-control-allow-origin" not in {k.lower() for k in r.headers.keys()}
    r = raw("OPTIONS", server.url + "/v1/chat/completions",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert r.status_code == 403


def test_listed_origin_gets_cors_and_preflight(guarded):
    r = raw("OPTIONS", guarded.url + "/v1/chat/completions",
            headers={"Origin": PAGE, "Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": "authorization, content-type"})
    assert r.status_code == 204, r.text
    assert r.headers["access-control-allow-origin"] == PAGE
    assert "POST" in r.headers["access-control-allow-methods"]
    assert "content-type" in r.headers["access-control-allow-headers"]
    r = chat(guarded, {"Origin": PAGE})
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == PAGE
    assert "Origin" in r.headers["vary"]
    r = chat(guarded, {"Origin": "http://localhost:3001"})
    assert r.status_code == 403


# --- Timeouts and the connection limit ---------------------------------------------------------

def read_until_closed(sock, limit):
    """Bytes the server sends until it closes the connection (or `limit` seconds pass)."""
    sock.settimeout(limit)
    out = b""
    try:
        while True:
            b = sock.recv(4096)
            if not b:
                return out, True
            out += b
    except (socket.timeout, ConnectionResetError):
        return out, False


def test_slowloris_headers_are_cut_off_and_others_still_served(tight):
    """A client sending its headers one byte every 0.5 s is cut off after the 2 s header
    timeout; a normal request made meanwhile is answered."""
    s = socket.create_connection(hostport(tight))
    request = b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 100
    t0 = time.time()
    closed = False
    for byte in request:
        try:
            s.send(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
        if time.time() - t0 > 1 and time.time() - t0 < 1.5:
            assert raw("GET", tight.url + "/health").status_code == 200
        time.sleep(0.5)
        s.settimeout(0.01)
        try:
            if s.recv(4096) == b"":
                closed = True
                break
        except socket.timeout:
            pass
    took = time.time() - t0
    s.close()
    assert closed, "the slow sender was never cut off"
    assert took < 6, f"cut off only after {took:.1f} s"


def test_idle_keepalive_connection_is_closed(tight):
    s = socket.create_connection(hostport(tight))
    s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
    t0 = time.time()
    out, closed = read_until_closed(s, 8)
    s.close()
    assert out.startswith(b"HTTP/1.1 200"), out[:100]
    assert closed and time.time() - t0 < 6


def test_slow_body_is_408(tight):
    s = socket.create_connection(hostport(tight))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
              b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
    t0 = time.time()
    out, _ = read_until_closed(s, 8)
    s.close()
    assert out.startswith(b"HTTP/1.1 408"), out[:200]
    assert b"--body-timeout" in out
    assert time.time() - t0 < 5


def test_connections_over_the_limit_wait_without_hurting_served_ones(tight):
    """Two connections at most: a third waits (unaccepted) while the two are open; the two
    keep being served; when one closes, the third is answered."""
    a = socket.create_connection(hostport(tight))
    b = socket.create_connection(hostport(tight))
    time.sleep(0.2)
    c = socket.create_connection(hostport(tight))  # the kernel's backlog takes it
    c.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    a.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
    a.settimeout(5)
    assert a.recv(4096).startswith(b"HTTP/1.1 200")  # a served connection is not hurt
    c.settimeout(0.8)
    with pytest.raises(socket.timeout):
        c.recv(4096)  # the third waits
    b.close()
    out, _ = read_until_closed(c, 5)
    assert out.startswith(b"HTTP/1.1 200"), out[:100]
    a.close()
    c.close()


# --- Model names -------------------------------------------------------------------------------

def test_strict_model_names_and_aliases(guarded):
    c = client(guarded)
    assert [m.id for m in c.models.list().data] == [MODEL_NAME, "gpt-4o-mini"]
    r = c.chat.completions.create(model="gpt-4o-mini", max_tokens=2,
                                  messages=[{"role": "user", "content": "hi"}])
    assert r.model == MODEL_NAME
    with pytest.raises(openai.NotFoundError) as e:
        c.chat.completions.create(model="no-such-model",
                                  messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["code"] == "model_not_found"
    assert "--strict-model-names" in e.value.body["message"]


# --- Start-up, errors without paths, the request log, the status page ---------------------------

def test_busy_port_is_reported_before_loading_the_model(server):
    """The address is checked first: the error names it even with a model that does not exist."""
    _, port = hostport(server)
    t0 = time.time()
    out = subprocess.run([BIN, "serve", "-m", "/no/such/model.gguf", "--port", str(port)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert f"127.0.0.1:{port}" in out.stderr and "in use" in out.stderr, out.stderr
    assert "no/such" not in out.stderr, out.stderr
    assert time.time() - t0 < 10


@pytest.mark.skipif(not os.path.exists(GEMMA), reason="gemma-3-270m (no chat template) not fetched")
def test_model_without_template_says_so_and_errors_hold_no_paths():
    s = Server("--parallel", "1", "--ctx", "256", model=GEMMA)
    try:
        startup = "".join(s.log)
        assert "no chat template" in startup and "/v1/completions" in startup, startup
        r = raw("POST", s.url + "/v1/chat/completions",
                {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
        assert r.status_code == 400
        assert "no chat template" in r.text
        models_dir = os.path.dirname(GEMMA)
        for text in [r.text, raw("POST", s.url + "/v1/completions",
                                 {"prompt": "Hi", "max_tokens": 2}).text]:
            assert models_dir not in text and ".gguf" not in text, text
    finally:
        s.stop()


def test_one_log_line_per_request(guarded):
    before = len(guarded.log)
    r = chat(guarded, max_tokens=3)
    assert r.status_code == 200
    usage = r.json()["usage"]
    stream = client(guarded).chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
        temperature=0, stream=True)
    streamed = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    assert streamed
    raw("GET", guarded.url + "/nope")
    time.sleep(0.3)
    lines = [json.loads(l) for l in guarded.log[before:] if l.startswith("{")]
    chats = [l for l in lines if l["path"] == "/v1/chat/completions"]
    assert len(chats) == 2, lines
    for l in chats:
        assert l["method"] == "POST" and l["status"] == 200
        assert l["prompt_tokens"] == usage["prompt_tokens"]
        assert l["completion_tokens"] == usage["completion_tokens"]
        assert l["duration_ms"] > 0 and l["time"].endswith("Z")
    assert [l["status"] for l in lines if l["path"] == "/nope"] == [404]


def test_text_log_line(server):
    before = len(server.log)
    assert chat(server, max_tokens=2).status_code == 200
    time.sleep(0.2)
    assert any(re.search(r"Z POST /v1/chat/completions 200 tokens=\d+\+\d+ \d+\.\d+s$", l.strip())
               for l in server.log[before:]), server.log[before:]


def test_status_page(server):
    r = raw("GET", server.url + "/")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    for word in [MODEL_NAME, "/v1/chat/completions", "/v1/completions", "/metrics", "uptime"]:
        assert word in r.text, word
    assert "<script" not in r.text and "src=" not in r.text and "href=" not in r.text


# --- Per-request timing in /metrics ------------------------------------------------------------

def histogram(server, name):
    text = raw("GET", server.url + "/metrics").text
    buckets = {m.group(1): float(m.group(2)) for m in
               re.finditer(rf'^{name}_bucket{{le="([^"]+)"}} (\S+)$', text, re.M)}
    count = float(re.search(rf"^{name}_count (\S+)$", text, re.M).group(1))
    total = float(re.search(rf"^{name}_sum (\S+)$", text, re.M).group(1))
    assert f"# TYPE {name} histogram" in text
    return buckets, count, total


def test_step_and_first_token_times_in_metrics(server):
    names = ["oxinfer_step_seconds", "oxinfer_time_to_first_token_seconds",
             "oxinfer_time_per_output_token_seconds"]
    before = {n: histogram(server, n)[1] for n in names}
    steps_before = metric(server, "oxinfer_step_seconds_count")
    r = chat(server, max_tokens=6, messages=[{"role": "user", "content": "Count to ten."}])
    assert r.status_code == 200
    for n in names:
        buckets, count, total = histogram(server, n)
        values = list(buckets.values())
        assert values == sorted(values), (n, buckets)  # cumulative
        assert buckets["+Inf"] == count and total > 0
    assert histogram(server, names[1])[1] >= before[names[1]] + 1
    assert histogram(server, names[2])[1] >= before[names[2]] + 1
    assert metric(server, "oxinfer_step_seconds_count") >= steps_before + 2
