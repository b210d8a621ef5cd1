#!/usr/bin/env python3
"""Convert a sentence-transformers BERT folder (all-MiniLM-L6-v2, tests/fixtures/bert-tiny) to a
GGUF file laid out as llama.cpp's ``convert_hf_to_gguf.py`` writes ``BertModel`` (its
``conversion/bert.py``), with the ``gguf`` package only (a NomicBERT folder in transformers 5's
spelling, tests/fixtures/nomic-bert-tiny, as its ``NomicBertModel`` writes ``nomic-bert``:
``nomic-bert.*`` keys, ``rope.freq_base``, ``attn_qkv`` / ``ffn_gate`` tensors; llama.cpp's own
converter reads only nomic's remote-code ``config.json`` spelling, so that file is not compared):

* metadata: ``general.architecture = bert``; ``bert.{block_count, context_length,
  embedding_length, feed_forward_length, attention.head_count, attention.layer_norm_epsilon}``,
  ``bert.attention.causal = false``, ``bert.pooling_type`` from ``1_Pooling/config.json`` (mean 1,
  cls 2, lasttoken 3, as the converter's ``_try_set_pooling_type``);
* tokenizer: ``tokenizer.ggml.model = bert``, ``pre = jina-v2-en`` (what the converter's
  pre-tokenizer hash gives the bert-base-uncased WordPiece), the vocabulary in llama.cpp's
  "phantom space" spelling (``##x`` → ``x``, other non-control tokens ``▁`` + token), token types
  (special added tokens CONTROL, other added USER_DEFINED, the rest NORMAL),
  ``token_type_count``, and the special ids / add-bos/eos / lowercase flags of gguf-py's
  ``SpecialVocab`` (the converter's own);
* tensors: transformers' names through gguf-py's ``TensorNameMap`` for ``MODEL_ARCH.BERT``
  (``token_embd``, ``position_embd``, ``token_types``, ``token_embd_norm``, ``blk.N.attn_q`` …
  ``layer_output_norm``), the pooler and ``position_ids`` dropped; F32, or with
  ``--outtype f16`` every 2-D matrix F16. ``2_Dense`` / ``Normalize`` modules are not part of
  llama.cpp's BERT GGUF and are not written.

``--compare OTHER.gguf`` checks the written file against one made by llama.cpp's converter
(``tools/ref/llamacpp_convert.py DIR --real --outtype f32 --outfile OTHER.gguf``): every
metadata key except ``general.*`` naming ones, and every tensor's type, shape and bytes.

Usage (reference venv):
  .../python tools/ref/gguf_embedding_convert.py ~/.cache/oxinfer/models/all-MiniLM-L6-v2 \\
      --outfile /tmp/minilm.gguf [--outtype f16] [--compare /tmp/minilm-llamacpp.gguf]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file
from transformers import AutoTokenizer

POOLING = {"mean": gguf.PoolingType.MEAN, "cls": gguf.PoolingType.CLS,
           "lasttoken": gguf.PoolingType.LAST}
# Metadata that names the model rather than describing it (the converter derives it from the
# folder's README / name).
NAMING_KEYS = ("general.name", "general.version", "general.organization", "general.basename",
               "general.size_label", "general.finetune")


def pooling_type(folder: Path) -> gguf.PoolingType | None:
    modules = folder / "modules.json"
    if not modules.is_file():
        return None
    for m in json.loads(modules.read_text()):
        if m["type"].endswith("Pooling"):
            cfg = json.loads((folder / m["path"] / "config.json").read_text())
            for mode, key in (("mean", "pooling_mode_mean_tokens"), ("cls", "pooling_mode_cls_token"),
                              ("lasttoken", "pooling_mode_lasttoken")):
                if cfg.get(key):
                    return POOLING[mode]
            if cfg.get("pooling_mode") in POOLING:
                return POOLING[cfg["pooling_mode"]]
            raise ValueError(f"{folder}: pooling {cfg} has no GGUF pooling type")
    return None


def vocabulary(folder: Path, vocab_size: int) -> tuple[list[str], list[int]]:
    """The converter's ``get_vocab_base`` + ``BertModel.set_vocab`` phantom-space spelling."""
    tok = AutoTokenizer.from_pretrained(str(folder))
    reverse = {i: t for t, i in tok.vocab.items()}
    added = tok.get_added_vocab()
    decoder = tok.added_tokens_decoder
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        t = reverse[i]
        if t in added:
            types.append(gguf.TokenType.CONTROL if decoder[i].special
                         else gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(t)

    def phantom(t: str, ty: int) -> str:
        if ty == gguf.TokenType.CONTROL:
            return t
        return t[2:] if t.startswith("##") else "\u2581" + t

    return [phantom(t, ty) for t, ty in zip(tokens, types)], types


def normalizer_flags(norm: dict | None, flags: dict[str, bool]) -> dict[str, bool]:
    """``tokenizer.json``'s normalizer as the lowercase / strip-accents flags newer gguf-py's
    ``SpecialVocab`` writes (the package pinned here predates them)."""
    ty = (norm or {}).get("type")
    if ty == "Lowercase":
        flags["lowercase"] = True
    elif ty == "StripAccents":
        flags["strip_accents"] = True
    elif ty == "BertNormalizer":
        for key in ("lowercase", "strip_accents"):
            if norm.get(key) is not None:
                flags[key] = norm[key]
    elif ty == "Sequence":
        for n in norm.get("normalizers", []):
            normalizer_flags(n, flags)
    return flags


ARCHS = {"bert": gguf.MODEL_ARCH.BERT, "nomic_bert": gguf.MODEL_ARCH.NOMIC_BERT}


def convert(folder: Path, outfile: Path, outtype: str) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    arch = ARCHS.get(cfg.get("model_type"))
    if arch is None:
        raise SystemExit(f"{folder}: model_type {cfg.get('model_type')!r}, only {list(ARCHS)}")
    n_layers = cfg["num_hidden_layers"]
    w = gguf.GGUFWriter(str(outfile), gguf.MODEL_ARCH_NAMES[arch])
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(folder.name)
    w.add_block_count(n_layers)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_layer_norm_eps(cfg.get("layer_norm_eps", 1e-12))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if outtype == "f16" else gguf.LlamaFileType.ALL_F32)
    w.add_causal_attention(False)
    if arch == gguf.MODEL_ARCH.NOMIC_BERT:
        rope = cfg.get("rope_parameters") or {}
        w.add_rope_freq_base(rope.get("rope_theta", cfg.get("rope_theta", 1000.0)))
    if (pool := pooling_type(folder)) is not None:
        w.add_pooling_type(pool)

    tokens, types = vocabulary(folder, cfg["vocab_size"])
    w.add_token_type_count(cfg.get("type_vocab_size", 1))
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("jina-v2-en")
    w.add_token_list(tokens)
    w.add_token_types(types)
    gguf.SpecialVocab(folder, n_vocab=len(tokens)).add_to_gguf(w)
    norm = json.loads((folder / "tokenizer.json").read_text()).get("normalizer")
    for key, value in normalizer_flags(norm, {}).items():
        w.add_bool(f"tokenizer.ggml.normalizer.{key}", value)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    tmap = gguf.get_tensor_name_map(arch, n_layers)
    weights = load_file(str(folder / "model.safetensors"))
    for name, data in weights.items():
        name = name.removeprefix("bert.").removeprefix("nomic_bert.")
        if name in ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"):
            continue
        new = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise SystemExit(f"{folder}: no GGUF name for tensor {name}")
        data = data.astype(np.float16 if outtype == "f16" and data.ndim == 2 else np.float32)
        w.add_tensor(new, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {outfile} ({outfile.stat().st_size} bytes, {len(weights)} tensors read)")


def compare(mine: Path, theirs: Path) -> None:
    a, b = gguf.GGUFReader(str(mine)), gguf.GGUFReader(str(theirs))
    keys = lambda r: {k for k in r.fields if not k.startswith("GGUF.") and k not in NAMING_KEYS}
    if keys(a) != keys(b):
        raise SystemExit(f"metadata keys differ: only mine {keys(a) - keys(b)}, "
                         f"only llama.cpp's {keys(b) - keys(a)}")
    for k in sorted(keys(a)):
        va, vb = a.fields[k].contents(), b.fields[k].contents()
        if va != vb:
            raise SystemExit(f"{k}: {str(va)[:80]} vs llama.cpp's {str(vb)[:80]}")
    ta = {t.name: t for t in a.tensors}
    tb = {t.name: t for t in b.tensors}
    if set(ta) != set(tb):
        raise SystemExit(f"tensors differ: {set(ta) ^ set(tb)}")
    for n, t in ta.items():
        u = tb[n]
        if t.tensor_type != u.tensor_type or list(t.shape) != list(u.shape) or \
                not np.array_equal(np.asarray(t.data), np.asarray(u.data)):
            raise SystemExit(f"tensor {n} differs")
    print(f"{mine} equals {theirs}: {len(keys(a))} metadata keys, {len(ta)} tensors")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--outfile", type=Path, required=True)
    ap.add_argument("--outtype", choices=("f32", "f16"), default="f32")
    ap.add_argument("--compare", type=Path, help="a GGUF made by llama.cpp's converter")
    a = ap.parse_args()
    convert(a.folder, a.outfile, a.outtype)
    if a.compare:
        compare(a.outfile, a.compare)


if __name__ == "__main__":
    sys.exit(main())
