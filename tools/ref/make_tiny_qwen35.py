#!/usr/bin/env python3
"""Tiny random Qwen 3.5 hybrid checkpoints (dense and MoE) with transformers float32 references.

Writes tests/fixtures/<variant>/ like tools/ref/make_tiny_llama.py (whose helpers it reuses):
config.json + model.safetensors, reference.json, logits_<prompt>.npy.

transformers runs its pure-torch Gated DeltaNet here (no fla / causal-conv1d kernels): chunked
(chunk 64) for prompts, recurrent for one-token steps; the two differ by ~1e-4 on logits, so the
engine is held to 1e-3 on these fixtures (see REFERENCE-NOTES).

Variants:
  qwen35-tiny      Qwen3_5ForCausalLM, model_type qwen3_5_text, flat config (transformers-5).
  qwen35moe-tiny   Qwen3_5MoeForCausalLM weights saved the way the hub's multimodal checkpoints
                   are: config.json {model_type: qwen3_5_moe, text_config: {...}} and tensors
                   under model.language_model.*; the reference comes from the text model.
  qwen35-tiny-gguf, qwen35moe-tiny-gguf
                   also get model.gguf written by llama.cpp's converter, and llama.cpp's logits on
                   it compared with transformers (reference.json "llamacpp_gguf_check"); see
                   tools/ref/llamacpp_convert.py.

Run (from the repository root):
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_qwen35.py [--variant qwen35-tiny]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig,
                          Qwen3_5TextConfig)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_tiny_llama as base  # noqa: E402
from make_tiny_qwen import pick_prompt  # noqa: E402

REPO, FIXTURES = base.REPO, base.FIXTURES
VOCAB, BOS_ID, EOS_ID = base.VOCAB, base.BOS_ID, base.EOS_ID

COMMON = dict(
    vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
    linear_value_head_dim=8, linear_conv_kernel_dim=4,
    max_position_embeddings=512, rms_norm_eps=1e-6, initializer_range=0.1,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    bos_token_id=BOS_ID, eos_token_id=EOS_ID,
)

MROPE = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
         "mrope_interleaved": True, "mrope_section": [2, 1, 1]}

VARIANTS = {
    # layers: linear, linear, full, linear (layer_types given explicitly), tied embeddings.
    "qwen35-tiny": dict(
        seed=3535, cls=(Qwen3_5TextConfig, Qwen3_5ForCausalLM), nested=False,
        config=dict(COMMON, intermediate_size=96, tie_word_embeddings=True,
                    layer_types=["linear_attention", "linear_attention", "full_attention",
                                 "linear_attention"]),
    ),
    # default layer pattern (every 4th full) from full_attention_interval 2: linear, full, ...
    "qwen35moe-tiny": dict(
        seed=3536, cls=(Qwen3_5MoeTextConfig, Qwen3_5MoeForCausalLM), nested=True,
        config=dict(COMMON, tie_word_embeddings=False, num_experts=8, num_experts_per_tok=2,
                    moe_intermediate_size=16, shared_expert_intermediate_size=32,
                    full_attention_interval=2),
    ),
    # GGUF twins written by llama.cpp's own converter (tools/ref/llamacpp_convert.py) and checked
    # with llama.cpp's forward pass. llama.cpp requires linear_value_head_dim ==
    # linear_key_head_dim, so these use 16 for both (4 value heads over 2 key heads, so the
    # converter's grouped -> tiled V-head reordering is exercised), and mrope sections that fit
    # the 4 rotary pairs (the converter's default [11, 11, 10] is for 64 rotary dims).
    "qwen35-tiny-gguf": dict(
        seed=3537, cls=(Qwen3_5TextConfig, Qwen3_5ForCausalLM), nested=False, gguf=True,
        config=dict(COMMON, linear_value_head_dim=16, intermediate_size=96, rope_parameters=MROPE,
                    tie_word_embeddings=False, full_attention_interval=2),
    ),
    "qwen35moe-tiny-gguf": dict(
        seed=3538, cls=(Qwen3_5MoeTextConfig, Qwen3_5MoeForCausalLM), nested=False, gguf=True,
        config=dict(COMMON, linear_value_head_dim=16, rope_parameters=MROPE,
                    tie_word_embeddings=True, num_experts=8,
                    num_experts_per_tok=2, moe_intermediate_size=16,
                    shared_expert_intermediate_size=32, full_attention_interval=2),
    ),
}

ZERO_CENTRED = ("input_layernorm.weight", "post_attention_layernorm.weight",
                "q_norm.weight", "k_norm.weight", "model.norm.weight")


def build_model(spec: dict):
    cfg_cls, model_cls = spec["cls"]
    cfg = cfg_cls(**spec["config"])
    cfg._attn_implementation = "eager"
    torch.manual_seed(spec["seed"])
    model = model_cls(cfg).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(spec["seed"])
    std = cfg.initializer_range
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            r = torch.randn(p.shape, generator=gen)
            if name.endswith(ZERO_CENTRED):
                p.copy_(base.NORM_NOISE_STD * r)               # (1 + w) norms: w around 0
            elif name.endswith("linear_attn.norm.weight"):
                p.copy_(1.0 + base.NORM_NOISE_STD * r)         # gated norm: plain w
            elif name in ("model.embed_tokens.weight", "lm_head.weight"):
                p.copy_(base.EMBED_STD * r)
            elif name.endswith("A_log"):
                p.copy_(torch.log(torch.rand(p.shape, generator=gen) * 3.0 + 0.3))
            elif name.endswith("dt_bias"):
                p.copy_(0.5 * r)
            elif name.endswith("conv1d.weight"):
                p.copy_(0.4 * r)
            elif name.endswith("mlp.gate.weight"):
                p.copy_(1.0 * r)                               # router: well separated
            else:
                p.copy_(std * r)
    for name, p in model.named_parameters():
        assert p.numel() == 1 or float((p.max() - p.min()).detach()) > 0, f"{name} is constant"
    return model


def nest_like_hub(folder: Path, model_type: str) -> None:
    """Rewrite a text-model checkpoint the way multimodal hub checkpoints store it."""
    cfg = json.loads((folder / "config.json").read_text())
    text = dict(cfg)
    for k in ("architectures", "transformers_version", "dtype", "tie_word_embeddings"):
        text.pop(k, None)
    text["rope_parameters"] = dict(text["rope_parameters"], mrope_interleaved=True,
                                   mrope_section=[2, 1, 1])
    outer = {"architectures": [cfg["architectures"][0].replace("ForCausalLM", "ForConditionalGeneration")],
             "model_type": model_type, "text_config": text,
             "tie_word_embeddings": cfg.get("tie_word_embeddings", False),
             "transformers_version": cfg.get("transformers_version")}
    (folder / "config.json").write_text(json.dumps(outer, indent=2, sort_keys=True) + "\n")
    sd = load_file(folder / "model.safetensors")
    sd = {(k.replace("model.", "model.language_model.", 1) if k.startswith("model.") else k): v
          for k, v in sd.items()}
    save_file(sd, folder / "model.safetensors", metadata={"format": "pt"})


@torch.no_grad()
def feature_checks(spec, model, ids) -> dict:
    cfg_cls, model_cls = spec["cls"]
    base_logits = base.logits_of(model, ids)
    sd = {k: v.clone() for k, v in model.state_dict().items()}

    def variant(sd_fn=None, cfg_changes=None):
        c = cfg_cls.from_dict({**model.config.to_dict(), **(cfg_changes or {})})
        c._attn_implementation = "eager"
        m = model_cls(c).to(torch.float32).eval()
        m.load_state_dict(sd_fn(dict(sd)) if sd_fn else sd, strict=False)
        if c.tie_word_embeddings:
            m.tie_weights()
        return base.logits_of(m, ids)

    def zero(suffix):
        return lambda s: {k: (torch.zeros_like(v) if k.endswith(suffix) else v) for k, v in s.items()}
    checks = {
        "rebuild_identity": base.max_diff(variant(), base_logits),
        "attn_output_gate_zeroed": base.max_diff(variant(lambda s: {
            k: (torch.cat([v.view(4, 2, 16, -1)[:, :1], torch.zeros_like(v.view(4, 2, 16, -1)[:, 1:])], 1).view(v.shape)
                if k.endswith("q_proj.weight") else v) for k, v in s.items()}), base_logits),
        "conv1d_zeroed": base.max_diff(variant(zero("conv1d.weight")), base_logits),
        "dt_bias_zeroed": base.max_diff(variant(zero("dt_bias")), base_logits),
        "zero_centred_norms_zeroed": base.max_diff(variant(zero(ZERO_CENTRED)), base_logits),
        "partial_rotary_1.0": base.max_diff(variant(cfg_changes={"rope_parameters": {
            "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}}), base_logits),
    }
    return checks


def make_variant(name: str, spec: dict) -> None:
    out = FIXTURES / name
    print(f"== {name}", flush=True)
    model = build_model(spec)
    _, model_cls = spec["cls"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model.save_pretrained(tmp)
        ref = model_cls.from_pretrained(tmp, dtype=torch.float32, attn_implementation="eager").eval()
        if spec["nested"]:
            nest_like_hub(tmp, spec["config_type"] if "config_type" in spec else
                          ref.config.model_type.replace("_text", ""))
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(tmp, out)
        out.chmod(0o755)
        for f in out.iterdir():
            f.chmod(0o644)
    probe = list(range(0, VOCAB, 7))[:20]
    assert base.max_diff(base.logits_of(ref, probe), base.logits_of(model, probe)) == 0.0

    prompts = []
    for k, (pname, length) in enumerate(base.PROMPT_LENGTHS.items()):
        ids, pseed, toks, margin = pick_prompt(ref, length, spec["seed"] * 10 + 1000 * k)
        lg = base.logits_of(ref, ids).numpy().astype(np.float32)
        np.save(out / f"logits_{pname}.npy", lg)
        ctoks, clasts = base.greedy_cached(ref, ids, base.N_GREEDY)
        assert ctoks == toks, "cached and uncached greedy disagree"
        full = base.logits_of(ref, ids + toks[:-1])[len(ids) - 1:]
        cache_diff = max(base.max_diff(c, f) for c, f in zip(clasts, full))
        prompts.append({
            "name": pname, "prompt_seed": pseed, "ids": ids, "greedy_ids": toks,
            "min_greedy_margin": margin, "n_distinct_greedy": len(set(toks)),
            "logits_file": f"logits_{pname}.npy", "logits_shape": list(lg.shape),
            "logits_max_abs": float(np.abs(lg).max()),
            "transformers_cached_decode_max_abs_diff": cache_diff,
        })
        print(f"{pname}: {len(ids)} ids, greedy {toks[:8]}..., min margin {margin:.4g}, "
              f"recurrent-vs-chunked {cache_diff:.2g}", flush=True)
    checks = feature_checks(spec, ref, prompts[1]["ids"])
    for k, v in checks.items():
        print(f"feature check {k}: {v:.4g}", flush=True)
        assert (v < 1e-5) if k.endswith("identity") else (v > 1e-2), (k, v)
    reference = {
        "generator": "tools/ref/make_tiny_qwen35.py",
        "versions": base.versions(),
        "seed": spec["seed"],
        "attn_implementation": "eager",
        "dtype": "float32",
        "delta_rule": "transformers pure-torch fallback (chunk 64 for prompts, recurrent for decode)",
        "config": {"architecture": type(ref).__name__, "nested_hub_layout": spec["nested"],
                   "layer_types": ref.config.layer_types, **spec["config"]},
        "n_greedy": base.N_GREEDY,
        "greedy_method": "argmax of the last-position logits, full recompute each step, no EOS stop",
        "prompts": prompts,
        "feature_checks_max_abs_logit_change": checks,
        "feature_checks_prompt": "long",
    }
    (out / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    if spec.get("gguf"):
        # a separate process: the converter imports llama.cpp's own gguf-py
        subprocess.run([sys.executable, str(Path(__file__).parent / "llamacpp_convert.py"), str(out)],
                       check=True)
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"{out.relative_to(REPO)}: {size / 1024:.0f} KiB", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in args.variant or sorted(VARIANTS):
        make_variant(name, VARIANTS[name])


if __name__ == "__main__":
    main()
