#!/usr/bin/env python3
"""Tiny random bf16 safetensors checkpoints for the quantization tests (issue 6).

Writes tests/fixtures/quant-tiny/<variant>/:
  config.json, generation_config.json, model.safetensors   bf16 weights, saved by transformers
  tokenizer.json, tokenizer_config.json                    a byte-level BPE (256 bytes + <s>, </s>
                                                           + 4 merges), made with `tokenizers`
  reference.json    versions, seed, prompt, its ids (from transformers' tokenizer), greedy ids
  logits.npy        float32 [n_prompt, vocab]: transformers float32 logits of the bf16 weights

Every dimension a matrix multiplies over is a multiple of 32, so Q8/Q4 apply to every matrix.

Run (from the repository root):
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_bf16.py
Seeded: re-running gives byte-identical files.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import safetensors
import tokenizers
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM,
                          PreTrainedTokenizerFast)

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "quant-tiny"
BOS, EOS = "<s>", "</s>"
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n")]
VOCAB = 256 + 2 + len(MERGES)
PROMPT = "The quick brown fox jumps over the lazy dog. Quantization keeps the logits close."
N_GREEDY = 16

VARIANTS = {
    "llama": dict(
        seed=606,
        cls=LlamaForCausalLM,
        config=LlamaConfig(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=True,
            initializer_range=0.1, bos_token_id=256, eos_token_id=257,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
    ),
    "gemma3": dict(
        seed=607,
        cls=Gemma3ForCausalLM,
        config=Gemma3TextConfig(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=32,
            max_position_embeddings=512, rms_norm_eps=1e-6, initializer_range=0.1,
            sliding_window=8,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "default", "rope_theta": 100000.0},
            },
            bos_token_id=256, eos_token_id=257, pad_token_id=0,
        ),
    ),
}


def byte_tokenizer() -> Tokenizer:
    b2u = pre_tokenizers.ByteLevel.alphabet()  # the 256 byte-level characters
    # id == byte value, as GPT-2's byte-to-unicode table orders them
    table = {}
    n = 0
    for b in list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
            range(ord("®"), ord("ÿ") + 1)):
        table[b] = chr(b)
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    assert set(table.values()) == set(b2u)
    vocab = {table[b]: b for b in range(256)}
    vocab[BOS], vocab[EOS] = 256, 257
    for i, (a, c) in enumerate(MERGES):
        vocab[a + c] = 258 + i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=MERGES))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([BOS, EOS])
    return tok


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, spec in VARIANTS.items():
        out = OUT / name
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        cfg = spec["config"]
        cfg._attn_implementation = "eager"
        torch.manual_seed(spec["seed"])
        model = spec["cls"](cfg).eval()
        gen = torch.Generator().manual_seed(spec["seed"])
        with torch.no_grad():
            for pname, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
                if "norm" in pname:
                    p.copy_(0.1 * torch.randn(p.shape, generator=gen) + (0.0 if name == "gemma3" else 1.0))
                elif "embed_tokens" in pname or "lm_head" in pname:
                    p.copy_(0.05 * torch.randn(p.shape, generator=gen))
                else:
                    p.copy_(0.1 * torch.randn(p.shape, generator=gen))
        model = model.to(torch.bfloat16)
        model.save_pretrained(out, safe_serialization=True)
        fast = PreTrainedTokenizerFast(tokenizer_object=byte_tokenizer(), bos_token=BOS,
                                       eos_token=EOS)
        fast.save_pretrained(out)
        tc = json.loads((out / "tokenizer_config.json").read_text())
        tc["add_bos_token"] = True
        (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=2) + "\n")
        # Reference: float32 compute on the saved bf16 weights.
        ref = spec["cls"].from_pretrained(out, dtype=torch.float32).eval()
        ref.config._attn_implementation = "eager"
        ids = [256] + fast.encode(PROMPT, add_special_tokens=False)
        with torch.no_grad():
            logits = ref(torch.tensor([ids])).logits[0].float().numpy()
            greedy = ref.generate(torch.tensor([ids]), max_new_tokens=N_GREEDY, do_sample=False,
                                  top_k=None, top_p=None)[0, len(ids):].tolist()
        np.save(out / "logits.npy", logits.astype(np.float32))
        (out / "reference.json").write_text(json.dumps({
            "made_by": "tools/ref/make_tiny_bf16.py",
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "safetensors": safetensors.__version__,
                         "tokenizers": tokenizers.__version__},
            "seed": spec["seed"], "prompt": PROMPT, "prompt_ids": ids, "greedy_ids": greedy,
            "dtype": "bfloat16 weights, float32 compute (eager attention)",
        }, indent=2) + "\n")
        print(name, "ids", len(ids), "greedy", greedy[:8], "->", out)


if __name__ == "__main__":
    main()
