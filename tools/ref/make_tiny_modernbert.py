#!/usr/bin/env python3
"""Make the tiny random ModernBERT sentence-transformers fixture in tests/fixtures/modernbert-tiny/.

The model: transformers' ``ModernBertModel`` (pre-norm blocks, the first without an attention
norm; fused ``Wqkv``; rotary positions with θ 160000 on global and 10000 on local layers; local
layers attend to keys at distance ≤ ``local_attention / 2``; GeGLU MLP ``Wo(gelu(in) · gate)``
from one ``Wi``; LayerNorms without biases; a final norm) with 3 layers (global, local, local),
hidden 32, 4 heads, MLP 48, ``local_attention`` 8 (so texts of 24 tokens see the window),
random weights (norm gains random too), the trimmed WordPiece tokenizer of
tests/fixtures/bert-tiny (``[CLS] … [SEP]``), saved by sentence-transformers as Transformer
(max_seq_length 24) → Pooling (mean) → Normalize with modernbert-embed's ``search_query: `` /
``search_document: `` prompts.

References (``reference.json`` + ``.npy``, float32, st_fixture.embedding_references): per text
the input ids and unpadded ``last_hidden_state`` rows (``hidden.npy``), ``encode`` in padded
batches of 3 without and with ``prompt_name="query"`` (``embeddings.npy``,
``embeddings_query.npy``).

Run with the reference venv (needs the bert-tiny fixture):
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_modernbert.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from sentence_transformers import models
from st_fixture import embedding_references, folder_size, randomize, save_sentence_transformer
from transformers import ModernBertConfig, ModernBertModel

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "tests" / "fixtures" / "bert-tiny"
OUT = REPO / "tests" / "fixtures" / "modernbert-tiny"
MAX_SEQ = 24

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "a",
    "",
    "Café naïve résumé — Größe!",
    "你好，世界",
    "This text is long enough that the twenty-four token limit of the tiny model cuts it off "
    "somewhere in the middle of the second half of the sentence.",
    "🤗 emoji",
]


def main() -> None:
    torch.manual_seed(26)
    if OUT.exists():
        shutil.rmtree(OUT)
    hf = OUT / "hf"
    hf.mkdir(parents=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(SRC / f, hf / f)
    tok = json.loads((SRC / "tokenizer.json").read_text())
    vocab = len(tok["model"]["vocab"])
    ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
    cfg = ModernBertConfig(
        vocab_size=vocab, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=64, hidden_activation="gelu",
        layer_types=["full_attention", "sliding_attention", "sliding_attention"],
        local_attention=8, norm_eps=1e-5, norm_bias=False, attention_bias=False, mlp_bias=False,
        pad_token_id=ids["[PAD]"], cls_token_id=ids["[CLS]"], sep_token_id=ids["[SEP]"],
        bos_token_id=ids["[CLS]"], eos_token_id=ids["[SEP]"], initializer_range=0.2,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
    cfg._attn_implementation = "eager"
    model = ModernBertModel(cfg).eval()
    randomize(model, lambda name: "norm.weight" in name, weight_std=0.2)
    model.save_pretrained(hf, safe_serialization=True)
    save_sentence_transformer(
        OUT, MAX_SEQ, [models.Pooling(32, pooling_mode="mean"), models.Normalize()],
        {"query": "search_query: ", "document": "search_document: "})
    embedding_references(OUT, TEXTS, MAX_SEQ, 3, ["query"],
                         {"local_attention": cfg.local_attention})
    print(f"wrote {OUT} ({folder_size(OUT)} bytes, vocab {vocab})")


if __name__ == "__main__":
    main()
