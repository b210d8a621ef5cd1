#!/usr/bin/env python3
"""Make the tiny random cross-encoder (reranker) fixture in tests/fixtures/bert-cross-encoder/.

The model: a BertForSequenceClassification in the ms-marco-MiniLM layout (``bert.*`` encoder,
``bert.pooler.dense`` tanh pooler over [CLS], ``classifier`` with one label): 2 layers, hidden
32, 4 heads, MLP 64, 64 positions, 2 token types, random weights (LayerNorm gains and biases
random too), the trimmed WordPiece tokenizer of tests/fixtures/bert-tiny, saved by
sentence-transformers' ``CrossEncoder`` (max_length 40, default activation: sigmoid).

References (``reference.json``), float32 from transformers / sentence-transformers:
* per (query, document) pair: input ids and token types (``longest_first`` truncation to 40),
  the classifier logit of a one-pair run, the logit of a padded batch of all pairs, and
  ``CrossEncoder.predict`` (sigmoid of the logit) and ``CrossEncoder.rank`` order.

Run with the reference venv (needs the bert-tiny fixture first):
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_cross_encoder.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import sentence_transformers
import torch
import transformers
from sentence_transformers import CrossEncoder
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "tests" / "fixtures" / "bert-tiny"
OUT = REPO / "tests" / "fixtures" / "bert-cross-encoder"
MAX_LEN = 40

QUERY = "what is the capital of france?"
DOCS = [
    "Paris is the capital and largest city of France.",
    "The quick brown fox jumps over the lazy dog.",
    "",
    "Berlin is the capital of Germany; Paris is the capital of France, and this document is "
    "long enough that the forty-token limit of the tiny model cuts it somewhere in the middle.",
    "Café naïve résumé — Größe!",
    "capital",
]


def main() -> None:
    torch.manual_seed(21)
    if OUT.exists():
        shutil.rmtree(OUT)
    hf = OUT / "hf"
    hf.mkdir(parents=True)
    shutil.copy(SRC / "tokenizer.json", hf / "tokenizer.json")
    tcfg = json.loads((SRC / "tokenizer_config.json").read_text())
    tcfg["model_max_length"] = MAX_LEN
    (hf / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=1))
    vocab = len(json.loads((SRC / "tokenizer.json").read_text())["model"]["vocab"])
    cfg = BertConfig(
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        type_vocab_size=2,
        hidden_act="gelu",
        initializer_range=0.2,
        num_labels=1,
    )
    model = BertForSequenceClassification(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
    model.save_pretrained(hf, safe_serialization=True)
    ce = CrossEncoder(str(hf), max_length=MAX_LEN, device="cpu")
    ce.save(str(OUT), safe_serialization=True)
    shutil.rmtree(hf)
    (OUT / "README.md").unlink(missing_ok=True)

    ce = CrossEncoder(str(OUT), device="cpu")
    tok = AutoTokenizer.from_pretrained(str(OUT))
    model = BertForSequenceClassification.from_pretrained(str(OUT)).eval()
    pairs = [(QUERY, d) for d in DOCS]
    refs = {
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "torch": torch.__version__,
        "max_length": MAX_LEN,
        "query": QUERY,
        "pairs": [],
    }
    with torch.no_grad():
        batch = tok([QUERY] * len(DOCS), DOCS, truncation="longest_first", max_length=MAX_LEN,
                    padding=True, return_tensors="pt")
        batch_logits = model(**batch).logits[:, 0].tolist()
        scores = ce.predict(pairs, batch_size=4).tolist()
        for i, d in enumerate(DOCS):
            # A list of one pair: a bare `tok(QUERY, "")` drops an empty document and encodes
            # the query alone, which CrossEncoder.predict (and a padded batch) does not.
            enc = tok([QUERY], [d], truncation="longest_first", max_length=MAX_LEN,
                      return_tensors="pt")
            logit = model(**enc).logits[0, 0].item()
            refs["pairs"].append({
                "document": d,
                "ids": enc["input_ids"][0].tolist(),
                "type_ids": enc["token_type_ids"][0].tolist(),
                "logit": logit,
                "batch_logit": batch_logits[i],
                "score": scores[i],
            })
    refs["rank"] = [r["corpus_id"] for r in ce.rank(QUERY, DOCS)]
    (OUT / "reference.json").write_text(json.dumps(refs, ensure_ascii=False, indent=1) + "\n")
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({size} bytes, vocab {vocab})")


if __name__ == "__main__":
    main()
