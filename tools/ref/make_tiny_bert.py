#!/usr/bin/env python3
"""Make the tiny random BERT sentence-transformers fixture in tests/fixtures/bert-tiny/.

The model: a BertModel (2 layers, hidden 32, 4 heads, MLP 64, 64 positions, 2 token types, exact
GELU) with random weights (LayerNorm gains and biases random too), a WordPiece vocabulary cut
from all-MiniLM-L6-v2's (specials, single characters, the 2,000 commonest words and pieces, every
``##`` character; ids renumbered), saved by sentence-transformers as
Transformer (max_seq_length 24) → Pooling (mean) → Dense (32 → 16, tanh) → Normalize, with a
``query`` prompt.

References (``reference.json`` + ``.npy``), all float32 from transformers / sentence-transformers:
* per text: input ids (specials, truncation to 24), last hidden states ``[t, 32]`` (all texts
  concatenated in ``hidden.npy``), the pooled vector under every pooling mode
  (``pooled_<mode>.npy``, ``[n_texts, 32]``), and ``SentenceTransformer.encode`` output
  (``embeddings.npy``) and with ``prompt_name="query"`` (``embeddings_query.npy``);
* a pair (token types 0 and 1) through the BertModel: ids, type ids and ``hidden_pair.npy``.

Run with the reference venv (needs bert-tokenizer fixture first):
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_bert.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import sentence_transformers
import torch
import transformers
from sentence_transformers import SentenceTransformer, models
from transformers import AutoTokenizer, BertConfig, BertModel

REPO = Path(__file__).resolve().parents[2]
SRC_TOK = REPO / "tests" / "fixtures" / "bert-tokenizer" / "tokenizer.json"
OUT = REPO / "tests" / "fixtures" / "bert-tiny"
MAX_SEQ = 24

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "a",
    "",
    "Café naïve résumé — Größe!",
    "你好，世界",
    "unbelievably tokenized sentence-pieces, with punctuation?!",
    "This text is long enough that the twenty-four token limit of the tiny model cuts it off "
    "somewhere in the middle of the second half of the sentence.",
    "[MASK] in the text",
    "🤗 emoji",
]
PAIR = ("what is the answer?", "the answer is forty two.")
POOL_MODES = ["cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"]


def tiny_tokenizer(dst: Path) -> int:
    j = json.loads(SRC_TOK.read_text())
    vocab = j["model"]["vocab"]
    keep = sorted(
        (i, t)
        for t, i in vocab.items()
        if i == 0 or 100 <= i <= 103 or 999 <= i < 3000 or i >= 29612
    )
    new = {t: n for n, (_, t) in enumerate(keep)}
    j["model"]["vocab"] = new
    for a in j["added_tokens"]:
        a["id"] = new[a["content"]]
    for s in j["post_processor"]["special_tokens"].values():
        s["ids"] = [new[t] for t in s["tokens"]]
    j["truncation"] = None
    j["padding"] = None
    (dst / "tokenizer.json").write_text(json.dumps(j, ensure_ascii=False))
    shutil.copy(SRC_TOK.parent / "tokenizer_config.json", dst / "tokenizer_config.json")
    return len(new)


def main() -> None:
    torch.manual_seed(20)
    if OUT.exists():
        shutil.rmtree(OUT)
    hf_dir = OUT / "hf"
    hf_dir.mkdir(parents=True)
    vocab_size = tiny_tokenizer(hf_dir)
    cfg = BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        type_vocab_size=2,
        hidden_act="gelu",
        initializer_range=0.2,
    )
    bert = BertModel(cfg, add_pooling_layer=False).eval()
    with torch.no_grad():
        for name, p in bert.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
    bert.save_pretrained(hf_dir, safe_serialization=True)

    transformer = models.Transformer(str(hf_dir), max_seq_length=MAX_SEQ)
    pooling = models.Pooling(32, pooling_mode="mean")
    dense = models.Dense(32, 16, activation_function=torch.nn.Tanh())
    st = SentenceTransformer(
        modules=[transformer, pooling, dense, models.Normalize()],
        prompts={"query": "query: ", "document": ""},
        device="cpu",
    )
    st.save(str(OUT), safe_serialization=True)
    shutil.rmtree(hf_dir)
    (OUT / "README.md").unlink(missing_ok=True)  # the generated model card

    st = SentenceTransformer(str(OUT), device="cpu")
    tok = AutoTokenizer.from_pretrained(str(OUT))
    model = st[0].auto_model.eval()
    refs = {
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "torch": torch.__version__,
        "max_seq_length": MAX_SEQ,
        "texts": [],
    }
    hidden, pooled = [], {m: [] for m in POOL_MODES}
    with torch.no_grad():
        for t in TEXTS:
            enc = tok(t, truncation=True, max_length=MAX_SEQ, return_tensors="pt")
            h = model(**enc).last_hidden_state
            hidden.append(h[0].numpy())
            features = {"token_embeddings": h, "attention_mask": enc["attention_mask"]}
            for m in POOL_MODES:
                p = models.Pooling(32, pooling_mode=m)(dict(features))["sentence_embedding"]
                pooled[m].append(p[0].numpy())
            refs["texts"].append({"text": t, "ids": enc["input_ids"][0].tolist()})
        emb = st.encode(TEXTS, convert_to_numpy=True, batch_size=4)
        emb_q = st.encode(TEXTS, prompt_name="query", convert_to_numpy=True, batch_size=4)
        pair = tok(*PAIR, return_tensors="pt")
        hp = model(**pair).last_hidden_state[0].numpy()
    refs["pair"] = {
        "a": PAIR[0],
        "b": PAIR[1],
        "ids": pair["input_ids"][0].tolist(),
        "type_ids": pair["token_type_ids"][0].tolist(),
    }
    np.save(OUT / "hidden.npy", np.concatenate(hidden).astype(np.float32))
    for m in POOL_MODES:
        np.save(OUT / f"pooled_{m}.npy", np.stack(pooled[m]).astype(np.float32))
    np.save(OUT / "embeddings.npy", emb.astype(np.float32))
    np.save(OUT / "embeddings_query.npy", emb_q.astype(np.float32))
    np.save(OUT / "hidden_pair.npy", hp.astype(np.float32))
    (OUT / "reference.json").write_text(json.dumps(refs, ensure_ascii=False, indent=1) + "\n")
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({size} bytes, vocab {vocab_size})")


if __name__ == "__main__":
    main()
