#!/usr/bin/env python3
"""Tiny random Llama checkpoints, their GGUF twins and transformers float32 references.

Writes, for each variant, tests/fixtures/<variant>/:
  config.json, model.safetensors (or model-0000X-of-0000N.safetensors + index), generation_config.json
  model.gguf           GGUF twin (F32), laid out exactly as llama.cpp's convert_hf_to_gguf.py would
  reference.json       versions, seed, config summary, prompts + greedy ids + margins, feature checks
  logits_<name>.npy    float32 [n_prompt, vocab]: logits of every prompt position

Run (from the repository root):
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_llama.py [--variant llama-tiny-a] [--no-llamacpp]

Everything is seeded: re-running gives byte-identical safetensors, GGUF and .npy files.
If llama_cpp (llama-cpp-python) is importable, the GGUF twin is also run through llama.cpp and its
logits are compared with the transformers reference (recorded under "llamacpp_gguf_check").
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

import gguf
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM

from tiny_ref import (FIXTURES, N_GREEDY, VOCAB, check_features, logits_of, max_diff, pick_prompt,
                      prompt_references, publish, report_size, run_variants, versions)

# 256 byte-level tokens (id == byte value, VOCAB = 260), two control tokens, two merged tokens.
BOS_ID, EOS_ID = 256, 257
NORM_NOISE_STD = 0.1
EMBED_STD = 0.04

VARIANTS = {
    # GQA 4 q heads / 2 kv heads, tied embeddings, plain RoPE; transformers-5 config spelling.
    "llama-tiny-a": dict(
        seed=1234,
        spelling="transformers5",
        max_shard_size=None,
        config=dict(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
            rms_norm_eps=1e-5, tie_word_embeddings=True, initializer_range=0.1,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            bos_token_id=BOS_ID, eos_token_id=EOS_ID,
        ),
    ),
    # GQA 8 q heads / 2 kv heads (ratio 4), head_dim 8, untied lm_head, Llama-3 RoPE scaling,
    # older hub config spelling, sharded safetensors.
    # head_dim 8 at theta 5e5 gives wavelengths 6.3, 167, 4443, 1.2e5; with original context 256
    # (high-freq wavelength 64, low-freq wavelength 256) one frequency is kept, one is smoothed and
    # two are divided by the factor: every branch of the llama3 formula is used.
    "llama-tiny-b": dict(
        seed=4321,
        spelling="hub",
        max_shard_size="150KB",
        config=dict(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=8, num_key_value_heads=2, head_dim=8, max_position_embeddings=512,
            rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.1,
            rope_parameters={
                "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 256,
            },
            bos_token_id=BOS_ID, eos_token_id=EOS_ID,
        ),
    ),
}


# ----------------------------------------------------------------------------------------------
# model construction


def build_model(spec: dict) -> LlamaForCausalLM:
    cfg = LlamaConfig(**spec["config"])
    cfg._attn_implementation = "eager"
    torch.manual_seed(spec["seed"])
    model = LlamaForCausalLM(cfg).to(torch.float32).eval()
    # Draw every parameter ourselves, in name order, from one seeded generator, so that the
    # fixture does not depend on transformers' init code.
    gen = torch.Generator().manual_seed(spec["seed"])
    std = cfg.initializer_range
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("norm.weight"):
                # all-equal tensors hide bugs: 1 + noise
                p.copy_(1.0 + NORM_NOISE_STD * torch.randn(p.shape, generator=gen))
            elif name in ("model.embed_tokens.weight", "lm_head.weight"):
                p.copy_(EMBED_STD * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(std * torch.randn(p.shape, generator=gen))
    for name, p in model.named_parameters():
        assert p.numel() == 1 or float((p.max() - p.min()).detach()) > 0, f"{name} is constant"
    return model


def to_hub_spelling(config_path: Path) -> None:
    """Rewrite a transformers-5 config.json in the older hub spelling."""
    cfg = json.loads(config_path.read_text())
    rp = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rp.pop("rope_theta")
    cfg["rope_scaling"] = rp if rp.get("rope_type", "default") != "default" else None
    if "dtype" in cfg:
        cfg["torch_dtype"] = cfg.pop("dtype")
    config_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def load_model(folder: Path) -> LlamaForCausalLM:
    return LlamaForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager").eval()


def load_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    index = folder / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    sd: dict[str, torch.Tensor] = {}
    for f in files:
        sd.update(load_file(folder / f))
    return sd


# ----------------------------------------------------------------------------------------------
# references


# ----------------------------------------------------------------------------------------------
# feature checks: change one thing, see the logits move



@torch.no_grad()
def feature_checks(model: LlamaForCausalLM, ids: list[int]) -> dict:
    base = logits_of(model, ids)
    cfg = model.config
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    checks: dict[str, float] = {}

    def variant(cfg_changes: dict | None = None, sd_fn=None) -> torch.Tensor:
        c = LlamaConfig.from_dict({**cfg.to_dict(), **(cfg_changes or {})})
        c._attn_implementation = "eager"
        m = LlamaForCausalLM(c).to(torch.float32).eval()
        s = {k: v.clone() for k, v in sd.items()}
        if sd_fn:
            s = sd_fn(s)
        missing, unexpected = m.load_state_dict(s, strict=False)
        assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
        if c.tie_word_embeddings:
            m.tie_weights()
        return logits_of(m, ids)

    # sanity: rebuilding from config + state dict reproduces the reference
    checks["rebuild_identity"] = max_diff(variant(), base)

    # norms: drop the noise (all ones)
    def ones_norms(s):
        return {k: (torch.ones_like(v) if k.endswith("norm.weight") else v) for k, v in s.items()}
    checks["norm_weights_set_to_one"] = max_diff(variant(sd_fn=ones_norms), base)

    # rope
    rp = dict(cfg.rope_parameters)
    if rp.get("rope_type") == "llama3":
        plain = {"rope_type": "default", "rope_theta": rp["rope_theta"]}
        checks["llama3_scaling_removed"] = max_diff(variant({"rope_parameters": plain}), base)
        other = {**rp, "original_max_position_embeddings": 8192}
        checks["llama3_original_max_pos_256_to_8192"] = max_diff(
            variant({"rope_parameters": other}), base)
    else:
        other = {**rp, "rope_theta": rp["rope_theta"] * 2}
        checks["rope_theta_doubled"] = max_diff(variant({"rope_parameters": other}), base)

    # rope layout: rotate-half (HF) vs interleaved pairs without the q/k permutation
    n_h, n_kv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim

    def permute_qk(s):
        out = dict(s)
        for k, v in s.items():
            if k.endswith("q_proj.weight"):
                out[k] = hf_to_gguf_permute(v, n_h, n_h)
            elif k.endswith("k_proj.weight"):
                out[k] = hf_to_gguf_permute(v, n_h, n_kv)
        return out
    checks["qk_rows_permuted_gguf_style"] = max_diff(variant(sd_fn=permute_qk), base)

    # GQA: expand kv heads to one per q head (MHA); blocked mapping (q head h -> kv h // rep)
    # must reproduce the reference, the interleaved one (h -> h % n_kv) must not.
    rep = n_h // n_kv

    def expand_kv(mapping):
        def fn(s):
            out = dict(s)
            for k, v in s.items():
                if k.endswith(("k_proj.weight", "v_proj.weight")):
                    heads = v.reshape(n_kv, hd, -1)
                    out[k] = torch.cat([heads[mapping(h)] for h in range(n_h)], 0)
            return out
        return fn
    if rep > 1:
        checks["gqa_expanded_blocked_identity"] = max_diff(
            variant({"num_key_value_heads": n_h}, expand_kv(lambda h: h // rep)), base)
        checks["gqa_expanded_interleaved"] = max_diff(
            variant({"num_key_value_heads": n_h}, expand_kv(lambda h: h % n_kv)), base)

    # rms_norm_eps matters little at this scale, but record it
    checks["rms_norm_eps_x100"] = max_diff(variant({"rms_norm_eps": cfg.rms_norm_eps * 100}), base)
    return checks


# ----------------------------------------------------------------------------------------------
# GGUF twin (what convert_hf_to_gguf.py does for LlamaForCausalLM, F32 output)


def hf_to_gguf_permute(w: torch.Tensor, n_head: int, n_head_kv: int | None) -> torch.Tensor:
    """convert_hf_to_gguf LlamaModel.permute: HF rotate-half rows -> llama.cpp interleaved pairs."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def llama3_rope_factors(rp: dict, head_dim: int) -> list[float]:
    """Per-frequency divisors stored in rope_freqs.weight, as convert_hf_to_gguf computes them.

    Note: convert_hf_to_gguf reads original_max_position_embeddings from the top level of
    config.json (default 8192), transformers from rope_scaling. They agree on every real Llama 3.x
    checkpoint (8192 in rope_scaling, none at top level); here we use the rope_scaling value so the
    GGUF twin computes what transformers computes.
    """
    base = rp["rope_theta"]
    freqs = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    factor = rp.get("factor", 8.0)
    low, high = rp.get("low_freq_factor", 1.0), rp.get("high_freq_factor", 4.0)
    old_ctx = rp.get("original_max_position_embeddings", 8192)
    low_wl, high_wl = old_ctx / low, old_ctx / high
    out = []
    for f in freqs:
        wl = 2 * math.pi / f
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (old_ctx / wl - low) / (high - low)
            out.append(float(1 / ((1 - smooth) / factor + smooth)))
    return out


def bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def gguf_vocab() -> tuple[list[str], list[int], list[str]]:
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)] + ["<s>", "</s>", "Ġt", "he"]
    types = [gguf.TokenType.NORMAL] * 256 + [gguf.TokenType.CONTROL] * 2 + [gguf.TokenType.NORMAL] * 2
    merges = ["Ġ t", "h e"]
    assert len(tokens) == VOCAB
    return tokens, [int(t) for t in types], merges


def write_gguf(folder: Path, name: str, cfg: LlamaConfig, sd: dict[str, torch.Tensor]) -> dict:
    rp = dict(cfg.rope_parameters)
    n_h, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    path = folder / "model.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_type("model")
    w.add_name(name)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(n_h)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(float(rp["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(cfg.vocab_size)
    w.add_rope_dimension_count(cfg.head_dim)
    tokens, types, merges = gguf_vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_add_bos_token(False)

    rope_factors = None
    if rp.get("rope_type") == "llama3":
        rope_factors = llama3_rope_factors(rp, cfg.head_dim)
        w.add_tensor("rope_freqs.weight", np.asarray(rope_factors, dtype=np.float32))

    names = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
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
            bid, rest = int(parts[2]), ".".join(parts[3:])
            g = f"blk.{bid}.{names[rest]}"
            if rest == "self_attn.q_proj.weight":
                t = hf_to_gguf_permute(t, n_h, n_h)
            elif rest == "self_attn.k_proj.weight":
                t = hf_to_gguf_permute(t, n_h, n_kv)
        w.add_tensor(g, np.ascontiguousarray(t.numpy()))
        written.append(g)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {
        "file": "model.gguf",
        "tensor_type": "F32",
        "qk_permuted": "convert_hf_to_gguf LlamaModel.permute (rows reordered for interleaved RoPE)",
        "rope_freqs": rope_factors,
        "tensors": (["rope_freqs.weight"] if rope_factors else []) + written,
        "tokenizer": "gpt2 BPE: ids 0..255 = the 256 bytes (GPT-2 byte-to-unicode spelling), "
                     "256 <s> (bos, control), 257 </s> (eos, control), 258 'Ġt', 259 'he'; "
                     "merges ['Ġ t', 'h e']; add_bos_token false",
    }


def llamacpp_check(folder: Path, prompts: list[dict], logits: dict[str, np.ndarray]) -> dict | None:
    """Run the GGUF twin through llama.cpp (f32 KV cache) and compare with transformers."""
    try:
        import llama_cpp
    except ImportError:
        return None
    from llama_cpp import Llama
    llm = Llama(model_path=str(folder / "model.gguf"), n_ctx=256, n_batch=256, n_ubatch=256,
                n_threads=2, logits_all=True, verbose=False,
                type_k=0, type_v=0, flash_attn=False)  # GGML_TYPE_F32 K/V
    res = {"llama_cpp_python": llama_cpp.__version__, "kv_cache": "f32", "flash_attn": False}
    for p in prompts:
        llm.reset()
        llm.eval(p["ids"])
        got = np.array(llm.scores[: len(p["ids"])], dtype=np.float32)
        res[f"{p['name']}_prompt_logits_max_abs_diff"] = float(np.abs(got - logits[p["name"]]).max())
        # greedy, one token at a time through llama.cpp's cache
        toks = []
        for _ in range(N_GREEDY):
            last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            t = int(np.argmax(last))
            toks.append(t)
            llm.eval([t])
        res[f"{p['name']}_greedy_ids_match"] = toks == p["greedy_ids"]
    del llm
    return res


# ----------------------------------------------------------------------------------------------


def make_variant(name: str, spec: dict, use_llamacpp: bool) -> None:
    out = FIXTURES / name
    print(f"== {name}")
    model = build_model(spec)

    def save(tmp: Path) -> None:
        kw = {"max_shard_size": spec["max_shard_size"]} if spec["max_shard_size"] else {}
        model.save_pretrained(tmp, **kw)
        if spec["spelling"] == "hub":
            to_hub_spelling(tmp / "config.json")
    publish(out, save)

    # reference from the saved checkpoint, reloaded
    ref = load_model(out)
    rp = dict(ref.config.rope_parameters)
    assert rp == dict(model.config.rope_parameters), (rp, model.config.rope_parameters)
    probe = list(range(0, VOCAB, 7))[:20]
    reload_diff = max_diff(logits_of(ref, probe), logits_of(model, probe))
    print(f"reload max abs diff {reload_diff:.3g}")
    assert reload_diff == 0.0

    prompts, logits = prompt_references(ref, out, spec["seed"], pick_prompt)
    checks = feature_checks(ref, prompts[1]["ids"])
    check_features(checks, 1e-2, unchecked=("rms_norm_eps_x100",))

    sd = load_state_dict(out)
    gguf_info = write_gguf(out, name, ref.config, sd)
    cfg = ref.config
    weight_files = sorted(p.name for p in out.glob("*.safetensors"))
    reference = {
        "generator": "tools/ref/make_tiny_llama.py",
        "versions": versions(),
        "seed": spec["seed"],
        "attn_implementation": "eager",
        "dtype": "float32",
        "config": {
            "architecture": "LlamaForCausalLM",
            "config_spelling": spec["spelling"],
            "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
            "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_hidden_layers,
            "num_attention_heads": cfg.num_attention_heads,
            "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim,
            "max_position_embeddings": cfg.max_position_embeddings,
            "rms_norm_eps": cfg.rms_norm_eps, "tie_word_embeddings": cfg.tie_word_embeddings,
            "rope_parameters": rp, "bos_token_id": cfg.bos_token_id,
            "eos_token_id": cfg.eos_token_id,
        },
        "weights": {
            "safetensors": weight_files,
            "sharded": (out / "model.safetensors.index.json").exists(),
            "norm_noise_std": NORM_NOISE_STD, "embedding_std": EMBED_STD,
            "other_std": cfg.initializer_range,
        },
        "gguf": gguf_info,
        "n_greedy": N_GREEDY,
        "greedy_method": "argmax of the last-position logits, full recompute each step, no EOS stop",
        "prompts": prompts,
        "feature_checks_max_abs_logit_change": checks,
        "feature_checks_prompt": "long",
    }
    if use_llamacpp:
        lc = llamacpp_check(out, prompts, logits)
        if lc is not None:
            print("llama.cpp GGUF twin:", lc)
            reference["llamacpp_gguf_check"] = lc
    (out / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    report_size(out)


if __name__ == "__main__":
    run_variants(__doc__, VARIANTS, make_variant, llamacpp_flag=True)
