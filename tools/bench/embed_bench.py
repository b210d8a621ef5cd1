"""Side-by-side embedding speed: sentences/s for N texts of 16-128 tokens with
all-MiniLM-L6-v2 through sentence-transformers (torch CPU, THREADS threads), `oxinfer embed`
(-t THREADS) and, when given, llama.cpp's `llama-embedding` on a GGUF conversion, run back to
back ROUNDS times (the same texts, the same batch size).

    ~/.cache/oxinfer/refvenv/bin/python tools/bench/embed_bench.py \
        --model ~/.cache/oxinfer/models/all-MiniLM-L6-v2 --oxinfer target/release/oxinfer \
        [--llama-embedding PATH --gguf MODEL.gguf] [--threads 2] [--rounds 2] [--n 1000]

The texts are made deterministically (seed 20) from a fixed word list: text i gets a token
length drawn uniformly from 16..128 (specials included, WordPiece ids of the model). Times:
sentence-transformers `encode` only (model loaded before timing); oxinfer and llama.cpp whole
processes (model loading included), so the comparison is not in oxinfer's favour. The worst
cosine between oxinfer's and sentence-transformers' vectors is printed as a check.
"""

import argparse
import os
import random
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
    a = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(a.threads)
    st = SentenceTransformer(a.model, device="cpu")
    texts = make_texts(st.tokenizer, a.n)
    lens = [len(st.tokenizer(t)["input_ids"]) for t in texts]
    print(f"{len(texts)} texts, {min(lens)}-{max(lens)} tokens (mean {np.mean(lens):.1f}), "
          f"{a.threads} threads, batch {a.batch}, load average {os.getloadavg()[0]:.1f}")
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "texts.txt")
    with open(path, "w") as f:
        f.write("\n".join(texts) + "\n")
    st.encode(texts[:64], batch_size=a.batch)  # warm-up

    for r in range(a.rounds):
        t0 = time.perf_counter()
        ref = st.encode(texts, batch_size=a.batch, normalize_embeddings=True)
        st_s = time.perf_counter() - t0
        out = os.path.join(tmp, "ox.npy")
        t0 = time.perf_counter()
        subprocess.run([a.oxinfer, "embed", "-m", a.model, "-f", path, "-o", out,
                        "-t", str(a.threads), "--batch", str(a.batch)], check=True,
                       stderr=subprocess.DEVNULL)
        ox_s = time.perf_counter() - t0
        ox = np.load(out)
        cos = float((ox * ref).sum(1).min())
        line = (f"round {r + 1}: sentence-transformers {a.n / st_s:7.1f} texts/s ({st_s:.2f} s) | "
                f"oxinfer {a.n / ox_s:7.1f} texts/s ({ox_s:.2f} s, worst cosine {cos:.6f})")
        if a.llama_embedding and a.gguf:
            t0 = time.perf_counter()
            subprocess.run([a.llama_embedding, "-m", a.gguf, "-f", path, "-t", str(a.threads),
                            "--pooling", "mean", "--embd-normalize", "2", "-b", "8192",
                            "-ub", "8192", "--embd-output-format", "array"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            ll_s = time.perf_counter() - t0
            line += f" | llama-embedding {a.n / ll_s:7.1f} texts/s ({ll_s:.2f} s)"
        line += f" | load average {os.getloadavg()[0]:.1f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
