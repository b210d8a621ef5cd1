#!/usr/bin/env python3
"""Tiny random bf16 safetensors checkpoints for the quantization tests (issue 6).

Writes tests/fixtures/quant-tiny/<variant>/:
  config.json, generation_config.json, model.safetensors   bf16 weights, saved by transformers
  tokenizer.json, tokenizer_config.json                    a byte-level BPE (256 bytes + <s>, </s>
                                                           + 4 merges), made with `tokenizers`
  reference.json    versions, seed, prompt, its ids (from transformers' tokenizer), greedy ids
  logits.npy        float32 [n_prompt, vocab]: transformers float32 logits of the bf16 weights

Two MoE variants keep their experts stacked as 3-D tensors (the layout Q8/Q4 must handle per
expert): gemma4moe (Gemma4ForCausalLM with the routed-experts block, saved by transformers:
`experts.gate_up_proj` [E, 2F, D], `experts.down_proj` [E, D, F]) and qwen35moe
(Qwen3_5MoeForCausalLM; transformers' save_pretrained splits experts into per-expert matrices,
so its in-memory state dict, stacked `mlp.experts.gate_up_proj` / `mlp.experts.down_proj`, is
written with safetensors directly and checked to load back into transformers unchanged). Their
weights are drawn by the family scripts' build_model (make_tiny_gemma4.py, make_tiny_qwen35.py).

and tests/fixtures/quant-tiny/kl_reference.json: `llama-perplexity --kl-divergence` statistics
computed here with transformers + numpy, model = the llama variant, reference = the gemma3
variant (same tokenizer), on tests/fixtures/texts/ppl-en.txt with llama-perplexity's windows
(ctx KL_CTX, KL_CHUNKS windows, BOS first in each, the second half of each window scored):
both perplexities, mean / median / 99th percentile / max KL(P_ref || P_model), top-1 agreement.

Every dimension a matrix multiplies over is a multiple of 32, so Q8/Q4 apply to every matrix.

Run (from the repository root):
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_bf16.py [--variant NAME ...]
(with --variant only those variants are written, and kl_reference.json is left alone)
Seeded: re-running gives byte-identical files.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import safetensors
import tokenizers
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from safetensors.torch import save_file
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, Gemma4ForCausalLM, LlamaConfig,
                          LlamaForCausalLM, PreTrainedTokenizerFast, Qwen3_5MoeForCausalLM,
                          Qwen3_5MoeTextConfig)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_tiny_gemma4  # noqa: E402
import make_tiny_qwen35  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "quant-tiny"
BOS, EOS = "<s>", "</s>"
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n")]
VOCAB = 256 + 2 + len(MERGES)
PROMPT = "The quick brown fox jumps over the lazy dog. Quantization keeps the logits close."
N_GREEDY = 16
KL_CTX, KL_CHUNKS = 64, 3

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
    # Every expert matrix has rows of 64 (gate/up) or 32 (down) weights: all quantizable.
    "gemma4moe": dict(
        seed=608,
        cls=Gemma4ForCausalLM,
        build=lambda seed: make_tiny_gemma4.build_model(dict(seed=seed, config=dict(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            global_head_dim=32, num_global_key_value_heads=1, attention_k_eq_v=True,
            max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=True,
            initializer_range=0.1, sliding_window=8,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5,
                                   "rope_theta": 1000000.0},
            },
            final_logit_softcapping=30.0, hidden_size_per_layer_input=0,
            enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32,
            bos_token_id=256, eos_token_id=257, pad_token_id=0,
        ))),
    ),
    "qwen35moe": dict(
        seed=609,
        cls=Qwen3_5MoeForCausalLM,
        stacked_save=True,
        build=lambda seed: make_tiny_qwen35.build_model(dict(
            seed=seed, cls=(Qwen3_5MoeTextConfig, Qwen3_5MoeForCausalLM),
            config=dict(make_tiny_qwen35.COMMON, vocab_size=VOCAB, num_hidden_layers=2,
                        bos_token_id=256, eos_token_id=257, tie_word_embeddings=False,
                        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                        shared_expert_intermediate_size=32, full_attention_interval=2))),
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


def build(name: str, spec: dict):
    if "build" in spec:
        return spec["build"](spec["seed"])
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
    return model


def main(only: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, spec in VARIANTS.items():
        if only and name not in only:
            continue
        out = OUT / name
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        model = build(name, spec).to(torch.bfloat16)
        if spec.get("stacked_save"):
            # The in-memory (stacked-experts) state dict, as the hub's checkpoints store it.
            model.config.save_pretrained(out)
            sd = {k: v.contiguous() for k, v in model.state_dict().items()}
            assert any(v.dim() == 3 and "experts" in k for k, v in sd.items()), "no stacked experts"
            save_file(sd, out / "model.safetensors", metadata={"format": "pt"})
        else:
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
        loaded = dict(ref.state_dict())
        for k, v in model.state_dict().items():
            assert torch.equal(loaded[k], v.float()), f"{name}: {k} did not load back"
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


def kl_reference() -> None:
    text = (REPO / "tests/fixtures/texts/ppl-en.txt").read_text()
    tok = PreTrainedTokenizerFast.from_pretrained(OUT / "llama")
    ids = [256] + tok.encode(text, add_special_tokens=False)
    models = {}
    for name in ("llama", "gemma3"):
        m = VARIANTS[name]["cls"].from_pretrained(OUT / name, dtype=torch.float32).eval()
        m.config._attn_implementation = "eager"
        models[name] = m
    nll = {"llama": [], "gemma3": []}
    kls, agree = [], []
    first = KL_CTX // 2
    for c in range(KL_CHUNKS):
        w = list(ids[c * KL_CTX:(c + 1) * KL_CTX])
        w[0] = 256
        with torch.no_grad():
            lp = {n: torch.log_softmax(m(torch.tensor([w])).logits[0].double(), -1).numpy()
                  for n, m in models.items()}
        for j in range(first, KL_CTX - 1):
            target = ids[c * KL_CTX + j + 1]
            for n in nll:
                nll[n].append(-lp[n][j, target])
            r, q = lp["gemma3"][j], lp["llama"][j]
            kls.append(float(np.sum(np.exp(r) * (r - q))))
            agree.append(int(np.argmax(r) == np.argmax(q)))
    kls_sorted = np.sort(np.array(kls))
    out = {
        "made_by": "tools/ref/make_tiny_bf16.py (transformers float32 + numpy)",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__},
        "model": "quant-tiny/llama", "reference": "quant-tiny/gemma3",
        "text": "tests/fixtures/texts/ppl-en.txt", "ctx": KL_CTX, "chunks": KL_CHUNKS,
        "scored": len(kls),
        "ppl_model": float(np.exp(np.mean(nll["llama"]))),
        "ppl_ref": float(np.exp(np.mean(nll["gemma3"]))),
        "mean_kl": float(np.mean(kls)),
        "median_kl": float(np.quantile(kls_sorted, 0.5)),
        "p99_kl": float(np.quantile(kls_sorted, 0.99)),
        "max_kl": float(kls_sorted[-1]),
        "top1_agree_percent": 100.0 * float(np.mean(agree)),
    }
    (OUT / "kl_reference.json").write_text(json.dumps(out, indent=2) + "\n")
    print("kl reference", out)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", action="append", default=[], choices=sorted(VARIANTS))
    args = ap.parse_args()
    main(args.variant)
    if not args.variant:
        kl_reference()
