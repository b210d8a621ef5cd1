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

import json
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig,
                          Qwen3_5TextConfig)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_tiny_llama as base  # noqa: E402
from make_tiny_qwen import pick_qwen_prompt  # noqa: E402
from tiny_ref import (FIXTURES, N_GREEDY, VOCAB, check_features, logits_of, max_diff,  # noqa: E402
                      prompt_references, publish, report_size, run_variants, versions)

BOS_ID, EOS_ID = base.BOS_ID, base.EOS_ID

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
    base_logits = logits_of(model, ids)
    sd = {k: v.clone() for k, v in model.state_dict().items()}

    def variant(sd_fn=None, cfg_changes=None):
        c = cfg_cls.from_dict({**model.config.to_dict(), **(cfg_changes or {})})
        c._attn_implementation = "eager"
        m = model_cls(c).to(torch.float32).eval()
        m.load_state_dict(sd_fn(dict(sd)) if sd_fn else sd, strict=False)
        if c.tie_word_embeddings:
            m.tie_weights()
        return logits_of(m, ids)

    def zero(suffix):
        return lambda s: {k: (torch.zeros_like(v) if k.endswith(suffix) else v) for k, v in s.items()}
    checks = {
        "rebuild_identity": max_diff(variant(), base_logits),
        "attn_output_gate_zeroed": max_diff(variant(lambda s: {
            k: (torch.cat([v.view(4, 2, 16, -1)[:, :1], torch.zeros_like(v.view(4, 2, 16, -1)[:, 1:])], 1).view(v.shape)
                if k.endswith("q_proj.weight") else v) for k, v in s.items()}), base_logits),
        "conv1d_zeroed": max_diff(variant(zero("conv1d.weight")), base_logits),
        "dt_bias_zeroed": max_diff(variant(zero("dt_bias")), base_logits),
        "zero_centred_norms_zeroed": max_diff(variant(zero(ZERO_CENTRED)), base_logits),
        "partial_rotary_1.0": max_diff(variant(cfg_changes={"rope_parameters": {
            "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}}), base_logits),
    }
    return checks


def make_variant(name: str, spec: dict) -> None:
    out = FIXTURES / name
    print(f"== {name}", flush=True)
    model = build_model(spec)
    _, model_cls = spec["cls"]
    loaded = {}

    def save(tmp: Path) -> None:
        model.save_pretrained(tmp)
        ref = model_cls.from_pretrained(tmp, dtype=torch.float32, attn_implementation="eager").eval()
        loaded["ref"] = ref
        if spec["nested"]:
            nest_like_hub(tmp, spec["config_type"] if "config_type" in spec else
                          ref.config.model_type.replace("_text", ""))
    publish(out, save)
    ref = loaded["ref"]
    probe = list(range(0, VOCAB, 7))[:20]
    assert max_diff(logits_of(ref, probe), logits_of(model, probe)) == 0.0

    prompts, _ = prompt_references(ref, out, spec["seed"], pick_qwen_prompt, abs_max_key="logits_max_abs",
                                   cache_label="recurrent-vs-chunked")
    checks = feature_checks(spec, ref, prompts[1]["ids"])
    check_features(checks, 1e-2)
    reference = {
        "generator": "tools/ref/make_tiny_qwen35.py",
        "versions": versions(),
        "seed": spec["seed"],
        "attn_implementation": "eager",
        "dtype": "float32",
        "delta_rule": "transformers pure-torch fallback (chunk 64 for prompts, recurrent for decode)",
        "config": {"architecture": type(ref).__name__, "nested_hub_layout": spec["nested"],
                   "layer_types": ref.config.layer_types, **spec["config"]},
        "n_greedy": N_GREEDY,
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
    report_size(out)


if __name__ == "__main__":
    run_variants(__doc__, VARIANTS, make_variant, llamacpp_flag=False, threads=1)
