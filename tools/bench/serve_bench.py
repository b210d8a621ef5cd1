"""Load generator for OpenAI-compatible servers: C concurrent clients, each sending R streamed
chat requests one after another (loopback only, bounded count and time), after --warmup
requests (default 1) that are not counted. Prints aggregate
generated tokens/s and time-to-first-token p50/p99 per concurrency level, as a markdown table.

    python tools/bench/serve_bench.py --url http://127.0.0.1:8080 --clients 1,4,16 \
        --requests 2 --max-tokens 64 [--label oxinfer]

Only the standard library is used, so the same driver measures every server alike. Generated
tokens are the server's `usage.completion_tokens` when it sends usage, else one per content
chunk."""

import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a bicycle works.",
    "Describe the water cycle to a child.",
    "List some facts about the Moon.",
    "What makes a good cup of tea?",
    "Tell me about the history of paper.",
    "How do bees make honey?",
    "Describe a walk through a forest in autumn.",
]


def one_request(url, model, prompt, max_tokens, deadline):
    """Streams one chat completion; returns (ttft seconds, generated tokens, total seconds)."""
    u = urllib.parse.urlparse(url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("serve_bench only targets loopback servers")
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=max(1.0, deadline - time.time()))
    body = json.dumps({
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    })
    t0 = time.time()
    conn.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    ttft, chunks, usage = None, 0, None
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        ev = json.loads(data)
        if ev.get("usage"):
            usage = ev["usage"].get("completion_tokens")
        for ch in ev.get("choices") or []:
            if (ch.get("delta") or {}).get("content"):
                chunks += 1
                if ttft is None:
                    ttft = time.time() - t0
    conn.close()
    return ttft or (time.time() - t0), usage if usage is not None else chunks, time.time() - t0


def level(url, model, clients, requests, max_tokens, budget_s):
    results, errors = [], []
    deadline = time.time() + budget_s
    lock = threading.Lock()

    def client(i):
        for r in range(requests):
            if time.time() > deadline:
                return
            try:
                out = one_request(url, model, PROMPTS[(i + r) % len(PROMPTS)], max_tokens, deadline)
                with lock:
                    results.append(out)
            except Exception as e:  # reported, not fatal
                with lock:
                    errors.append(str(e))

    t0 = time.time()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    tokens = sum(r[1] for r in results)
    ttfts = sorted(r[0] for r in results)
    p = lambda q: ttfts[min(len(ttfts) - 1, int(q * len(ttfts)))] if ttfts else float("nan")
    return {
        "clients": clients, "requests": len(results), "errors": len(errors),
        "tokens": tokens, "tok_s": tokens / wall if wall > 0 else 0.0,
        "ttft_p50": statistics.median(ttfts) if ttfts else float("nan"), "ttft_p99": p(0.99),
        "wall": wall,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default="default")
    ap.add_argument("--label", default="server")
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--requests", type=int, default=2, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--budget", type=float, default=300, help="seconds per level at most")
    ap.add_argument("--warmup", type=int, default=1,
                    help="requests sent one after another before measuring (not counted): a "
                         "server's first request may pay one-time costs (GPU graph capture)")
    a = ap.parse_args()
    for i in range(a.warmup):
        one_request(a.url, a.model, PROMPTS[i % len(PROMPTS)], a.max_tokens, time.time() + a.budget)
    print(f"| server | clients | requests | generated tokens | aggregate tok/s | TTFT p50 (s) | TTFT p99 (s) | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for c in [int(x) for x in a.clients.split(",")]:
        r = level(a.url, a.model, c, a.requests, a.max_tokens, a.budget)
        print(f"| {a.label} | {c} | {r['requests']} | {r['tokens']} | {r['tok_s']:.1f} | "
              f"{r['ttft_p50']:.2f} | {r['ttft_p99']:.2f} | {r['errors']} |", flush=True)


if __name__ == "__main__":
    main()
