#!/usr/bin/env python3
"""Tiny random Gemma 3 text checkpoints, a GGUF twin and transformers float32 references.

Writes, for each variant, tests/fixtures/<variant>/:
  config.json, model.safetensors, generation_config.json
  model.gguf           (variant a only) GGUF twin (F32) laid out as llama.cpp's convert_hf_to_gguf.py
                       writes gemma3: norms stored as w + 1, NeoX RoPE (q/k rows not permuted),
                       tokenizer "llama" (SentencePiece) with byte tokens
  reference.json       versions, seed, config, prompts + greedy ids + margins, feature checks
  logits_<name>.npy    float32 [n_prompt, vocab]: logits of every prompt position

Variants:
  gemma3-tiny-a  Gemma3ForCausalLM, transformers-5 config spelling (rope_parameters per layer type),
                 6 layers (llama.cpp's fixed pattern: 5 sliding + 1 global), GQA 4/2, window 5,
                 tied embeddings; GGUF twin cross-checked through llama.cpp.
  gemma3-tiny-b  older hub spelling (rope_theta, rope_local_base_freq, rope_scaling linear ×4 on the
                 global layers, sliding_window_pattern absent but layer_types given), MQA 4/1,
                 query_pre_attn_scalar ≠ head_dim, final logit soft-capping (and an
                 attn_logit_softcapping that transformers' gemma3 ignores), untied
                 head, window 4, layers [S, F, S, S, F]; safetensors only (llama.cpp's gemma3 reads
                 neither soft-caps nor a layer pattern from GGUF).

Run (from the repository root):
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_gemma3.py [--variant gemma3-tiny-a] [--no-llamacpp]

Everything is seeded: re-running gives byte-identical files.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

import gguf
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_ref import (FIXTURES, N_GREEDY, VOCAB, check_features, logits_of, max_diff,  # noqa: E402
                      pick_prompt, prompt_references, publish, report_size, run_variants, versions)

# ids: 0 <pad>, 1 <eos>, 2 <bos>, 3 <unk>, 4 + b = byte b (VOCAB = 260).
PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3
NORM_NOISE_STD = 0.1
EMBED_STD = 0.04

VARIANTS = {
    "gemma3-tiny-a": dict(
        seed=3031,
        spelling="transformers5",
        gguf=True,
        config=dict(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=6,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8,
            max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=True,
            initializer_range=0.1, sliding_window=5,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "default", "rope_theta": 100000.0},
            },
            pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
        ),
    ),
    "gemma3-tiny-b": dict(
        seed=3032,
        spelling="hub",
        gguf=False,
        config=dict(
            vocab_size=VOCAB, hidden_size=48, intermediate_size=96, num_hidden_layers=5,
            num_attention_heads=4, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=24,
            max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False,
            initializer_range=0.1, sliding_window=4,
            layer_types=["sliding_attention", "full_attention", "sliding_attention",
                         "sliding_attention", "full_attention"],
            attn_logit_softcapping=1.5, final_logit_softcapping=1.2,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 500.0},
                "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 20000.0},
            },
            pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
        ),
    ),
}


def build_model(spec: dict) -> Gemma3ForCausalLM:
    cfg = Gemma3TextConfig(**spec["config"])
    cfg._attn_implementation = "eager"
    torch.manual_seed(spec["seed"])
    model = Gemma3ForCausalLM(cfg).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(spec["seed"])
    std = cfg.initializer_range
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("norm.weight"):
                # (1 + w) norms: transformers initialises w = 0; use noise around 0
                p.copy_(NORM_NOISE_STD * torch.randn(p.shape, generator=gen))
            elif name in ("model.embed_tokens.weight", "lm_head.weight"):
                p.copy_(EMBED_STD * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(std * torch.randn(p.shape, generator=gen))
    for name, p in model.named_parameters():
        assert float((p.max() - p.min()).detach()) > 0, f"{name} is constant"
    return model


def to_hub_spelling(config_path: Path) -> None:
    """Rewrite a transformers-5 gemma3_text config.json in the older hub spelling."""
    cfg = json.loads(config_path.read_text())
    rp = cfg.pop("rope_parameters")
    full = dict(rp["full_attention"])
    cfg["rope_theta"] = full.pop("rope_theta")
    cfg["rope_local_base_freq"] = rp["sliding_attention"]["rope_theta"]
    cfg["rope_scaling"] = full if full.get("rope_type", "default") != "default" else None
    if "dtype" in cfg:
        cfg["torch_dtype"] = cfg.pop("dtype")
    config_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def load_model(folder: Path) -> Gemma3ForCausalLM:
    return Gemma3ForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager").eval()


def pick_gemma_prompt(model, length: int, seed: int):
    """Byte and special ids only (no <pad>..<unk>), starting with <bos>."""
    return pick_prompt(model, length, seed, low=4, bos=BOS_ID)


@torch.no_grad()
def feature_checks(model: Gemma3ForCausalLM, ids: list[int]) -> dict:
    """Change one thing, see the logits move (or not, for *_identity)."""
    base = logits_of(model, ids)
    cfg = model.config
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    checks: dict[str, float] = {}

    def variant(cfg_changes: dict | None = None, sd_fn=None) -> torch.Tensor:
        d = {**cfg.to_dict(), **(cfg_changes or {})}
        c = Gemma3TextConfig.from_dict(d)
        c._attn_implementation = "eager"
        m = Gemma3ForCausalLM(c).to(torch.float32).eval()
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
    if rp["full_attention"].get("rope_type") == "linear":
        r = {k: dict(v) for k, v in rp.items()}
        r["full_attention"] = {"rope_type": "default", "rope_theta": rp["full_attention"]["rope_theta"]}
        checks["global_linear_scaling_removed"] = max_diff(variant({"rope_parameters": r}), base)
    checks["sliding_window_x4"] = max_diff(variant({"sliding_window": cfg.sliding_window * 4}), base)
    checks["all_layers_full_attention"] = max_diff(
        variant({"layer_types": ["full_attention"] * cfg.num_hidden_layers}), base)
    checks["query_pre_attn_scalar_x2"] = max_diff(
        variant({"query_pre_attn_scalar": cfg.query_pre_attn_scalar * 2}), base)
    if cfg.attn_logit_softcapping:
        # transformers' Gemma3Attention never passes attn_logit_softcapping to the attention
        # function (Gemma 2 did); llama.cpp's gemma3 ignores it too. The config carries it to
        # prove that the engine ignores it as well.
        checks["attn_softcap_removed_identity"] = max_diff(
            variant({"attn_logit_softcapping": None}), base)
    if cfg.final_logit_softcapping:
        checks["final_softcap_removed"] = max_diff(variant({"final_logit_softcapping": None}), base)
    for group in ("q_norm", "k_norm", "input_layernorm", "post_attention_layernorm",
                  "pre_feedforward_layernorm", "post_feedforward_layernorm", "model.norm"):
        def zero(s, g=group):
            return {k: (torch.zeros_like(v) if g in k and k.endswith("weight") else v)
                    for k, v in s.items()}
        checks[f"{group}_weights_zeroed"] = max_diff(variant(sd_fn=zero), base)
    return checks


# ----------------------------------------------------------------------------------------------
# GGUF twin: what convert_hf_to_gguf.py's Gemma3Model writes (F32)

GGUF_NAMES = {
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
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def spm_vocab():
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.CONTROL] * 3 + [gguf.TokenType.UNKNOWN] + [gguf.TokenType.BYTE] * 256
    scores = [0.0] * len(tokens)
    assert len(tokens) == VOCAB
    return tokens, scores, [int(t) for t in types]


def write_gguf(folder: Path, name: str, cfg: Gemma3TextConfig, sd: dict[str, torch.Tensor]) -> dict:
    rp = cfg.rope_parameters
    assert rp["sliding_attention"]["rope_theta"] == 10000.0, "llama.cpp fixes the local theta"
    assert cfg.query_pre_attn_scalar == cfg.head_dim, "llama.cpp scales by 1/sqrt(head_dim)"
    expected = ["sliding_attention" if (i + 1) % 6 else "full_attention"
                for i in range(cfg.num_hidden_layers)]
    assert list(cfg.layer_types) == expected, "llama.cpp fixes the pattern to 6"
    path = folder / "model.gguf"
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_type("model")
    w.add_name(name)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_freq_base(float(rp["full_attention"]["rope_theta"]))
    w.add_sliding_window(cfg.sliding_window)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokens, scores, types = spm_vocab()
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_unk_token_id(UNK_ID)
    w.add_pad_token_id(PAD_ID)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    written = []
    for hf_name in sorted(sd):
        t = sd[hf_name].to(torch.float32)
        if hf_name == "lm_head.weight":
            continue  # tied
        if hf_name == "model.embed_tokens.weight":
            g = "token_embd.weight"
        elif hf_name == "model.norm.weight":
            g = "output_norm.weight"
        else:
            parts = hf_name.split(".")
            assert parts[:2] == ["model", "layers"], hf_name
            g = f"blk.{int(parts[2])}.{GGUF_NAMES['.'.join(parts[3:])]}"
        if hf_name.endswith("norm.weight"):
            t = t + 1.0  # convert_hf_to_gguf stores Gemma's (1 + w) gains
        w.add_tensor(g, np.ascontiguousarray(t.numpy()))
        written.append(g)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {
        "file": "model.gguf",
        "tensor_type": "F32",
        "norms": "stored as 1 + w (convert_hf_to_gguf Gemma3Model adds the unit offset)",
        "rope": "NeoX (rotate-half), q/k rows not permuted",
        "tensors": written,
        "tokenizer": "llama (SentencePiece): 0 <pad>, 1 <eos>, 2 <bos>, 3 <unk>, 4 + b = <0xbb>",
    }


def llamacpp_check(folder: Path, prompts: list[dict], logits: dict[str, np.ndarray]) -> dict | None:
    try:
        import llama_cpp
        from llama_cpp import Llama
    except ImportError:
        return None
    llm = Llama(model_path=str(folder / "model.gguf"), n_ctx=256, n_batch=256, n_ubatch=256,
                n_threads=2, logits_all=True, verbose=False, type_k=0, type_v=0, flash_attn=False,
                swa_full=True)
    res = {"llama_cpp_python": llama_cpp.__version__, "kv_cache": "f32", "flash_attn": False}
    for p in prompts:
        llm.reset()
        llm.eval(p["ids"])
        got = np.array(llm.scores[: len(p["ids"])], dtype=np.float32)
        res[f"{p['name']}_prompt_logits_max_abs_diff"] = float(np.abs(got - logits[p["name"]]).max())
        toks = []
        for _ in range(N_GREEDY):
            last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            t = int(np.argmax(last))
            toks.append(t)
            llm.eval([t])
        res[f"{p['name']}_greedy_ids_match"] = toks == p["greedy_ids"]
    del llm
    return res


def make_variant(name: str, spec: dict, use_llamacpp: bool) -> None:
    out = FIXTURES / name
    print(f"== {name}")
    model = build_model(spec)

    def save(tmp: Path) -> None:
        model.save_pretrained(tmp)
        if spec["spelling"] == "hub":
            to_hub_spelling(tmp / "config.json")
    publish(out, save)

    ref = load_model(out)
    assert ref.config.rope_parameters == model.config.rope_parameters, (
        ref.config.rope_parameters, model.config.rope_parameters)
    assert list(ref.config.layer_types) == list(model.config.layer_types)
    probe = list(range(4, VOCAB, 7))[:20]
    reload_diff = max_diff(logits_of(ref, probe), logits_of(model, probe))
    print(f"reload max abs diff {reload_diff:.3g}")
    assert reload_diff == 0.0

    prompts, logits = prompt_references(ref, out, spec["seed"], pick_gemma_prompt,
                                        abs_max_key="logits_abs_max")
    checks = feature_checks(ref, prompts[1]["ids"])
    check_features(checks, 1e-3)

    cfg = ref.config
    reference = {
        "generator": "tools/ref/make_tiny_gemma3.py",
        "versions": versions(),
        "seed": spec["seed"],
        "attn_implementation": "eager",
        "dtype": "float32",
        "config_spelling": spec["spelling"],
        "config": {k: v for k, v in cfg.to_dict().items() if k in spec["config"] or k in (
            "hidden_activation", "model_type")},
        "weights": {"norm_noise_std": NORM_NOISE_STD, "embedding_std": EMBED_STD,
                    "other_std": cfg.initializer_range},
        "n_greedy": N_GREEDY,
        "greedy_method": "argmax of the last-position logits, full recompute each step, no EOS stop",
        "prompts": prompts,
        "feature_checks_max_abs_logit_change": checks,
        "feature_checks_prompt": "long",
    }
    if spec["gguf"]:
        sd = {k: v for k, v in ref.state_dict().items()}
        reference["gguf"] = write_gguf(out, name, cfg, sd)
        if use_llamacpp:
            lc = llamacpp_check(out, prompts, logits)
            if lc is not None:
                print("llama.cpp GGUF twin:", lc)
                reference["llamacpp_gguf_check"] = lc
    (out / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    report_size(out)


if __name__ == "__main__":
    run_variants(__doc__, VARIANTS, make_variant, llamacpp_flag=True)
