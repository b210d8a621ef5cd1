#!/usr/bin/env python3
"""Embed tests/fixtures/bert-minilm's reference texts with llama.cpp (llama-cpp-python,
``Llama(..., embedding=True)``) on a BERT GGUF (tools/ref/gguf_embedding_convert.py's output
for all-MiniLM-L6-v2) (the texts without line breaks, which a one-per-line file can carry) and
compare, by cosine, with

* sentence-transformers' ``encode(..., normalize_embeddings=True)`` (the fixture's
  embeddings.npy) on the texts sentence-transformers did not cut (the GGUF carries the context
  length, 512, not ``max_seq_length`` 256) and llama.cpp tokenizes as transformers does (the
  others are listed);
* oxinfer's embeddings of the same GGUF (``--oxinfer OUT.npy`` from
  ``oxinfer embed -m MODEL.gguf -f TEXTS -o OUT.npy``; ``--write-texts`` writes TEXTS), on the
  same texts, and oxinfer against sentence-transformers on every uncut text.

Prints the worst cosine of each comparison and exits non-zero when one is below 0.99999.

``--tiny`` instead runs llama.cpp on the committed tiny GGUFs (tests/fixtures/bert-tiny-gguf,
nomic-bert-tiny-gguf) and compares with their folders' references (bert-tiny's mean pool,
normalized here; nomic-bert-tiny's ``encode``) on the texts llama.cpp tokenizes as transformers
does: the check that llama.cpp reads those files, the NomicBERT layout included, as oxinfer does.

Usage (reference venv):
  .../python tools/ref/ref_gguf_embedding_llamacpp.py /tmp/minilm.gguf --write-texts /tmp/texts.txt
  oxinfer embed -m /tmp/minilm.gguf -f /tmp/texts.txt -o /tmp/ox.npy
  .../python tools/ref/ref_gguf_embedding_llamacpp.py /tmp/minilm.gguf --oxinfer /tmp/ox.npy
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from llama_cpp import Llama

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "bert-minilm"
MIN_COSINE = 0.99999
MAX_SEQ = 256  # all-MiniLM-L6-v2's max_seq_length


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


def tiny() -> bool:
    ok = True
    for name, want_file in (("bert-tiny", "pooled_mean.npy"), ("nomic-bert-tiny", "embeddings.npy")):
        ref = json.loads((FIX.parent / name / "reference.json").read_text())
        want = np.load(FIX.parent / name / want_file).astype(np.float64)
        llm = Llama(model_path=str(FIX.parent / f"{name}-gguf" / "model.gguf"), embedding=True,
                    n_ctx=64, n_batch=64, n_ubatch=64, verbose=False)
        same = [i for i, t in enumerate(ref["texts"])
                if llm.tokenize(t["text"].encode(), add_bos=True, special=False) == t["ids"]]
        got = np.array([llm.embed(ref["texts"][i]["text"], normalize=True) for i in same])
        c = cosines(got, want[same])
        print(f"{name}-gguf: llama.cpp vs the reference on {len(same)} texts with the same ids, "
              f"worst cosine {c.min():.8f}")
        ok &= bool(c.min() >= MIN_COSINE)
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf", type=Path, nargs="?")
    ap.add_argument("--tiny", action="store_true", help="check the committed tiny GGUFs")
    ap.add_argument("--write-texts", type=Path, help="write the texts, one per line, and stop")
    ap.add_argument("--oxinfer", type=Path, help="oxinfer's embeddings of the texts (.npy)")
    a = ap.parse_args()
    if a.tiny:
        return 0 if tiny() else 1
    if a.gguf is None:
        ap.error("give a GGUF file or --tiny")
    ref = json.loads((FIX / "reference.json").read_text())
    # The texts without line breaks (they go through a one-per-line file).
    rows = [i for i, t in enumerate(ref["texts"]) if "\n" not in t["text"] and "\r" not in t["text"]]
    texts = [ref["texts"][i]["text"] for i in rows]
    if a.write_texts:
        a.write_texts.write_text("\n".join(texts) + "\n")
        print(f"wrote {len(texts)} texts to {a.write_texts}")
        return 0
    llm = Llama(model_path=str(a.gguf), embedding=True, n_ctx=512, n_batch=512, n_ubatch=512,
                verbose=False)
    got = np.array([llm.embed(t, normalize=True) for t in texts], dtype=np.float64)
    st = np.load(FIX / "embeddings.npy").astype(np.float64)[rows]
    # The texts llama.cpp tokenizes as transformers does (its WordPiece differs on some scripts,
    # words over 100 characters and special-token strings in the text) and sentence-transformers
    # did not cut.
    same = []
    for k, i in enumerate(rows):
        want = ref["texts"][i]["ids"]
        ids = llm.tokenize(texts[k].encode(), add_bos=True, special=False)
        if len(want) < MAX_SEQ and ids == want:
            same.append(k)
        elif len(want) < MAX_SEQ:
            print(f"  llama.cpp tokenizes text {i} {texts[k][:30]!r} otherwise "
                  f"({len(ids)} vs {len(want)} ids)")
    ok = True
    c = cosines(got[same], st[same])
    print(f"llama.cpp vs sentence-transformers: {len(same)} uncut texts with the same ids, "
          f"worst cosine {c.min():.8f}")
    ok &= bool(c.min() >= MIN_COSINE)
    if a.oxinfer:
        ox = np.load(a.oxinfer).astype(np.float64)
        c = cosines(got[same], ox[same])
        print(f"llama.cpp vs oxinfer: the same {len(same)} texts, worst cosine {c.min():.8f}")
        ok &= bool(c.min() >= MIN_COSINE)
        kept = [k for k, i in enumerate(rows) if len(ref["texts"][i]["ids"]) < MAX_SEQ]
        c = cosines(ox[kept], st[kept])
        print(f"oxinfer vs sentence-transformers: {len(kept)} uncut texts, "
              f"worst cosine {c.min():.8f}")
        ok &= bool(c.min() >= MIN_COSINE)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
