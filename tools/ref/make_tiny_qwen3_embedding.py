#!/usr/bin/env python3
"""Make the tiny random Qwen3-Embedding fixture in tests/fixtures/qwen3-embedding-tiny/.

The tokenizer: a 600-token byte-level BPE trained with ``tokenizers`` on
tests/fixtures/texts/ppl-en.txt and the first 50 strings of tests/fixtures/tokenizer/corpus.json,
in Qwen2/Qwen3's shape (NFC, Qwen2's split expression, ``ByteLevel``; ``<|endoftext|>``,
``<|im_start|>``, ``<|im_end|>`` special) with Qwen3-Embedding's post-processor, which appends
``<|endoftext|>`` to every input (the token the model's last-token pooling reads), and
``padding_side: left``.

The model: a bare ``Qwen3Model`` (2 layers, hidden 64, 8 query / 2 KV heads of 16, MLP 64, QK
norms, RoPE θ 1e6, 128 positions) with random weights, saved by sentence-transformers as
Transformer (max_seq_length 64) → Pooling (lasttoken) → Normalize with Qwen3-Embedding's
``query`` prompt (``Instruct: …\\nQuery:``) and an empty ``document`` prompt. Like the published
Qwen3-Embedding files, the weights carry no ``model.`` prefix and no ``lm_head``.

References, float32:
* ``tokenizer_refs.json``: ids of the ``tokenizers`` package for every corpus string and test
  text, without and with the post-processor's tokens (transformers' ``AutoTokenizer`` checked to
  agree);
* ``reference.json`` + ``.npy``: per text the input ids (truncated to 64, ``<|endoftext|>``
  kept), the unpadded ``last_hidden_state`` rows (``hidden.npy``), and
  ``SentenceTransformer.encode`` (left-padded batches of 5) without and with
  ``prompt_name="query"`` (``embeddings.npy``, ``embeddings_query.npy``).

Run with the reference venv:
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_qwen3_embedding.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import sentence_transformers
import tokenizers
import torch
import transformers
from sentence_transformers import SentenceTransformer, models
from tokenizers import Regex, decoders, normalizers, pre_tokenizers, processors, trainers
from tokenizers.models import BPE
from transformers import AutoTokenizer, Qwen3Config, Qwen3Model
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"
OUT = FIX / "qwen3-embedding-tiny"
MAX_SEQ = 64
QUERY_PROMPT = ("Instruct: Given a web search query, retrieve relevant passages that answer the "
                "query\nQuery:")

TEXTS = [
    "Hello world",
    "What is the capital of China?",
    "The capital of China is Beijing.",
    "a",
    "",
    "Café naïve résumé — Größe!",
    "你好，世界",
    "Привет, мир! Как дела?",
    "🤗 emoji 👨‍👩‍👧 สวัสดี",
    "Gravity is a force that attracts two bodies towards each other. It gives weight to physical "
    "objects and is responsible for the movement of planets around the sun, which this tiny "
    "model's sixty-four token limit cuts off well before the end of the passage.",
    "<|im_start|>user\nspecial tokens in the text<|im_end|>",
]


def build_tokenizer(dst: Path, extra_lines: tuple[str, ...] = (),
                    embedding: bool = True) -> tokenizers.Tokenizer:
    """The tokenizer (see the module doc) in ``dst``; ``extra_lines`` join the training text, and
    without ``embedding`` the post-processor is Qwen's plain ``ByteLevel`` (no added token) and
    padding is on the right (make_tiny_qwen3_reranker.py)."""
    corpus = json.loads((FIX / "tokenizer" / "corpus.json").read_text())
    lines = [l for l in (FIX / "texts" / "ppl-en.txt").read_text().splitlines() if l.strip()]
    lines += corpus[:50] + list(extra_lines)
    tok = tokenizers.Tokenizer(BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=600, special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if embedding:
        tok.post_processor = processors.TemplateProcessing(
            single="$A <|endoftext|>", pair="$A <|endoftext|> $B:1 <|endoftext|>:1",
            special_tokens=[("<|endoftext|>", tok.token_to_id("<|endoftext|>"))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    dst.mkdir(parents=True)
    tok.save(str(dst / "tokenizer.json"))
    (dst / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "model_max_length": 131072,
        "padding_side": "left" if embedding else "right",
    }, indent=1))
    return tok


def build_model(vocab: int) -> Qwen3Model:
    cfg = Qwen3Config(
        vocab_size=vocab, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
        rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.1,
        attention_bias=False, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        bos_token_id=None, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(24)
    model = Qwen3Model(cfg).to(torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name == "embed_tokens.weight":
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model


def tokenizer_refs(tok: tokenizers.Tokenizer, auto) -> dict:
    corpus = json.loads((FIX / "tokenizer" / "corpus.json").read_text())
    cases = []
    for t in corpus + TEXTS:
        plain = tok.encode(t, add_special_tokens=False).ids
        full = tok.encode(t).ids
        assert auto(t, add_special_tokens=False)["input_ids"] == plain, t
        assert auto(t)["input_ids"] == full, t
        cases.append({"text": t, "ids": plain, "with_specials": full})
    return {"tokenizers": tokenizers.__version__, "cases": cases}


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    hf = OUT / "hf"
    tok = build_tokenizer(hf)
    model = build_model(tok.get_vocab_size())
    model.save_pretrained(hf, safe_serialization=True)
    st = SentenceTransformer(
        modules=[models.Transformer(str(hf), max_seq_length=MAX_SEQ),
                 models.Pooling(64, pooling_mode="lasttoken"), models.Normalize()],
        prompts={"query": QUERY_PROMPT, "document": ""}, device="cpu")
    st.save(str(OUT), safe_serialization=True)
    shutil.rmtree(hf)
    (OUT / "README.md").unlink(missing_ok=True)

    st = SentenceTransformer(str(OUT), device="cpu")
    auto = AutoTokenizer.from_pretrained(str(OUT))
    assert auto.padding_side == "left"
    model = st[0].auto_model.eval()
    refs = {
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "torch": torch.__version__,
        "max_seq_length": MAX_SEQ,
        "texts": [],
    }
    hidden = []
    with torch.no_grad():
        for t in TEXTS:
            enc = auto(t, truncation=True, max_length=MAX_SEQ, return_tensors="pt")
            hidden.append(model(**enc).last_hidden_state[0].numpy())
            refs["texts"].append({"text": t, "ids": enc["input_ids"][0].tolist()})
        emb = st.encode(TEXTS, convert_to_numpy=True, batch_size=5)
        emb_q = st.encode(TEXTS, prompt_name="query", convert_to_numpy=True, batch_size=5)
    np.save(OUT / "hidden.npy", np.concatenate(hidden).astype(np.float32))
    np.save(OUT / "embeddings.npy", emb.astype(np.float32))
    np.save(OUT / "embeddings_query.npy", emb_q.astype(np.float32))
    (OUT / "reference.json").write_text(json.dumps(refs, ensure_ascii=False, indent=1) + "\n")
    refs = tokenizer_refs(tokenizers.Tokenizer.from_file(str(OUT / "tokenizer.json")), auto)
    (OUT / "tokenizer_refs.json").write_text(json.dumps(refs, ensure_ascii=False, indent=1) + "\n")
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({size} bytes, vocab {tok.get_vocab_size()})")


if __name__ == "__main__":
    main()
