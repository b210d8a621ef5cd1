"""Load generator for `/v1/embeddings`: C concurrent clients, each posting one text per request
(the texts of embed_bench.py: seeded, 16–128 tokens), for each concurrency level; prints texts/s
and request latency p50/p99 as a markdown table. Loopback only.

    ~/.cache/oxinfer/refvenv/bin/python tools/bench/embed_serve_bench.py \\
        --url http://127.0.0.1:8080 --tokenizer ~/.cache/oxinfer/models/all-MiniLM-L6-v2 \\
        --clients 1,4,16 --n 400
"""

import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse

from transformers import AutoTokenizer

from embed_bench import make_texts


def run_level(url, texts, clients):
    """Posts every text of `texts`, `clients` requests at a time: (seconds, latencies)."""
    u = urllib.parse.urlparse(url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("embed_serve_bench only targets loopback servers")
    lock = threading.Lock()
    todo = list(reversed(texts))
    latencies = []

    def client():
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        while True:
            with lock:
                if not todo:
                    return
                text = todo.pop()
            t0 = time.perf_counter()
            conn.request("POST", "/v1/embeddings", json.dumps({"input": text}),
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            body = r.read()
            if r.status != 200:
                raise SystemExit(f"HTTP {r.status}: {body[:200]!r}")
            with lock:
                latencies.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, sorted(latencies)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--clients", default="1,16")
    p.add_argument("--n", type=int, default=400)
    p.add_argument("--label", default="oxinfer")
    a = p.parse_args()
    texts = make_texts(AutoTokenizer.from_pretrained(a.tokenizer), a.n)
    run_level(a.url, texts[:16], 4)  # warm-up
    print("| server | clients | texts/s | latency p50 / p99 |")
    print("|---|---:|---:|---:|")
    for c in [int(x) for x in a.clients.split(",")]:
        secs, lat = run_level(a.url, texts, c)
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        print(f"| {a.label} | {c} | {len(texts) / secs:.1f} | "
              f"{statistics.median(lat) * 1000:.0f} / {p99 * 1000:.0f} ms |")


if __name__ == "__main__":
    main()
