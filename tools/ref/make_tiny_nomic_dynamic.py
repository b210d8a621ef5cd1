#!/usr/bin/env python3
"""Make the tiny random NomicBERT fixture with dynamic NTK RoPE scaling in
tests/fixtures/nomic-bert-dynamic/.

nomic-embed-text runs past its trained length by scaling the rotary base ("dynamic" RoPE:
``θ · (factor · n / trained − (factor − 1))^(d / (d − 2))`` for a sequence of ``n > trained``
tokens). The model: transformers' ``NomicBertModel`` as in make_tiny_nomic_bert.py (2 layers,
hidden 32, 4 heads of 8, gated SiLU MLP 48, the bert-tiny WordPiece tokenizer), trained length
``max_position_embeddings`` 16, ``rope_parameters`` ``{"rope_type": "dynamic", "factor": 2.0}``,
saved by sentence-transformers as Transformer (max_seq_length 32) → Pooling (mean) → Normalize.

sentence-transformers caps a model's input at ``max_position_embeddings`` (16 here) unless told
otherwise; nomic's remote-code config reaches its longer ``n_positions`` that way (GPT-2's
``max_position_embeddings`` is ``n_positions``), and users of transformers' spelling raise
``max_seq_length`` by hand. So there are two sets of embeddings: ``embeddings.npy`` with
``max_seq_length`` raised to 32 (the texts' ids and ``hidden.npy`` are at that length too) and
``embeddings_trained.npy`` with sentence-transformers' default cap of 16.

transformers' dynamic RoPE keeps state between calls (it grows its tables with the longest
sequence seen and the padded batch's length decides), so every reference here comes from a
freshly loaded model and one text at a time: per text the input ids (cut at 32),
``last_hidden_state`` (``hidden.npy``, rows concatenated) and ``SentenceTransformer.encode``.
Texts range from 2 tokens to the 32-token limit, so both sides of the trained length are
covered.

Run with the reference venv (needs the bert-tiny fixture):
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_nomic_dynamic.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import sentence_transformers
import torch
import transformers
from sentence_transformers import SentenceTransformer, models
from make_tiny_nomic_bert import save_tiny_nomic
from st_fixture import folder_size, save_sentence_transformer, write_json
from transformers import AutoModel, AutoTokenizer

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "nomic-bert-dynamic"
TRAINED = 16
MAX_SEQ = 32

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "A sentence just past the trained sixteen tokens of this tiny model.",
    "Longer still: this one runs well beyond sixteen tokens, so the rotary base is stretched "
    "for it, and it is cut at the thirty-two token limit somewhere near the end.",
    "Café naïve résumé — Größe! 你好，世界",
    "",
]


def main() -> None:
    save_tiny_nomic(OUT, 31, TRAINED, {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1000.0})
    save_sentence_transformer(OUT, MAX_SEQ, [models.Pooling(32, pooling_mode="mean"),
                                             models.Normalize()], {})

    tok = AutoTokenizer.from_pretrained(str(OUT))
    refs = {
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "torch": torch.__version__,
        "max_seq_length": MAX_SEQ,
        "trained_length": TRAINED,
        "texts": [],
    }
    hidden, emb, emb_trained = [], [], []
    with torch.no_grad():
        for t in TEXTS:
            enc = tok(t, truncation=True, max_length=MAX_SEQ, return_tensors="pt")
            fresh = AutoModel.from_pretrained(str(OUT)).eval()
            hidden.append(fresh(**enc).last_hidden_state[0].numpy())
            st = SentenceTransformer(str(OUT), device="cpu")
            assert st.max_seq_length == TRAINED, st.max_seq_length
            emb_trained.append(st.encode([t], convert_to_numpy=True)[0])
            st = SentenceTransformer(str(OUT), device="cpu")
            st.max_seq_length = MAX_SEQ
            emb.append(st.encode([t], convert_to_numpy=True)[0])
            refs["texts"].append({"text": t, "ids": enc["input_ids"][0].tolist()})
    lens = [len(r["ids"]) for r in refs["texts"]]
    assert min(lens) < TRAINED < max(lens) == MAX_SEQ, lens
    np.save(OUT / "hidden.npy", np.concatenate(hidden).astype(np.float32))
    np.save(OUT / "embeddings.npy", np.stack(emb).astype(np.float32))
    np.save(OUT / "embeddings_trained.npy", np.stack(emb_trained).astype(np.float32))
    write_json(OUT / "reference.json", refs)
    print(f"wrote {OUT} ({folder_size(OUT)} bytes), token counts {lens}")


if __name__ == "__main__":
    main()
