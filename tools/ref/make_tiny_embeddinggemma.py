#!/usr/bin/env python3
"""Make the tiny random EmbeddingGemma fixture in tests/fixtures/embeddinggemma-tiny/.

The tokenizer: a 600-token byte-level BPE trained with ``tokenizers`` on
tests/fixtures/texts/ppl-en.txt and the first 50 strings of tests/fixtures/tokenizer/corpus.json,
with Gemma's special tokens (``<pad>`` 0, ``<eos>`` 1, ``<bos>`` 2, ``<unk>`` 3) and
EmbeddingGemma's post-processor ``<bos> $A <eos>``.

The model: a bare ``Gemma3TextModel`` with ``use_bidirectional_attention=True`` (what
transformers defines for EmbeddingGemma: every layer sees the whole sequence, sliding layers the
keys at distance ≤ ``sliding_window / 2``), 4 layers (sliding, sliding, full, sliding),
``sliding_window`` 6, hidden 32, 4 query / 2 KV heads of 8, MLP 64, QK norms, RoPE θ 1e6 global /
1e4 local, random weights (norm weights random too), saved by sentence-transformers as
EmbeddingGemma's modules: Transformer (max_seq_length 24) → Pooling (mean) → Dense 32→64 →
Dense 64→32 (no bias, identity) → Normalize, with EmbeddingGemma's prompts.

References (``reference.json`` + ``.npy``, float32, st_fixture.embedding_references): per text
the input ids and unpadded ``last_hidden_state`` rows (``hidden.npy``), ``encode`` in padded
batches of 3 without and with ``prompt_name="query"`` / ``"document"``.

Run with the reference venv:
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_embeddinggemma.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import tokenizers
import torch
from sentence_transformers import models
from st_fixture import embedding_references, folder_size, randomize, save_sentence_transformer
from tokenizers import decoders, pre_tokenizers, processors, trainers
from tokenizers.models import BPE
from transformers import Gemma3TextConfig, Gemma3TextModel

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"
OUT = FIX / "embeddinggemma-tiny"
MAX_SEQ = 24
PROMPTS = {
    "query": "task: search result | query: ",
    "document": "title: none | text: ",
    "Classification": "task: classification | query: ",
}

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


def build_tokenizer(dst: Path) -> tokenizers.Tokenizer:
    corpus = json.loads((FIX / "tokenizer" / "corpus.json").read_text())
    lines = [l for l in (FIX / "texts" / "ppl-en.txt").read_text().splitlines() if l.strip()]
    lines += corpus[:50]
    tok = tokenizers.Tokenizer(BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=600, special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", pair="<bos> $A <eos> $B:1 <eos>:1",
        special_tokens=[("<bos>", 2), ("<eos>", 1)])
    dst.mkdir(parents=True)
    tok.save(str(dst / "tokenizer.json"))
    (dst / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>",
        "pad_token": "<pad>", "unk_token": "<unk>", "model_max_length": 2048,
        "padding_side": "right",
    }, indent=1))
    return tok


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    hf = OUT / "hf"
    tok = build_tokenizer(hf)
    assert [tok.id_to_token(i) for i in range(4)] == ["<pad>", "<eos>", "<bos>", "<unk>"]
    cfg = Gemma3TextConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        query_pre_attn_scalar=8, max_position_embeddings=64, rms_norm_eps=1e-6,
        sliding_window=6, use_bidirectional_attention=True,
        layer_types=["sliding_attention", "sliding_attention", "full_attention",
                     "sliding_attention"],
        hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, initializer_range=0.2,
        pad_token_id=0, eos_token_id=1, bos_token_id=2,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}})
    torch.manual_seed(27)
    model = Gemma3TextModel(cfg).to(torch.float32).eval()
    randomize(model, lambda name: name.endswith("norm.weight"), weight_std=0.2)
    model.save_pretrained(hf, safe_serialization=True)
    dense = [models.Dense(32, 64, bias=False, activation_function=torch.nn.Identity()),
             models.Dense(64, 32, bias=False, activation_function=torch.nn.Identity())]
    for d in dense:
        randomize(d, lambda name: False, weight_std=0.2)
    save_sentence_transformer(
        OUT, MAX_SEQ, [models.Pooling(32, pooling_mode="mean"), *dense, models.Normalize()],
        PROMPTS)
    embedding_references(OUT, TEXTS, MAX_SEQ, 3, ["query", "document"],
                         {"sliding_window": cfg.to_dict()["sliding_window"]})
    print(f"wrote {OUT} ({folder_size(OUT)} bytes, vocab {tok.get_vocab_size()})")


if __name__ == "__main__":
    main()
