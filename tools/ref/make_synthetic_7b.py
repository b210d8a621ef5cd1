#!/usr/bin/env python3
"""A synthetic Qwen2-7B-geometry GGUF laid out like a Q4_K_M file: random weights, real shapes.

No real Qwen weights can be fetched here, so this writes a stand-in with the geometry, tensor
names, tensor types and metadata of Qwen2/2.5-7B(-Instruct) Q4_K_M as llama.cpp writes it:

  hidden 3584, 28 layers, 28 query / 4 KV heads (head dim 128), FFN 18944, vocab 152064,
  q/k/v biases, NeoX RoPE (theta 1e6), RMSNorm eps 1e-6, untied output head;
  token_embd Q4_K, output Q6_K, attn_q/attn_k/attn_output/ffn_gate/ffn_up Q4_K, attn_v and
  ffn_down Q6_K on llama.cpp's "use more bits" layers (first and last eighth, every third
  between) and Q4_K elsewhere, norms and biases F32 (general.file_type 15 = Q4_K_M).

The gguf package cannot quantize K-quants, so blocks are written directly: random quant nibbles,
random 6-bit sub-block scales/mins and f16 super-block scales chosen so weights have std ~0.02
(Q4_K: d ~ 9e-5, dmin = 7.5 d, so sub-block means are centred; Q6_K: d ~ 1.5e-5), times
SCALES per tensor kind. The
tokenizer is a synthetic byte-level BPE (gpt2 model, qwen2 pre-tokenizer) of the real size with
Qwen's special tokens at their real ids (<|endoftext|> 151643, <|im_start|> 151644,
<|im_end|> 151645, [PAD…] up to 152063) and a ChatML template.

Run:  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_synthetic_7b.py [--out PATH] [--small]
(default ~/.cache/oxinfer/models/qwen2-7b-synthetic-q4_k_m.gguf, about 4.4 GiB, ~2 minutes).
Seeded: the same command gives the same file.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, VOCAB = 3584, 28, 28, 4, 18944, 152064
HEAD_DIM = HIDDEN // HEADS
N_REGULAR = 151643
QK_K = 256
BLOCK_BYTES = {Q.Q4_K: 144, Q.Q6_K: 210}
SEED = 7007
# Weight std is ~0.02 times these: a larger embedding and damped residual writes keep the
# random network from being chaotic, so that activation-quantization noise (llama.cpp multiplies
# Q8_K-quantized activations) does not swamp the comparison.
SCALES = {"token_embd": 10.0, "attn_output": 0.1, "ffn_down": 0.1}

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def kquant_rows(rng: np.random.Generator, qtype: Q, rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
    """`rows` x `cols` random weights as valid K-quant blocks: uint8 [rows, row_bytes]."""
    nb = cols // QK_K
    bb = BLOCK_BYTES[qtype]
    data = np.frombuffer(rng.bytes(rows * nb * bb), dtype=np.uint8).reshape(rows * nb, bb).copy()
    n = rows * nb
    if qtype == Q.Q4_K:
        # block_q4_K: d (f16), dmin (f16), scales[12] (6-bit scales/mins), qs[128].
        d = (scale * 9.3e-5 * (0.75 + 0.5 * rng.random(n))).astype(np.float16)
        dmin = (d.astype(np.float32) * 7.5).astype(np.float16)
        data[:, 0:2] = d.view(np.uint8).reshape(n, 2)
        data[:, 2:4] = dmin.view(np.uint8).reshape(n, 2)
    else:
        # block_q6_K: ql[128], qh[64], scales[16] (int8), d (f16).
        sc = rng.integers(1, 128, size=(n, 16), dtype=np.int16).astype(np.int8)
        data[:, 192:208] = sc.view(np.uint8)
        d = (scale * 1.5e-5 * (0.75 + 0.5 * rng.random(n))).astype(np.float16)
        data[:, 208:210] = d.view(np.uint8).reshape(n, 2)
    return data.reshape(rows, nb * bb)


def vocab() -> tuple[list[str], list[int], list[str]]:
    b2u = {}
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    k = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + k)
            k += 1
    b2u = {b: chr(c) for b, c in zip(bs, cs)}
    tokens = [b2u[b] for b in range(256)]
    merges = []
    seen = set(tokens)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    heads = ["Ġ"] + letters + [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    # two-character merges, then space-prefixed three-character ones
    for a in heads:
        for b in letters:
            t = a + b
            if t not in seen:
                tokens.append(t)
                merges.append(f"{a} {b}")
                seen.add(t)
    for a in letters:
        for b in letters:
            t = "Ġ" + a + b
            tokens.append(t)
            merges.append(f"Ġ{a} {b}")
            seen.add(t)
    i = 0
    while len(tokens) < N_REGULAR:
        tokens.append(f"<synthetic_{i}>")
        i += 1
    types = [int(gguf.TokenType.NORMAL)] * N_REGULAR
    for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]:
        tokens.append(s)
        types.append(int(gguf.TokenType.CONTROL))
    while len(tokens) < VOCAB:
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(int(gguf.TokenType.UNUSED))
    return tokens, types, merges


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path,
                    default=Path.home() / ".cache/oxinfer/models/qwen2-7b-synthetic-q4_k_m.gguf")
    ap.add_argument("--small", action="store_true",
                    help="a 4-layer model of hidden 1024 (8 / 2 heads of 128, FFN 2816), same "
                         "tensor types, vocabulary and metadata: a quick device-vs-CPU check")
    args = ap.parse_args()
    if args.small:
        global HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, HEAD_DIM
        HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 1024, 4, 8, 2, 2816
        HEAD_DIM = HIDDEN // HEADS
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)

    # (name, shape [rows, cols] or [n], type)
    plan: list[tuple[str, tuple[int, ...], Q]] = [("token_embd.weight", (VOCAB, HIDDEN), Q.Q4_K)]
    kv = KV_HEADS * HEAD_DIM
    for i in range(LAYERS):
        more = use_more_bits(i, LAYERS)
        b = f"blk.{i}."
        plan += [
            (b + "attn_norm.weight", (HIDDEN,), Q.F32),
            (b + "attn_q.weight", (HIDDEN, HIDDEN), Q.Q4_K),
            (b + "attn_q.bias", (HIDDEN,), Q.F32),
            (b + "attn_k.weight", (kv, HIDDEN), Q.Q4_K),
            (b + "attn_k.bias", (kv,), Q.F32),
            (b + "attn_v.weight", (kv, HIDDEN), Q.Q6_K if more else Q.Q4_K),
            (b + "attn_v.bias", (kv,), Q.F32),
            (b + "attn_output.weight", (HIDDEN, HIDDEN), Q.Q4_K),
            (b + "ffn_norm.weight", (HIDDEN,), Q.F32),
            (b + "ffn_gate.weight", (FFN, HIDDEN), Q.Q4_K),
            (b + "ffn_up.weight", (FFN, HIDDEN), Q.Q4_K),
            (b + "ffn_down.weight", (HIDDEN, FFN), Q.Q6_K if more else Q.Q4_K),
        ]
    plan += [("output_norm.weight", (HIDDEN,), Q.F32), ("output.weight", (VOCAB, HIDDEN), Q.Q6_K)]

    w = gguf.GGUFWriter(str(args.out), "qwen2")
    w.add_type("model")
    w.add_name("Qwen2 7B synthetic (random weights, Q4_K_M layout)")
    w.add_block_count(LAYERS)
    w.add_context_length(32768)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokens, types, merges = vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(151645)
    w.add_pad_token_id(151643)
    w.add_bos_token_id(151643)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)
    for name, shape, qt in plan:
        if qt == Q.F32:
            nbytes = 4 * int(np.prod(shape))
            w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes, raw_dtype=qt)
        else:
            rows, cols = shape
            nbytes = rows * cols // QK_K * BLOCK_BYTES[qt]
            w.add_tensor_info(name, (rows, cols // QK_K * BLOCK_BYTES[qt]), np.dtype(np.uint8),
                              nbytes, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shape, qt in plan:
        if qt == Q.F32:
            if name.endswith("norm.weight"):
                t = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
            else:
                t = (0.02 * rng.standard_normal(shape)).astype(np.float32)
        else:
            t = kquant_rows(rng, qt, shape[0], shape[1], SCALES.get(name.split('.')[-2], 1.0))
        w.write_tensor_data(t)
    w.close()
    print(f"{args.out}: {args.out.stat().st_size / 2**30:.2f} GiB, {len(plan)} tensors")


if __name__ == "__main__":
    main()
