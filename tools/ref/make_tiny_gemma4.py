#!/usr/bin/env python3
"""Tiny random Gemma 4 text checkpoints and transformers float32 references.

Writes, for each variant, tests/fixtures/<variant>/:
  config.json, model.safetensors, generation_config.json
  reference.json       versions, seed, config, prompts + greedy ids + margins, feature checks
  logits_<name>.npy    float32 [n_prompt, vocab]: logits of every prompt position

Variants:
  gemma4-tiny-dense  Gemma4ForCausalLM (E2B-style), transformers-5 config spelling (the
                     `per_layer_config` this transformers writes), 8 layers [S S F S F S S F]
                     (the last unshared layers F after S, as llama.cpp's KV reuse assumes),
                     per-layer embeddings (PLE), the top 3 layers reuse the KV of layers 3 (S)
                     and 4 (F), double-wide MLP on those shared layers, global layers with their
                     own head dim (16 vs 8), one kv head and k = v, proportional RoPE (partial
                     0.5) on the global layers, window 5, final soft-cap, random layer scalars
                     and norms. GGUF twin.
  gemma4-tiny-moe    Gemma4ForConditionalGeneration-style nested config (`text_config`, weights
                     under `model.language_model.`), 26B-A4B-style block: dense MLP + 4 routed
                     experts (top-2) with router scale and per-expert scales, no PLE, no KV
                     sharing, hub config spelling (`global_head_dim`,
                     `num_global_key_value_heads`) relying on family defaults (no
                     `layer_types` — the default 5:1 pattern —, no `rope_parameters`, no
                     `rms_norm_eps`, `hidden_activation`, `tie_word_embeddings`), window 4,
                     untied head. GGUF twin.

GGUF twins (model.gguf, F32) are laid out as llama.cpp's convert_hf_to_gguf.py Gemma4Model writes
them (arch `gemma4`: norms stored as is, `global_head_dim` as key_length and `head_dim` as
key_length_swa, per-layer kv-head and feed-forward arrays, a bool sliding-window pattern,
`rope_freqs.weight` of 1 for the rotating pairs of the global layers and 1e30 for the others,
`layer_output_scale`, `ffn_gate_inp.scale` / `ffn_down_exps.scale` for the router scales), except
the vocabulary: a llama (SentencePiece) byte vocabulary instead of the `gemma4` tokenizer model.
Each twin is run through llama.cpp (llama-cpp-python) and its logits compared with transformers'.

Run (from the repository root):
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_gemma4.py [--variant gemma4-tiny-dense]

Everything is seeded: re-running gives byte-identical files.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from transformers import Gemma4ForCausalLM, Gemma4TextConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_ref import (FIXTURES, N_GREEDY, VOCAB, check_features, logits_of, max_diff,  # noqa: E402
                      pick_prompt, prompt_references, publish, report_size, run_variants, versions)

# ids: 0 <pad>, 1 <eos>, 2 <bos>, 3 <unk>, 4 + b = byte b (VOCAB = 260).
PAD_ID, EOS_ID, BOS_ID = 0, 1, 2
NORM_NOISE_STD = 0.1
EMBED_STD = 0.04

VARIANTS = {
    "gemma4-tiny-dense": dict(
        seed=4041,
        spelling="transformers5",
        nested=False,
        gguf=True,
        config=dict(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=8,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8,
            global_head_dim=16, num_global_key_value_heads=1, attention_k_eq_v=True,
            max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=True,
            initializer_range=0.1, sliding_window=5,
            layer_types=["sliding_attention", "sliding_attention", "full_attention",
                         "sliding_attention", "full_attention", "sliding_attention",
                         "sliding_attention", "full_attention"],
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5,
                                   "rope_theta": 1000000.0},
            },
            final_logit_softcapping=3.0,
            hidden_size_per_layer_input=8, vocab_size_per_layer_input=VOCAB,
            num_kv_shared_layers=3, use_double_wide_mlp=True,
            pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
        ),
    ),
    "gemma4-tiny-moe": dict(
        seed=4042,
        spelling="hub-defaults",
        nested=True,
        gguf=True,
        config=dict(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=40, num_hidden_layers=6,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8,
            global_head_dim=16, num_global_key_value_heads=1, attention_k_eq_v=True,
            max_position_embeddings=512, tie_word_embeddings=False,
            initializer_range=0.1, sliding_window=4,
            final_logit_softcapping=2.5,
            hidden_size_per_layer_input=0,
            enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=16,
            pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
        ),
    ),
}

# Fields the moe variant drops from config.json because they equal Gemma4TextConfig's defaults
# (the engine must know those defaults).
DEFAULTED = ["layer_types", "rope_parameters", "rms_norm_eps", "hidden_activation",
             "attention_bias", "num_kv_shared_layers", "use_double_wide_mlp",
             "vocab_size_per_layer_input", "use_bidirectional_attention"]


def build_model(spec: dict) -> Gemma4ForCausalLM:
    cfg = Gemma4TextConfig(**spec["config"])
    cfg._attn_implementation = "eager"
    torch.manual_seed(spec["seed"])
    model = Gemma4ForCausalLM(cfg).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(spec["seed"])
    std = cfg.initializer_range
    with torch.no_grad():
        for name, p in sorted(model.state_dict(keep_vars=True).items(), key=lambda kv: kv[0]):
            if name.endswith("norm.weight"):
                # Gemma 4 norms multiply by w (initialised to 1): use noise around 1
                p.copy_(1.0 + NORM_NOISE_STD * torch.randn(p.shape, generator=gen))
            elif name.endswith("layer_scalar"):
                p.copy_(0.6 + 0.8 * torch.rand(p.shape, generator=gen))
            elif name.endswith("router.scale") or name.endswith("per_expert_scale"):
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            elif name in ("model.embed_tokens.weight", "lm_head.weight"):
                p.copy_(EMBED_STD * torch.randn(p.shape, generator=gen))
            elif "embed_tokens_per_layer" in name:
                p.copy_(EMBED_STD * torch.randn(p.shape, generator=gen))
            elif name.endswith("inv_freq") or name.endswith("embed_scale"):
                continue
            else:
                p.copy_(std * torch.randn(p.shape, generator=gen))
    for name, p in model.named_parameters():
        assert float((p.max() - p.min()).detach()) > 0, f"{name} is constant"
    return model


def nest_checkpoint(folder: Path) -> None:
    """Rewrite a Gemma4ForCausalLM folder as the multimodal checkpoint's text part: config
    under `text_config`, weights under `model.language_model.` (head kept as `lm_head`)."""
    cfg = json.loads((folder / "config.json").read_text())
    text = {k: v for k, v in cfg.items() if k not in ("architectures", "transformers_version", "dtype")}
    outer = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
             "dtype": cfg.get("dtype", "float32"), "text_config": text,
             "tie_word_embeddings": cfg["tie_word_embeddings"],
             "transformers_version": cfg["transformers_version"]}
    (folder / "config.json").write_text(json.dumps(outer, indent=2, sort_keys=True) + "\n")
    sd = load_file(str(folder / "model.safetensors"))
    out = {}
    for k, v in sd.items():
        out["model.language_model." + k[len("model."):] if k.startswith("model.") else k] = v
    save_file(out, str(folder / "model.safetensors"), metadata={"format": "pt"})


def to_hub_defaults(folder: Path) -> None:
    """Older hub spelling (global_head_dim / num_global_key_value_heads instead of
    per_layer_config), with the fields that equal the family defaults left out."""
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    text = cfg["text_config"] if "text_config" in cfg else cfg
    plc = text.pop("per_layer_config")
    first = next(iter(plc.values()))
    text["global_head_dim"] = first["head_dim"]
    text["num_global_key_value_heads"] = first["num_key_value_heads"]
    defaults = Gemma4TextConfig(num_hidden_layers=text["num_hidden_layers"]).to_dict()
    for k in DEFAULTED:
        assert text[k] == defaults[k], (k, text[k], defaults[k])
        del text[k]
    if "dtype" in cfg:
        cfg["torch_dtype"] = cfg.pop("dtype")
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def load_model(folder: Path, nested: bool):
    if nested:
        from transformers import Gemma4ForConditionalGeneration
        m = Gemma4ForConditionalGeneration.from_pretrained(
            folder, dtype=torch.float32, attn_implementation="eager").eval()
        return m
    return Gemma4ForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager").eval()


def text_config(model):
    c = model.config
    return c.get_text_config() if hasattr(c, "get_text_config") else c


def pick_gemma_prompt(model, length: int, seed: int):
    """Ids from <unk> up (no <pad>, <eos>, <bos> inside), starting with <bos>."""
    return pick_prompt(model, length, seed, low=3, bos=BOS_ID)


@torch.no_grad()
def feature_checks(model: Gemma4ForCausalLM, ids: list[int]) -> dict:
    """Change one thing, see the logits move."""
    base = logits_of(model, ids)
    cfg = model.config
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    checks: dict[str, float] = {}

    def variant(cfg_changes: dict | None = None, sd_fn=None) -> torch.Tensor:
        d = {**cfg.to_dict(), **(cfg_changes or {})}
        c = Gemma4TextConfig.from_dict(d)
        c._attn_implementation = "eager"
        m = Gemma4ForCausalLM(c).to(torch.float32).eval()
        s = {k: v.clone() for k, v in sd.items()}
        if sd_fn:
            s = sd_fn(s)
        missing, unexpected = m.load_state_dict(s, strict=False)
        assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
        if c.tie_word_embeddings:
            m.tie_weights()
        return logits_of(m, ids)

    checks["rebuild_identity"] = max_diff(variant(), base)
    rp = {k: dict(v) for k, v in cfg.rope_parameters.items()}

    def with_rope(kind, **kw):
        r = {k: dict(v) for k, v in rp.items()}
        r[kind].update(kw)
        return {"rope_parameters": r}
    checks["local_rope_theta_x3"] = max_diff(
        variant(with_rope("sliding_attention", rope_theta=rp["sliding_attention"]["rope_theta"] * 3)), base)
    checks["global_rope_theta_x3"] = max_diff(
        variant(with_rope("full_attention", rope_theta=rp["full_attention"]["rope_theta"] * 3)), base)
    other = 0.5 if rp["full_attention"].get("partial_rotary_factor") == 0.25 else 0.25
    checks[f"global_partial_rotary_{other}"] = max_diff(
        variant(with_rope("full_attention", partial_rotary_factor=other)), base)
    if "factor" in rp["full_attention"]:
        r = {k: dict(v) for k, v in rp.items()}
        del r["full_attention"]["factor"]
        checks["global_rope_factor_removed"] = max_diff(variant({"rope_parameters": r}), base)
    checks["sliding_window_x4"] = max_diff(variant({"sliding_window": cfg.sliding_window * 4}), base)
    if cfg.final_logit_softcapping:
        checks["final_softcap_removed"] = max_diff(variant({"final_logit_softcapping": None}), base)

    def scale(group, f):
        """Multiplies the tensors of `group` by f · (1 + 0.5 cos(i)) along their last axis (a
        non-uniform change: norms that feed another norm hide a uniform one)."""
        def fn(s):
            def bump(v):
                w = 1.0 + 0.5 * torch.cos(torch.arange(v.shape[-1], dtype=torch.float32))
                return v * f * w
            return {k: (bump(v) if group in k else v) for k, v in s.items()}
        return fn
    checks["layer_scalars_x2"] = max_diff(variant(sd_fn=scale("layer_scalar", 2.0)), base)
    if cfg.hidden_size_per_layer_input:
        checks["ple_table_x2"] = max_diff(variant(sd_fn=scale("embed_tokens_per_layer", 2.0)), base)
        checks["ple_model_projection_x2"] = max_diff(
            variant(sd_fn=scale("per_layer_model_projection", 2.0)), base)
    if cfg.num_kv_shared_layers:
        # The shared layers' own k/v weights are ignored: dropping the sharing changes logits.
        checks["kv_sharing_off"] = max_diff(variant({"num_kv_shared_layers": 0, "use_double_wide_mlp": False},
                                                    sd_fn=lambda s: add_kv(s, cfg)), base)
    if cfg.enable_moe_block:
        checks["per_expert_scale_x2"] = max_diff(variant(sd_fn=scale("per_expert_scale", 2.0)), base)
        checks["router_scale_x2"] = max_diff(variant(sd_fn=scale("router.scale", 2.0)), base)
        checks["experts_x2"] = max_diff(variant(sd_fn=scale("experts.down_proj", 2.0)), base)
    for group in ("q_norm", "k_norm", "input_layernorm", "post_attention_layernorm",
                  "pre_feedforward_layernorm", "post_feedforward_layernorm", "model.norm"):
        checks[f"{group}_weights_x2"] = max_diff(variant(sd_fn=scale(group, 2.0)), base)
    return checks


def add_kv(s: dict, cfg) -> dict:
    """Gives the KV-shared layers k (and v) projections and norms copied from their producers
    and halves their MLP back to the normal width, so sharing can be switched off."""
    s = dict(s)
    n = cfg.num_hidden_layers
    first = n - cfg.num_kv_shared_layers
    for i in range(first, n):
        kind = cfg.layer_types[i]
        src = max(j for j in range(first) if cfg.layer_types[j] == kind)
        for k in list(s):
            pre = f"model.layers.{src}.self_attn."
            if k.startswith(pre) and any(p in k for p in ("k_proj", "v_proj", "k_norm")):
                s[k.replace(f"layers.{src}.", f"layers.{i}.")] = s[k].clone()
        if cfg.use_double_wide_mlp:
            m = cfg.intermediate_size
            for p in ("gate_proj", "up_proj"):
                key = f"model.layers.{i}.mlp.{p}.weight"
                s[key] = s[key][:m].clone()
            key = f"model.layers.{i}.mlp.down_proj.weight"
            s[key] = s[key][:, :m].clone()
    return s


# ----------------------------------------------------------------------------------------------
# GGUF twin: what convert_hf_to_gguf.py's Gemma4Model writes (F32)

GGUF_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "pre_feedforward_layernorm_2.weight": "pre_ffw_norm_2.weight",
    "post_feedforward_layernorm_1.weight": "post_ffw_norm_1.weight",
    "post_feedforward_layernorm_2.weight": "post_ffw_norm_2.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "router.proj.weight": "ffn_gate_inp.weight",
    "router.scale": "ffn_gate_inp.scale",
    "router.per_expert_scale": "ffn_down_exps.scale",
    "experts.gate_up_proj": "ffn_gate_up_exps.weight",
    "experts.down_proj": "ffn_down_exps.weight",
    "per_layer_input_gate.weight": "inp_gate.weight",
    "per_layer_projection.weight": "proj.weight",
    "post_per_layer_input_norm.weight": "post_norm.weight",
    "layer_scalar": "layer_output_scale.weight",
}
GGUF_GLOBAL = {
    "embed_tokens.weight": "token_embd.weight",
    "norm.weight": "output_norm.weight",
    "embed_tokens_per_layer.weight": "per_layer_token_embd.weight",
    "per_layer_model_projection.weight": "per_layer_model_proj.weight",
    "per_layer_projection_norm.weight": "per_layer_proj_norm.weight",
}


def write_gguf(folder: Path, name: str, cfg: Gemma4TextConfig, sd: dict[str, torch.Tensor]) -> dict:
    import gguf
    from make_tiny_gemma3 import spm_vocab

    assert VOCAB == 260
    rp = cfg.rope_parameters
    full, swa = rp["full_attention"], rp["sliding_attention"]
    assert full["rope_type"] == "proportional" and "factor" not in full, "the converter drops factor"
    assert swa.get("rope_type", "default") == "default"
    types = list(cfg.layer_types)
    is_swa = [t == "sliding_attention" for t in types]
    n = cfg.num_hidden_layers
    gl = cfg.per_layer_config[types.index("full_attention")]
    sl = cfg.per_layer_config[types.index("sliding_attention")]
    ghd, hd = gl.head_dim, sl.head_dim
    path = folder / "model.gguf"
    w = gguf.GGUFWriter(str(path), "gemma4")
    w.add_type("model")
    w.add_name(name)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(n)
    first_shared = n - cfg.num_kv_shared_layers
    if cfg.use_double_wide_mlp:
        w.add_feed_forward_length([cfg.intermediate_size * (2 if i >= first_shared else 1) for i in range(n)])
    else:
        w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    if gl.num_key_value_heads != sl.num_key_value_heads:
        w.add_head_count_kv([sl.num_key_value_heads if s else gl.num_key_value_heads for s in is_swa])
    else:
        w.add_head_count_kv(sl.num_key_value_heads)
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_key_length(ghd)
    w.add_value_length(ghd)
    w.add_key_length_swa(hd)
    w.add_value_length_swa(hd)
    w.add_rope_freq_base(float(full["rope_theta"]))
    w.add_rope_freq_base_swa(float(swa["rope_theta"]))
    w.add_rope_dimension_count(ghd)
    w.add_rope_dimension_count_swa(hd)
    if cfg.final_logit_softcapping:
        w.add_final_logit_softcapping(float(cfg.final_logit_softcapping))
    w.add_sliding_window(cfg.sliding_window)
    w.add_shared_kv_layers(cfg.num_kv_shared_layers)
    w.add_embedding_length_per_layer_input(cfg.hidden_size_per_layer_input or 0)
    w.add_sliding_window_pattern(is_swa)
    if cfg.enable_moe_block:
        w.add_expert_count(cfg.num_experts)
        w.add_expert_used_count(cfg.top_k_experts)
        w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokens, scores, toktypes = spm_vocab()
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(toktypes)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_unk_token_id(3)
    w.add_pad_token_id(PAD_ID)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    n_rot = int(ghd * full["partial_rotary_factor"] / 2)
    freqs = np.array([1.0] * n_rot + [1e30] * (ghd // 2 - n_rot), dtype=np.float32)
    w.add_tensor("rope_freqs.weight", freqs)
    written = ["rope_freqs.weight"]
    for hf_name in sorted(sd):
        t = sd[hf_name].to(torch.float32)
        if hf_name == "lm_head.weight":
            if cfg.tie_word_embeddings:
                continue
            g = "output.weight"
        else:
            assert hf_name.startswith("model."), hf_name
            rest = hf_name[len("model."):]
            if rest in GGUF_GLOBAL:
                g = GGUF_GLOBAL[rest]
            else:
                parts = rest.split(".")
                assert parts[0] == "layers", hf_name
                g = f"blk.{int(parts[1])}.{GGUF_LAYER['.'.join(parts[2:])]}"
        w.add_tensor(g, np.ascontiguousarray(t.numpy()))
        written.append(g)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {
        "file": "model.gguf",
        "tensor_type": "F32",
        "layout": "convert_hf_to_gguf.py Gemma4Model (norms as is, rope_freqs 1 / 1e30, per-layer arrays)",
        "tokenizer": "llama (SentencePiece): 0 <pad>, 1 <eos>, 2 <bos>, 3 <unk>, 4 + b = <0xbb>",
        "tensors": written,
    }


def make_variant(name: str, spec: dict) -> None:
    out = FIXTURES / name
    print(f"== {name}")
    model = build_model(spec)

    def save(tmp: Path) -> None:
        model.save_pretrained(tmp)
        if spec["nested"]:
            nest_checkpoint(tmp)
        if spec["spelling"] == "hub-defaults":
            to_hub_defaults(tmp)
    publish(out, save)

    ref = load_model(out, spec["nested"])
    tc = text_config(ref)
    assert list(tc.layer_types) == list(model.config.layer_types), (tc.layer_types, model.config.layer_types)
    assert tc.rope_parameters == model.config.rope_parameters, (tc.rope_parameters, model.config.rope_parameters)
    probe = list(range(3, VOCAB, 7))[:20]
    reload_diff = max_diff(logits_of(ref, probe), logits_of(model, probe))
    print(f"reload max abs diff {reload_diff:.3g}")
    assert reload_diff == 0.0

    prompts, logits = prompt_references(ref, out, spec["seed"], pick_gemma_prompt,
                                        abs_max_key="logits_abs_max")
    checks = feature_checks(model, prompts[1]["ids"])
    check_features(checks, 1e-3)

    cfg = model.config
    reference = {
        "generator": "tools/ref/make_tiny_gemma4.py",
        "versions": versions(),
        "seed": spec["seed"],
        "attn_implementation": "eager",
        "dtype": "float32",
        "config_spelling": spec["spelling"],
        "nested_multimodal_layout": spec["nested"],
        "config": {k: v for k, v in cfg.to_dict().items() if k in spec["config"] or k in (
            "hidden_activation", "model_type", "layer_types", "rope_parameters", "per_layer_config")},
        "kv_sharing_modes": cfg.kv_sharing_modes,
        "weights": {"norm_noise_std_around_1": NORM_NOISE_STD, "embedding_std": EMBED_STD,
                    "layer_scalar": "uniform [0.6, 1.4)", "router_scales": "uniform [0.5, 1.5)",
                    "other_std": cfg.initializer_range},
        "n_greedy": N_GREEDY,
        "greedy_method": "argmax of the last-position logits, full recompute each step, no EOS stop",
        "prompts": prompts,
        "feature_checks_max_abs_logit_change": checks,
        "feature_checks_prompt": "long",
    }
    if spec.get("gguf"):
        from make_tiny_gemma3 import llamacpp_check
        sd = {k: v for k, v in model.state_dict().items()}
        reference["gguf"] = write_gguf(out, name, cfg, sd)
        lc = llamacpp_check(out, prompts, logits)
        if lc is not None:
            print("llama.cpp GGUF twin:", lc)
            reference["llamacpp_gguf_check"] = lc
    (out / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    report_size(out)


if __name__ == "__main__":
    run_variants(__doc__, VARIANTS, make_variant, llamacpp_flag=False)
