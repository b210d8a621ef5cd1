#!/usr/bin/env python3
"""Speed reference for `oxinfer embed`: writes 1,000 texts of 16-128 tokens (seeded) to
``--texts`` (one per line) and times sentence-transformers (torch CPU, ``--threads`` threads)
encoding them with all-MiniLM-L6-v2, batch 32, after one warm-up batch. Prints sentences/s.
Time oxinfer on the same file with:
    time oxinfer embed -m all-minilm-l6-v2 -t 2 -f TEXTS -o /tmp/e.npy
Run with the reference venv:
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/bench_embed_st.py --texts /tmp/texts.txt
"""

import argparse
import os
import random
import time
from pathlib import Path

WORDS = ("the of and to in is was for on that with as by at from his an were are which this be "
         "embedding vector model search query document retrieval sentence local engine rust "
         "kernel matrix token attention layer norm batch speed memory cache thread core "
         "question answer paris france river mountain city music science history").split()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", default="/tmp/oxinfer-embed-texts.txt")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=1000)
    a = ap.parse_args()
    rng = random.Random(20)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(14, 120))) for _ in range(a.n)]
    Path(a.texts).write_text("\n".join(texts) + "\n")
    import torch
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(a.threads)
    model = os.environ.get("OXINFER_MINILM",
                           str(Path.home() / ".cache/oxinfer/models/all-MiniLM-L6-v2"))
    st = SentenceTransformer(model, device="cpu")
    st.encode(texts[:32], batch_size=32)
    t0 = time.perf_counter()
    st.encode(texts, batch_size=32, normalize_embeddings=True)
    dt = time.perf_counter() - t0
    print(f"sentence-transformers {a.threads} threads: {a.n} texts in {dt:.2f} s = "
          f"{a.n / dt:.1f} sentences/s")


if __name__ == "__main__":
    main()
