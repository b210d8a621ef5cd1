#!/usr/bin/env python3
"""Tiny random Qwen2 / Qwen3 checkpoints, their GGUF twins and transformers float32 references.

Writes tests/fixtures/<variant>/ exactly like tools/ref/make_tiny_llama.py (whose helpers it
reuses): config.json + model.safetensors, model.gguf (F32, laid out as llama.cpp's
convert_hf_to_gguf.py writes Qwen2/Qwen3: NeoX RoPE, so q/k rows are NOT permuted; q/k/v biases
as blk.N.attn_{q,k,v}.bias; QK norms as blk.N.attn_{q,k}_norm.weight), reference.json and
logits_<prompt>.npy.

Run (from the repository root):
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_qwen.py [--variant qwen2-tiny] [--no-llamacpp]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

import gguf
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_tiny_llama as base  # noqa: E402
from tiny_ref import (N_GREEDY, check_features, logits_of, max_diff, pick_prompt,  # noqa: E402
                      prompt_references, publish, report_size, run_variants, versions)

from tiny_ref import FIXTURES, VOCAB  # noqa: E402

BOS_ID, EOS_ID = base.BOS_ID, base.EOS_ID

FAMILIES = {
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
}

VARIANTS = {
    # q/k/v biases, GQA 4/2, tied embeddings; hub spelling with a sliding window that
    # `use_sliding_window: false` switches off (transformers ignores it; so must we).
    "qwen2-tiny": dict(
        family="qwen2", seed=2024, spelling="hub",
        hub_extra={"use_sliding_window": False, "sliding_window": 8, "max_window_layers": 1},
        config=dict(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
            rms_norm_eps=1e-6, tie_word_embeddings=True, initializer_range=0.1,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            bos_token_id=BOS_ID, eos_token_id=EOS_ID,
        ),
    ),
    # QK norm, no biases, GQA 8/2 with heads*head_dim (128) != hidden (64), untied head;
    # transformers-5 spelling.
    "qwen3-tiny": dict(
        family="qwen3", seed=3033, spelling="transformers5", hub_extra={},
        config=dict(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=8, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False,
            initializer_range=0.1, attention_bias=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            bos_token_id=BOS_ID, eos_token_id=EOS_ID,
        ),
    ),
    # Sliding window on the layers at and above `max_window_layers` only (transformers derives
    # layer_types [full, sliding, sliding] from it; the hub spelling drops layer_types, so the
    # engine must derive them too). No GGUF twin: llama.cpp's qwen2 has no sliding window.
    "qwen2-tiny-swa": dict(
        family="qwen2", seed=2025, spelling="hub", hub_extra={}, gguf=False,
        config=dict(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
            rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.1,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
            use_sliding_window=True, sliding_window=8, max_window_layers=1,
            bos_token_id=BOS_ID, eos_token_id=EOS_ID,
        ),
    ),
}


def build_model(spec: dict):
    cfg_cls, model_cls = FAMILIES[spec["family"]]
    cfg = cfg_cls(**spec["config"])
    cfg._attn_implementation = "eager"
    torch.manual_seed(spec["seed"])
    model = model_cls(cfg).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(spec["seed"])
    std = cfg.initializer_range
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("norm.weight"):
                p.copy_(1.0 + base.NORM_NOISE_STD * torch.randn(p.shape, generator=gen))
            elif name in ("model.embed_tokens.weight", "lm_head.weight"):
                p.copy_(base.EMBED_STD * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(std * torch.randn(p.shape, generator=gen))
    for name, p in model.named_parameters():
        assert float((p.max() - p.min()).detach()) > 0, f"{name} is constant"
    return model


def pick_qwen_prompt(model, length: int, seed: int):
    """As tiny_ref.pick_prompt, but tiny random Qwen2/3 models loop sooner: accept 4 distinct
    greedy tokens (the margin rule is unchanged)."""
    return pick_prompt(model, length, seed, min_distinct=4)


def load_model(spec: dict, folder: Path):
    _, model_cls = FAMILIES[spec["family"]]
    return model_cls.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()


def to_hub_spelling(config_path: Path, extra: dict) -> None:
    cfg = json.loads(config_path.read_text())
    rp = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rp.pop("rope_theta")
    cfg["rope_scaling"] = rp if rp.get("rope_type", "default") != "default" else None
    if "dtype" in cfg:
        cfg["torch_dtype"] = cfg.pop("dtype")
    cfg.update(extra)
    cfg.pop("layer_types", None)
    config_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


GGUF_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def write_gguf(folder: Path, name: str, arch: str, cfg, sd: dict) -> dict:
    rp = dict(cfg.rope_parameters)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    path = folder / "model.gguf"
    w = gguf.GGUFWriter(str(path), arch)
    w.add_type("model")
    w.add_name(name)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(rp["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    if arch == "qwen3":
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokens, types, merges = base.gguf_vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_add_bos_token(False)
    written = []
    for hf_name in sorted(sd):
        t = sd[hf_name].to(torch.float32)
        if hf_name == "model.embed_tokens.weight":
            g = "token_embd.weight"
        elif hf_name == "model.norm.weight":
            g = "output_norm.weight"
        elif hf_name == "lm_head.weight":
            g = "output.weight"
        else:
            parts = hf_name.split(".")
            assert parts[:2] == ["model", "layers"], hf_name
            g = f"blk.{int(parts[2])}.{GGUF_NAMES['.'.join(parts[3:])]}"
        w.add_tensor(g, np.ascontiguousarray(t.numpy()))
        written.append(g)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"file": "model.gguf", "arch": arch, "tensor_type": "F32",
            "qk_permuted": False, "tensors": written,
            "tokenizer": "gpt2 BPE (as make_tiny_llama.py), pre-tokenizer qwen2"}


@torch.no_grad()
def feature_checks(spec: dict, model, ids: list[int]) -> dict:
    cfg_cls, model_cls = FAMILIES[spec["family"]]
    base_logits = logits_of(model, ids)
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    checks = {}

    def variant(sd_fn=None, cfg_changes=None):
        c = cfg_cls.from_dict({**model.config.to_dict(), **(cfg_changes or {})})
        c._attn_implementation = "eager"
        m = model_cls(c).to(torch.float32).eval()
        s = sd_fn(dict(sd)) if sd_fn else dict(sd)
        m.load_state_dict(s, strict=False)
        if c.tie_word_embeddings:
            m.tie_weights()
        return logits_of(m, ids)

    checks["rebuild_identity"] = max_diff(variant(), base_logits)
    checks["biases_zeroed"] = max_diff(variant(
        lambda s: {k: (torch.zeros_like(v) if k.endswith("bias") else v) for k, v in s.items()}),
        base_logits) if any(k.endswith("bias") for k in sd) else None
    checks["qk_norms_set_to_one"] = max_diff(variant(
        lambda s: {k: (torch.ones_like(v) if k.endswith(("q_norm.weight", "k_norm.weight")) else v)
                   for k, v in s.items()}), base_logits) if any("q_norm" in k for k in sd) else None
    checks["rope_theta_1e4"] = max_diff(variant(cfg_changes={
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}), base_logits)
    if spec["family"] == "qwen2":
        checks["sliding_window_8_on"] = max_diff(variant(cfg_changes={
            "use_sliding_window": True, "sliding_window": 8, "max_window_layers": 0,
            "layer_types": ["sliding_attention"] * model.config.num_hidden_layers}), base_logits)
    if getattr(model.config, "use_sliding_window", False):
        checks["sliding_window_off"] = max_diff(variant(cfg_changes={
            "use_sliding_window": False, "sliding_window": None,
            "layer_types": ["full_attention"] * model.config.num_hidden_layers}), base_logits)
    return {k: v for k, v in checks.items() if v is not None}


def make_variant(name: str, spec: dict, use_llamacpp: bool) -> None:
    out = FIXTURES / name
    print(f"== {name}", flush=True)
    model = build_model(spec)

    def save(tmp: Path) -> None:
        model.save_pretrained(tmp)
        if spec["spelling"] == "hub":
            to_hub_spelling(tmp / "config.json", spec["hub_extra"])
    publish(out, save)
    ref = load_model(spec, out)
    probe = list(range(0, VOCAB, 7))[:20]
    reload_diff = max_diff(logits_of(ref, probe), logits_of(model, probe))
    assert reload_diff == 0.0, reload_diff

    prompts, logits = prompt_references(ref, out, spec["seed"], pick_qwen_prompt)
    checks = feature_checks(spec, ref, prompts[1]["ids"])
    check_features(checks, 1e-2)

    sd = base.load_state_dict(out)
    gguf_info = write_gguf(out, name, spec["family"], ref.config, sd) if spec.get("gguf", True) else None
    reference = {
        "generator": "tools/ref/make_tiny_qwen.py",
        "versions": versions(),
        "seed": spec["seed"],
        "attn_implementation": "eager",
        "dtype": "float32",
        "config": {"architecture": type(ref).__name__, "config_spelling": spec["spelling"],
                   **spec["config"], **spec["hub_extra"]},
        "gguf": gguf_info,
        "n_greedy": N_GREEDY,
        "greedy_method": "argmax of the last-position logits, full recompute each step, no EOS stop",
        "prompts": prompts,
        "feature_checks_max_abs_logit_change": checks,
        "feature_checks_prompt": "long",
    }
    if use_llamacpp and gguf_info is not None:
        lc = base.llamacpp_check(out, prompts, logits)
        if lc is not None:
            print("llama.cpp GGUF twin:", lc)
            reference["llamacpp_gguf_check"] = lc
    (out / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    report_size(out)


if __name__ == "__main__":
    run_variants(__doc__, VARIANTS, make_variant, llamacpp_flag=True)
