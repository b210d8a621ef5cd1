#!/usr/bin/env python3
"""A tiny random-weight Qwen 3.5 checkpoint with its vision tower (`Qwen3_5ForConditionalGeneration`,
config `qwen3_5` with `text_config` / `vision_config`) and its transformers 5 float32 references.

Writes tests/fixtures/qwen35-vl-tiny/ (dense, `qwen3_5`) and, with `--variant moe`,
tests/fixtures/qwen35moe-vl-tiny/ (`Qwen3_5MoeForConditionalGeneration`, `qwen3_5_moe`: the same
vision tower in front of a sparse-MoE text model with a shared expert; its own seed):
  config.json, model.safetensors     the hybrid text model (Gated DeltaNet + gated attention,
                                     interleaved M-RoPE sections [2, 1, 1]) under
                                     model.language_model.*, the vision tower under model.visual.*
                                     (Conv3d patch embedding over 2 frames, learned 4x4 position
                                     grid bilinearly resampled, 2-D rotary, 2x2 patch merger).
  tokenizer.json, tokenizer_config.json, chat_template.jinja, preprocessor_config.json
                                     a byte-fallback vocabulary (id 4 + b = byte b) with Qwen's
                                     special tokens, the Qwen3.5-4B chat template of
                                     tests/fixtures/chat/qwen35.json, the image processor settings.
  wide.png                           45x30 RGB (logo.png shrunk with Pillow), smart-resized to 48x32.
  logo.png                           160x120 RGB (tiny_gemma4_mm's ImageMagick logo:), smart-resized under max_pixels to
                                     72x48 (Pillow bicubic, as the PIL image processor does).
  pixels_<image>.npy                 float32 [patches, 3 * 2 * patch^2]: the processor's pixel values.
  vision_<image>.npy                 float32 [soft tokens, text hidden]: get_image_features.
  logits.npy                         float32 [n_prompt, vocab]: logits of the mixed prompt.
  reference.json                     versions, the image sizes / grids / soft-token counts, the
                                     prompt ids (placeholders expanded), the M-RoPE position ids
                                     transformers computed, 32 greedy ids (generate, KV cache),
                                     the chat template text.

Run (from the repository root):
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_qwen35_vl.py [--variant moe]
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from transformers import (PreTrainedTokenizerFast, Qwen3_5Config, Qwen3_5ForConditionalGeneration,
                          Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_ref import FIXTURES, MIN_MARGIN, N_GREEDY, VOCAB, versions  # noqa: E402

MOE = "--variant" in sys.argv and sys.argv[sys.argv.index("--variant") + 1] == "moe"
OUT = FIXTURES / ("qwen35moe-vl-tiny" if MOE else "qwen35-vl-tiny")
SEED = 3540 if MOE else 3539
CONFIG, MODEL = ((Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration) if MOE
                 else (Qwen3_5Config, Qwen3_5ForConditionalGeneration))
PAD_ID, IM_START, IM_END, UNK_ID = 0, 1, 2, 3
SPECIAL = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
VSTART_ID, VEND_ID, IMAGE_ID, VIDEO_ID = range(VOCAB, VOCAB + 4)
VOCAB_MM = VOCAB + len(SPECIAL) + 4  # 268
PATCH, MERGE, TEMPORAL = 4, 2, 2
MIN_PIXELS, MAX_PIXELS = 8 * 8, 64 * 64
QUESTIONS = ["Say?", "What is it?", "Tell me.", "Which?", "Compare them.", "Why?", "Name both.",
             "Describe.", "Count.", "Hm?", "Go on.", "Where?", "Is it red?", "Left or right?",
             "Look again.", "Explain.", "One word.", "Why not?", "Tell more.", "Again?"]
ZERO_CENTRED = ("input_layernorm.weight", "post_attention_layernorm.weight",
                "q_norm.weight", "k_norm.weight", "language_model.norm.weight")


def configs():
    text = dict(
        vocab_size=VOCAB_MM, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=8, linear_conv_kernel_dim=4,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        max_position_embeddings=512, rms_norm_eps=1e-6, initializer_range=0.1,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.5, "mrope_interleaved": True,
                         "mrope_section": [2, 1, 1]},
        tie_word_embeddings=True, pad_token_id=PAD_ID, eos_token_id=IM_END,
    )
    if MOE:
        text.pop("intermediate_size")
        text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                    shared_expert_intermediate_size=32)
    vision = dict(
        depth=2, hidden_size=32, intermediate_size=48, num_heads=4, in_channels=3,
        patch_size=PATCH, spatial_merge_size=MERGE, temporal_patch_size=TEMPORAL,
        out_hidden_size=64, num_position_embeddings=16, initializer_range=0.1,
        hidden_act="gelu_pytorch_tanh",
    )
    cfg = CONFIG(text_config=text, vision_config=vision, image_token_id=IMAGE_ID,
                        video_token_id=VIDEO_ID, vision_start_token_id=VSTART_ID,
                        vision_end_token_id=VEND_ID, tie_word_embeddings=True)
    cfg._attn_implementation = "eager"
    return cfg


@torch.no_grad()
def build_model(cfg):
    torch.manual_seed(SEED)
    model = MODEL(cfg).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(SEED)
    for name, p in sorted(model.state_dict(keep_vars=True).items(), key=lambda kv: kv[0]):
        if name.endswith("inv_freq") or not p.is_floating_point():
            continue
        r = torch.randn(p.shape, generator=gen)
        if name.endswith(ZERO_CENTRED):
            p.copy_(0.1 * r)                                   # (1 + w) norms
        elif name.endswith("linear_attn.norm.weight") or (
                "visual" in name and "norm" in name and name.endswith("weight")):
            p.copy_(1.0 + 0.1 * r)                             # plain-gain norms
        elif name.endswith("A_log"):
            p.copy_(torch.log(torch.rand(p.shape, generator=gen) * 3.0 + 0.3))
        elif name.endswith("dt_bias"):
            p.copy_(0.5 * r)
        elif name.endswith("conv1d.weight"):
            p.copy_(0.4 * r)
        elif name.endswith("mlp.gate.weight"):
            p.copy_(1.0 * r)                                   # router: well separated
        elif "embed_tokens" in name or "pos_embed" in name:
            p.copy_(0.12 * r)
        else:
            p.copy_(0.1 * r)
    # Small rows for the special and unused ids: with tied embeddings their logits stay low, so
    # the greedy run writes text.
    model.model.language_model.embed_tokens.weight[VOCAB:] *= 0.2
    return model


def write_tokenizer(out: Path) -> PreTrainedTokenizerFast:
    """Byte-fallback vocabulary: <|endoftext|> <|im_start|> <|im_end|> <unk>, <0x00>..<0xFF>,
    the vision specials, unused ids up to VOCAB_MM."""
    from tokenizers import AddedToken, Tokenizer, decoders, models
    vocab = {"<|endoftext|>": PAD_ID, "<|im_start|>": IM_START, "<|im_end|>": IM_END,
             "<unk>": UNK_ID}
    vocab.update({f"<0x{b:02X}>": 4 + b for b in range(256)})
    for i, s in enumerate(SPECIAL):
        vocab[s] = VOCAB + i
    for i in range(VOCAB + len(SPECIAL), VOCAB_MM):
        vocab[f"<unused{i}>"] = i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
                            + SPECIAL])
    tok.save(str(out / "tokenizer.json"))
    fast = PreTrainedTokenizerFast(tokenizer_file=str(out / "tokenizer.json"),
                                   eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token="<unk>")
    fast.save_pretrained(out)
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    cfg.update({"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
                "vision_start_token": "<|vision_start|>", "vision_end_token": "<|vision_end|>"})
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    return PreTrainedTokenizerFast.from_pretrained(out)


def image_processor() -> Qwen2VLImageProcessorPil:
    return Qwen2VLImageProcessorPil(patch_size=PATCH, merge_size=MERGE, temporal_patch_size=TEMPORAL,
                                    size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
                                    image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])


def make_images(out: Path) -> None:
    """The 160x120 logo of the Gemma 4 fixture (ImageMagick's logo:), and a 45x30 copy."""
    src = FIXTURES / "tiny_gemma4_mm" / "logo.png"
    shutil.copy(src, out / "logo.png")
    Image.open(src).convert("RGB").resize((45, 30), Image.LANCZOS).save(out / "wide.png")


@torch.no_grad()
def main() -> None:
    cfg = configs()
    model = build_model(cfg)
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    model.save_pretrained(OUT, safe_serialization=True)
    tok = write_tokenizer(OUT)
    template = json.loads((FIXTURES / "chat" / "qwen35.json").read_text())["template"]
    (OUT / "chat_template.jinja").write_text(template)
    proc = image_processor()
    proc_cfg = proc.to_dict()
    proc_cfg.pop("_processor_class", None)
    (OUT / "preprocessor_config.json").write_text(json.dumps(proc_cfg, indent=1, default=str) + "\n")
    make_images(OUT)
    model = MODEL.from_pretrained(
        OUT, dtype=torch.float32, attn_implementation="eager").eval()

    order = ["wide", "logo"]
    images = {n: Image.open(OUT / f"{n}.png").convert("RGB") for n in order}
    ref = {"versions": versions(), "seed": SEED, "images": {}}
    soft, feats = {}, {}
    for name in order:
        f = proc(images=[images[name]], return_tensors="pt")
        pv, thw = f["pixel_values"], f["image_grid_thw"]
        feats[name] = f
        np.save(OUT / f"pixels_{name}.npy", pv.numpy().astype(np.float32))
        out = model.model.get_image_features(pv, thw, return_dict=True).pooler_output[0]
        soft[name] = out
        np.save(OUT / f"vision_{name}.npy", out.numpy().astype(np.float32))
        t, h, w = (int(x) for x in thw[0])
        ref["images"][name] = {"size": [images[name].height, images[name].width],
                               "resized": [h * PATCH, w * PATCH], "grid_thw": [t, h, w],
                               "soft_tokens": int(out.shape[0])}
    pixels = dict(pixel_values=torch.cat([feats[n]["pixel_values"] for n in order]),
                  image_grid_thw=torch.cat([feats[n]["image_grid_thw"] for n in order]))
    for question in QUESTIONS:
        messages = [{"role": "user", "content": [
            {"type": "text", "text": "Look:"}, {"type": "image"},
            {"type": "text", "text": "and"}, {"type": "image"},
            {"type": "text", "text": question}]}]
        text = tok.apply_chat_template(messages, chat_template=template, tokenize=False,
                                       add_generation_prompt=True)
        ids = []
        pieces = text.split("<|image_pad|>")
        assert len(pieces) == len(order) + 1
        for k, piece in enumerate(pieces):
            ids += tok.encode(piece, add_special_tokens=False)
            if k < len(order):
                ids += [IMAGE_ID] * ref["images"][order[k]]["soft_tokens"]
        input_ids = torch.tensor([ids])
        kwargs = dict(pixels, mm_token_type_ids=torch.where(input_ids == IMAGE_ID, 1, 0))
        gen = model.generate(input_ids=input_ids, max_new_tokens=N_GREEDY, do_sample=False,
                             output_logits=True, return_dict_in_generate=True, **kwargs)
        greedy = gen.sequences[0, len(ids):].tolist()
        margins = [float(v[0] - v[1]) for v in (torch.topk(l[0], 2).values for l in gen.logits)]
        if len(greedy) < N_GREEDY:
            print(f"{question!r}: stops after {len(greedy)} tokens")
            continue
        print(f"{question!r}: min margin {min(margins):.4f}, {len(set(greedy))} distinct")
        # No special ids among them: a generated <|image_pad|> would stand for no image.
        if min(margins) >= MIN_MARGIN and len(set(greedy)) >= 8 and max(greedy) < VOCAB:
            break
    else:
        raise SystemExit("no question gives safe greedy margins")
    model.model.rope_deltas = None
    logits = model(input_ids=input_ids, use_cache=False, **kwargs).logits[0].float()
    np.save(OUT / "logits.npy", logits.numpy().astype(np.float32))
    positions, delta = model.model.get_rope_index(input_ids, kwargs["mm_token_type_ids"],
                                                  image_grid_thw=pixels["image_grid_thw"])
    ref.update({
        "config": json.loads((OUT / "config.json").read_text()),
        "chat_template_text": text,
        "image_order": order,
        "prompt_ids": ids,
        "mrope_positions": positions[:, 0].tolist(),
        "mrope_delta": int(delta[0, 0]),
        "greedy_ids": greedy,
        "min_greedy_margin": min(margins),
        "logits_abs_max": float(logits.abs().max()),
        "vision_abs_max": {k: float(v.abs().max()) for k, v in soft.items()},
    })
    (OUT / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    for f in OUT.iterdir():
        f.chmod(0o644)
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"{OUT}: {total / 1024:.0f} KiB; prompt {len(ids)} ids; greedy {greedy}; "
          f"min margin {min(margins):.4f}")


if __name__ == "__main__":
    main()
