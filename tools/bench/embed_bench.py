"""Side-by-side embedding speed: sentences/s for N texts of 16-128 tokens with
all-MiniLM-L6-v2 through sentence-transformers (torch CPU, THREADS threads), `oxinfer embed`
(-t THREADS) and, when given, llama.cpp's `llama-embedding` on a GGUF conversion, run back to
back ROUNDS times (the same texts, the same batch size).

    ~/.cache/oxinfer/refvenv/bin/python tools/bench/embed_bench.py \
        --model ~/.cache/oxinfer/models/all-MiniLM-L6-v2 --oxinfer target/release/oxinfer \
        [--llama-embedding PATH --gguf MODEL.gguf [--ll-batch 8192]] [--threads 2] [--rounds 2]
        [--n 1000] [--batch 32] [--int16]

The texts are made deterministically (seed 20) from a fixed word list: text i gets a token
length drawn uniformly from 16..128 (specials included, WordPiece ids of the model). Times:
sentence-transformers `encode` only (model loaded before timing); oxinfer and llama.cpp whole
processes (model loading included), so the comparison is not in oxinfer's favour. Each round
prints one markdown table row: the three speeds (with each run's CPU seconds, user + system: on
a machine shared with other work they compare engines better than wall time), oxinfer's ratio
to the faster reference, and
the worst cosines between the engines' vectors (a check that all three compute the same thing).
With --int16, oxinfer also runs with OXINFER_INT16_GEMM=1 (the opt-in int16 GEMM of the
encoders, AVX2 and AVX-512 VNNI CPUs) in each round, as its own column; the ratio column is
then that run's.
"""

import argparse
import json
import os
import random
import resource
import subprocess
import tempfile
import time

import numpy as np

WORDS = (
    "the of and to in is was for on that with as by at from his her an were are which this be "
    "or has had not but its it also first one their new after two who other time they year "
    "people city world during state school government between river music family water house "
    "history century system number energy language model network computer research science "
    "mountain village station market garden library animal winter summer morning evening "
    "quickly slowly brightly carefully unexpected remarkable ordinary ancient modern digital "
    "embedding sentence retrieval question answer document search index vector similarity "
    "Zürich naïve café résumé 東京 データ 😀 co-operation state-of-the-art 3.14 42 1999 e-mail"
).split()


def make_texts(tokenizer, n, seed=20):
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        target = rng.randint(16, 128)
        words = []
        while True:
            words.append(rng.choice(WORDS))
            text = " ".join(words)
            if len(tokenizer(text)["input_ids"]) >= target:
                break
        texts.append(text)
    return texts


def run_oxinfer(a, path, out, int16=False):
    """Whole `oxinfer embed` process (with OXINFER_INT16_GEMM=1 when `int16`): seconds and the
    (n, dim) vectors it wrote."""
    env = dict(os.environ, OXINFER_INT16_GEMM="1" if int16 else "0")
    t0, c0 = time.perf_counter(), children_cpu()
    subprocess.run([a.oxinfer, "embed", "-m", a.model, "-f", path, "-o", out,
                    "-t", str(a.threads), "--batch", str(a.batch)], check=True,
                   stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t0, children_cpu() - c0, np.load(out)


def children_cpu():
    """CPU seconds (user + system) of the finished child processes so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_llama(a, path):
    """Whole `llama-embedding` process (mean pooling, L2-normalized, batch and context of
    LL_BATCH tokens so as many texts as fit run in one pass): seconds and its vectors."""
    b = str(a.ll_batch)
    t0, c0 = time.perf_counter(), children_cpu()
    res = subprocess.run([a.llama_embedding, "-m", a.gguf, "-f", path, "-t", str(a.threads),
                          "--pooling", "mean", "--embd-normalize", "2", "-b", b, "-ub", b,
                          "-c", b, "--embd-output-format", "array"],
                         check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    secs = time.perf_counter() - t0
    return secs, children_cpu() - c0, np.array(json.loads(res.stdout), dtype=np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--oxinfer", required=True)
    ap.add_argument("--llama-embedding")
    ap.add_argument("--gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--int16", action="store_true",
                    help="also run oxinfer with OXINFER_INT16_GEMM=1 (its own column)")
    ap.add_argument("--ll-batch", type=int, default=8192,
                    help="llama-embedding's -b/-ub/-c (tokens per pass; at most 256 texts)")
    a = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(a.threads)
    st = SentenceTransformer(a.model, device="cpu")
    texts = make_texts(st.tokenizer, a.n)
    lens = [len(st.tokenizer(t)["input_ids"]) for t in texts]
    llama = bool(a.llama_embedding and a.gguf)
    print(f"{len(texts)} texts, {min(lens)}-{max(lens)} tokens (mean {np.mean(lens):.1f}), "
          f"{a.threads} threads, batch {a.batch}"
          + (f" (llama-embedding {a.ll_batch} tokens, {os.path.basename(a.gguf)})" if llama else "")
          + f", load average {os.getloadavg()[0]:.1f}")
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "texts.txt")
    with open(path, "w") as f:
        f.write("\n".join(texts) + "\n")
    st.encode(texts[:64], batch_size=a.batch)  # warm-up

    header = "| round | sentence-transformers | oxinfer | "
    header += "oxinfer int16 | " if a.int16 else ""
    header += "llama-embedding | " if llama else ""
    header += "oxinfer / faster reference | worst cosine oxinfer vs ST | "
    header += "worst cosine int16 vs ST | " if a.int16 else ""
    header += "worst cosine llama vs ST | worst cosine llama vs oxinfer | " if llama else ""
    header += "load average (1 min) |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for r in range(a.rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        ref = st.encode(texts, batch_size=a.batch, normalize_embeddings=True)
        st_s, st_cpu = time.perf_counter() - t0, time.process_time() - c0
        ox_s, ox_cpu, ox = run_oxinfer(a, path, os.path.join(tmp, "ox.npy"))
        cells = [f"{r + 1}", f"{a.n / st_s:.1f} texts/s ({st_s:.2f} s, {st_cpu:.1f} CPU s)",
                 f"{a.n / ox_s:.1f} texts/s ({ox_s:.2f} s, {ox_cpu:.1f} CPU s)"]
        best = a.n / st_s
        cos = [float((ox * ref).sum(1).min())]
        if a.int16:
            i16_s, i16_cpu, i16 = run_oxinfer(a, path, os.path.join(tmp, "ox16.npy"),
                                              int16=True)
            cells.append(f"{a.n / i16_s:.1f} texts/s ({i16_s:.2f} s, {i16_cpu:.1f} CPU s)")
            cos.append(float((i16 * ref).sum(1).min()))
            ox_s = i16_s
        if llama:
            ll_s, ll_cpu, ll = run_llama(a, path)
            cells.append(f"{a.n / ll_s:.1f} texts/s ({ll_s:.2f} s, {ll_cpu:.1f} CPU s)")
            best = max(best, a.n / ll_s)
            cos += [float((ll * ref).sum(1).min()), float((ll * ox).sum(1).min())]
        cells.append(f"{a.n / ox_s / best:.2f}×")
        cells += [f"{c:.6f}" for c in cos]
        cells.append(f"{os.getloadavg()[0]:.1f}")
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
