"""Shared steps of the tiny sentence-transformers embedding fixtures (make_tiny_xlmr.py,
make_tiny_nomic_bert.py, make_tiny_modernbert.py, make_tiny_embeddinggemma.py).

* ``randomize``: redraws a fresh model's norm gains, biases and (optionally) matrices so that no
  weight is left at its trivial initial value (gains of 1, biases of 0);
* ``save_sentence_transformer``: saves a transformers model + tokenizer (in ``OUT/hf``) as a
  sentence-transformers folder ``OUT`` with the given modules after the Transformer, and drops the
  temporary folder and the generated README;
* ``embedding_references``: the reference outputs of a saved folder: per text the input ids and
  unpadded ``last_hidden_state`` rows (``hidden.npy``), and ``SentenceTransformer.encode`` of all
  texts in padded batches without and with each named prompt (``embeddings.npy``,
  ``embeddings_<prompt>.npy``), written with ``reference.json``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import numpy as np
import sentence_transformers
import torch
import transformers
from sentence_transformers import SentenceTransformer, models
from transformers import AutoTokenizer


def randomize(model: torch.nn.Module, is_gain: Callable[[str], bool],
              weight_std: float | None = None) -> None:
    """Norm gains (``is_gain(name)``) ← 1 + N(0, 0.2²), biases ← N(0, 0.1²), and every other
    parameter ← N(0, weight_std²) when ``weight_std`` is given (else left as initialized), drawn
    in ``named_parameters`` order from torch's global generator."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if is_gain(name):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif weight_std is not None:
                p.copy_(weight_std * torch.randn_like(p))


def save_sentence_transformer(out: Path, max_seq: int, after: list[torch.nn.Module],
                              prompts: dict[str, str], src: Path | None = None,
                              **kwargs) -> None:
    """Saves ``src`` (a transformers model + tokenizer; default ``out/hf``, removed afterwards)
    as the sentence-transformers folder ``out``: Transformer (``max_seq_length`` ``max_seq``)
    followed by the modules ``after``, with ``prompts``; ``kwargs`` go to
    ``SentenceTransformer``. Removes the generated README."""
    hf = src or out / "hf"
    st = SentenceTransformer(
        modules=[models.Transformer(str(hf), max_seq_length=max_seq), *after],
        prompts=prompts, device="cpu", **kwargs)
    st.save(str(out), safe_serialization=True)
    if src is None:
        shutil.rmtree(hf)
    (out / "README.md").unlink(missing_ok=True)


def embedding_references(out: Path, texts: list[str], max_seq: int, batch_size: int,
                         prompt_names: list[str], extra: dict | None = None) -> dict:
    """Writes the references of the sentence-transformers folder ``out`` (see the module doc) and
    returns ``reference.json``'s content (``extra`` merged in)."""
    st = SentenceTransformer(str(out), device="cpu")
    tok = AutoTokenizer.from_pretrained(str(out))
    model = st[0].auto_model.eval()
    refs = {
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "torch": torch.__version__,
        "max_seq_length": max_seq,
        "texts": [],
    }
    refs.update(extra or {})
    hidden = []
    with torch.no_grad():
        for t in texts:
            enc = tok(t, truncation=True, max_length=max_seq, return_tensors="pt")
            hidden.append(model(**enc).last_hidden_state[0].numpy())
            refs["texts"].append({"text": t, "ids": enc["input_ids"][0].tolist()})
        np.save(out / "hidden.npy", np.concatenate(hidden).astype(np.float32))
        emb = st.encode(texts, convert_to_numpy=True, batch_size=batch_size)
        np.save(out / "embeddings.npy", emb.astype(np.float32))
        for name in prompt_names:
            emb = st.encode(texts, prompt_name=name, convert_to_numpy=True, batch_size=batch_size)
            np.save(out / f"embeddings_{name}.npy", emb.astype(np.float32))
    write_json(out / "reference.json", refs)
    return refs


def write_json(path: Path, value) -> None:
    """``value`` as indented UTF-8 JSON with a final newline."""
    path.write_text(json.dumps(value, ensure_ascii=False, indent=1) + "\n")


def folder_size(path: Path) -> int:
    """Bytes of every file under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
