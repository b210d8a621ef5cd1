#!/usr/bin/env python3
"""Make the tiny random NomicBERT sentence-transformers fixture in tests/fixtures/nomic-bert-tiny/.

The model: transformers' ``NomicBertModel`` (the nomic-embed-text architecture: post-norm blocks,
rotary positions over the whole head in ``rotate_half`` layout, θ 1000, no biases in the
projections, gated SiLU MLP ``down(silu(gate(x)) · up(x))``, two token types) with 2 layers,
hidden 32, 4 heads, MLP 48, random weights (LayerNorm gains and biases random too), the trimmed
WordPiece tokenizer of tests/fixtures/bert-tiny (nomic-embed-text uses bert-base-uncased's), saved
by sentence-transformers as Transformer (max_seq_length 24) → Pooling (mean) → Normalize with
nomic-embed's ``search_query: `` / ``search_document: `` prompts.

References (``reference.json`` + ``.npy``), float32 from transformers / sentence-transformers:
per text the input ids and ``last_hidden_state`` rows (``hidden.npy``), ``encode`` output without
and with ``prompt_name="query"`` (``embeddings.npy``, ``embeddings_query.npy``), and a pair
(token types 0 and 1) through the model (``hidden_pair.npy``).

Run with the reference venv (needs the bert-tiny fixture):
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_nomic_bert.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch
from sentence_transformers import SentenceTransformer, models
from st_fixture import (embedding_references, folder_size, randomize, save_sentence_transformer,
                        write_json)
from transformers import AutoTokenizer, NomicBertConfig, NomicBertModel

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "tests" / "fixtures" / "bert-tiny"
OUT = REPO / "tests" / "fixtures" / "nomic-bert-tiny"
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
PAIR = ("what is the answer?", "the answer is forty two.")


def save_tiny_nomic(out: Path, seed: int, max_positions: int, rope_parameters: dict) -> None:
    """Writes ``out/hf``: bert-tiny's tokenizer and a random ``NomicBertModel`` (2 layers, hidden
    32, 4 heads, gated SiLU MLP 48, 2 token types) with ``max_position_embeddings`` and
    ``rope_parameters`` as given, drawn from torch's generator seeded with ``seed``; removes an
    older ``out`` first."""
    torch.manual_seed(seed)
    if out.exists():
        shutil.rmtree(out)
    hf = out / "hf"
    hf.mkdir(parents=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(SRC / f, hf / f)
    vocab = len(json.loads((SRC / "tokenizer.json").read_text())["model"]["vocab"])
    cfg = NomicBertConfig(
        vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=max_positions, type_vocab_size=2,
        hidden_act="silu", initializer_range=0.2, rope_parameters=rope_parameters)
    model = NomicBertModel(cfg, add_pooling_layer=False).eval()
    randomize(model, lambda name: "layernorm.weight" in name.lower(), weight_std=0.2)
    model.save_pretrained(hf, safe_serialization=True)


def main() -> None:
    save_tiny_nomic(OUT, 25, 64, {"rope_type": "default", "rope_theta": 1000.0})
    save_sentence_transformer(
        OUT, MAX_SEQ, [models.Pooling(32, pooling_mode="mean"), models.Normalize()],
        {"query": "search_query: ", "document": "search_document: "})

    refs = embedding_references(OUT, TEXTS, MAX_SEQ, 3, ["query"])
    tok = AutoTokenizer.from_pretrained(str(OUT))
    model = SentenceTransformer(str(OUT), device="cpu")[0].auto_model.eval()
    with torch.no_grad():
        pair = tok(*PAIR, return_tensors="pt")
        hp = model(**pair).last_hidden_state[0].numpy()
    refs["pair"] = {"a": PAIR[0], "b": PAIR[1], "ids": pair["input_ids"][0].tolist(),
                    "type_ids": pair["token_type_ids"][0].tolist()}
    np.save(OUT / "hidden_pair.npy", hp.astype(np.float32))
    write_json(OUT / "reference.json", refs)
    print(f"wrote {OUT} ({folder_size(OUT)} bytes, vocab {tok.vocab_size})")


if __name__ == "__main__":
    main()
