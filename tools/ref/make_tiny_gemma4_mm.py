#!/usr/bin/env python3
"""A tiny random-weight multimodal Gemma 4 checkpoint (text + vision + audio towers) and its
transformers 5 float32 references.

Writes tests/fixtures/tiny_gemma4_mm/:
  config.json, model.safetensors     Gemma4ForConditionalGeneration (`gemma4`: `text_config`,
                                     `vision_config`, `audio_config`), made from transformers'
                                     own config classes; E2B-style text tower (PLE, KV sharing),
                                     vision tower with clipped linears and standardization.
  tokenizer.json, tokenizer_config.json, chat_template.jinja, preprocessor_config.json
                                     a byte-fallback vocabulary (id 4 + b = byte b) with Gemma 4's
                                     special tokens, the gemma4 chat template of
                                     tests/fixtures/gemma4-chat, the image processor's settings.
  scene.png                          96x96 RGB (ImageMagick's logo:), kept at its size by the
                                     processor (no resize).
  logo.png                           160x120 RGB (logo: again), resized by the processor to
                                     108x84 (Pillow bicubic, as the PIL image processor does).
  pixels_<image>.npy                 float32 [patches, 3 * patch^2]: the processor's pixel values
                                     of the image's real patches (padding dropped).
  vision_<image>.npy                 float32 [soft tokens, text hidden]: get_image_features
                                     (vision tower + embed_vision projection).
  logits.npy                         float32 [n_prompt, vocab]: logits of the mixed prompt.
  reference.json                     versions, config, the image sizes / patch grids / soft-token
                                     counts, the prompt ids (placeholders expanded), 32 greedy ids
                                     (transformers generate, KV cache), the chat template text.

Run (from the repository root), then make_tiny_gemma4_audio.py (this script rebuilds the folder,
and that one adds the audio references):
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_gemma4_mm.py
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_gemma4_audio.py
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file

from transformers import (Gemma4AudioConfig, Gemma4Config, Gemma4ForConditionalGeneration,
                          Gemma4TextConfig, Gemma4VisionConfig)
from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_ref import FIXTURES, MIN_MARGIN, N_GREEDY, VOCAB, versions  # noqa: E402

OUT = FIXTURES / "tiny_gemma4_mm"
SEED = 4061
PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3
# Gemma 4's special tokens after the 256 bytes.
SPECIAL = ["<|image|>", "<|image>", "<image|>", "<|audio|>", "<|audio>", "<audio|>", "<|video|>",
           "<|turn>", "<turn|>"]
IMAGE_ID, BOI_ID, EOI_ID, AUDIO_ID, BOA_ID, EOA_ID, VIDEO_ID = range(VOCAB, VOCAB + 7)
VOCAB_MM = VOCAB + len(SPECIAL) + 3  # 272
PATCH, POOL, MAX_SOFT = 4, 3, 70
QUESTIONS = ["Say?", "What is it?", "Tell me.", "Which?", "Compare them.", "Why?", "Name both.",
             "Describe.", "Count.", "Hm?"]


def configs(use_bidirectional_attention: str | None = None, audio: bool = True) -> Gemma4Config:
    """The tiny checkpoint's configuration; `use_bidirectional_attention="vision"` and no
    audio tower make that of the larger checkpoints (make_tiny_gemma4_bidir.py)."""
    text = Gemma4TextConfig(
        vocab_size=VOCAB_MM, hidden_size=32, intermediate_size=48, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        global_head_dim=16, num_global_key_value_heads=1, attention_k_eq_v=True,
        max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=True,
        initializer_range=0.1, sliding_window=8,
        layer_types=["sliding_attention", "sliding_attention", "full_attention",
                     "sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5,
                               "rope_theta": 1000000.0},
        },
        final_logit_softcapping=30.0,
        hidden_size_per_layer_input=8, vocab_size_per_layer_input=VOCAB_MM,
        num_kv_shared_layers=2, use_double_wide_mlp=False,
        pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
        use_bidirectional_attention=use_bidirectional_attention,
    )
    vision = Gemma4VisionConfig(
        hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-6, pooling_kernel_size=POOL,
        patch_size=PATCH, position_embedding_size=64, use_clipped_linears=True,
        standardize=True, initializer_range=0.1,
        rope_parameters={"rope_type": "axial", "rope_theta": 100.0},
    )
    audio_cfg = Gemma4AudioConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        subsampling_conv_channels=[8, 4], conv_kernel_size=5, attention_chunk_size=12,
        attention_context_left=13, attention_context_right=0, output_proj_dims=24,
        use_clipped_linears=True, initializer_range=0.1,
    )
    cfg = Gemma4Config(text_config=text, vision_config=vision,
                       audio_config=audio_cfg if audio else None,
                       boi_token_id=BOI_ID, eoi_token_id=EOI_ID, image_token_id=IMAGE_ID,
                       video_token_id=VIDEO_ID, boa_token_id=BOA_ID, eoa_token_index=EOA_ID,
                       audio_token_id=AUDIO_ID, tie_word_embeddings=True)
    cfg._attn_implementation = "eager"
    return cfg


@torch.no_grad()
def build_model(cfg: Gemma4Config) -> Gemma4ForConditionalGeneration:
    torch.manual_seed(SEED)
    model = Gemma4ForConditionalGeneration(cfg).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(SEED)
    for name, p in sorted(model.state_dict(keep_vars=True).items(), key=lambda kv: kv[0]):
        if name.endswith("inv_freq") or name.endswith("embed_scale"):
            continue
        if name.endswith("norm.weight"):
            p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
        elif name.endswith("layer_scalar"):
            p.copy_(0.6 + 0.8 * torch.rand(p.shape, generator=gen))
        elif name.endswith("input_min") or name.endswith("output_min"):
            p.copy_(torch.tensor(-1.5 - torch.rand((), generator=gen).item()))
        elif name.endswith("input_max") or name.endswith("output_max"):
            p.copy_(torch.tensor(1.5 + torch.rand((), generator=gen).item()))
        elif name.endswith("std_scale"):
            p.copy_(0.5 + torch.rand(p.shape, generator=gen))
        elif name.endswith("std_bias"):
            p.copy_(0.12 * torch.randn(p.shape, generator=gen))
        elif "embed_tokens" in name:
            p.copy_(0.12 * torch.randn(p.shape, generator=gen))
        elif "position_embedding_table" in name:
            p.copy_(0.12 * torch.randn(p.shape, generator=gen))
        elif p.is_floating_point():
            p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    return model


def write_tokenizer(out: Path) -> None:
    """Byte-fallback vocabulary: <pad> <eos> <bos> <unk>, <0x00>..<0xFF>, Gemma 4's specials."""
    from tokenizers import Tokenizer, decoders, models
    vocab = {"<pad>": PAD_ID, "<eos>": EOS_ID, "<bos>": BOS_ID, "<unk>": UNK_ID}
    vocab.update({f"<0x{b:02X}>": 4 + b for b in range(256)})
    for i, s in enumerate(SPECIAL):
        vocab[s] = VOCAB + i
    for i in range(VOCAB + len(SPECIAL), VOCAB_MM):
        vocab[f"<unused{i}>"] = i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ["<pad>", "<eos>", "<bos>", "<unk>"] + SPECIAL])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>",
        "pad_token": "<pad>", "unk_token": "<unk>", "add_bos_token": False,
        "image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>",
        "audio_token": "<|audio|>", "boa_token": "<|audio>", "eoa_token": "<audio|>",
    }, indent=1) + "\n")


def image_processor() -> Gemma4ImageProcessorPil:
    return Gemma4ImageProcessorPil(patch_size=PATCH, max_soft_tokens=MAX_SOFT,
                                   pooling_kernel_size=POOL)


@torch.no_grad()
def main() -> None:
    make(OUT, configs())


@torch.no_grad()
def make(out: Path, cfg: Gemma4Config, images_from: Path | None = None) -> dict:
    """Writes the checkpoint of `cfg` and its references to `out` (rebuilt), the images made
    with ImageMagick or copied from `images_from`; returns the reloaded model, the mixed
    prompt's inputs and logits (`model`, `input_ids`, `kwargs`, `logits`) and the reference."""
    model = build_model(cfg)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.save_pretrained(out, safe_serialization=True)
    write_tokenizer(out)
    shutil.copy(FIXTURES / "gemma4-chat" / "chat_template.jinja", out / "chat_template.jinja")
    proc = image_processor()
    proc_cfg = proc.to_dict()
    proc_cfg.pop("_processor_class", None)
    (out / "preprocessor_config.json").write_text(json.dumps(proc_cfg, indent=1, default=str) + "\n")
    if images_from is None:
        subprocess_convert(out / "scene.png")
    else:
        for name in ["scene.png", "logo.png"]:
            shutil.copy(images_from / name, out / name)
    model = Gemma4ForConditionalGeneration.from_pretrained(
        out, dtype=torch.float32, attn_implementation="eager").eval()

    images = {"scene": Image.open(out / "scene.png").convert("RGB"),
              "logo": Image.open(out / "logo.png").convert("RGB")}
    ref = {"versions": versions(), "seed": SEED, "images": {}}
    soft = {}
    for name, img in images.items():
        f = proc(images=[img], return_tensors="pt")
        pv, pos = f["pixel_values"], f["image_position_ids"]
        real = (pos[0] >= 0).all(-1)
        np.save(out / f"pixels_{name}.npy", pv[0][real].numpy().astype(np.float32))
        feats = model.model.get_image_features(pv, pos, return_dict=True).pooler_output[0]
        soft[name] = feats
        np.save(out / f"vision_{name}.npy", feats.numpy().astype(np.float32))
        grid = [int(pos[0][real][:, 1].max()) + 1, int(pos[0][real][:, 0].max()) + 1]
        ref["images"][name] = {"size": [img.height, img.width],
                               "resized": [grid[0] * PATCH, grid[1] * PATCH],
                               "patch_grid": grid,
                               "soft_tokens": int(f["num_soft_tokens_per_image"][0])}
    # The chat template with an image, and the prompt with the placeholders expanded; the
    # question is the first of QUESTIONS whose 32 greedy steps all have a safe margin.
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(out)
    # tokenizer.json as the GemmaTokenizer class runs it (its space handling included), so the
    # engine reading tokenizer.json tokenizes as transformers does.
    tok.save_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    template = (out / "chat_template.jinja").read_text()
    order = ["scene", "logo"]
    pv_all, pos_all = [], []
    for name in order:
        f = proc(images=[images[name]], return_tensors="pt")
        pv_all.append(f["pixel_values"])
        pos_all.append(f["image_position_ids"])
    pixels = dict(pixel_values=torch.cat(pv_all), image_position_ids=torch.cat(pos_all))
    for question in QUESTIONS:
        messages = [{"role": "user", "content": [
            {"type": "text", "text": "Look:"}, {"type": "image"},
            {"type": "text", "text": "and"}, {"type": "image"},
            {"type": "text", "text": question}]}]
        text = tok.apply_chat_template(messages, chat_template=template, tokenize=False,
                                       add_generation_prompt=True)
        ids = []
        pieces = text.split("<|image|>")
        assert len(pieces) == len(order) + 1
        for k, piece in enumerate(pieces):
            ids += tok.encode(piece, add_special_tokens=False)
            if k < len(order):
                ids += [BOI_ID] + [IMAGE_ID] * ref["images"][order[k]]["soft_tokens"] + [EOI_ID]
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
        if min(margins) >= MIN_MARGIN and len(set(greedy)) >= 8:
            break
    else:
        raise SystemExit("no question gives safe greedy margins")
    logits = model(input_ids=input_ids, use_cache=False, **kwargs).logits[0].float()
    np.save(out / "logits.npy", logits.numpy().astype(np.float32))
    ref.update({
        "config": json.loads((out / "config.json").read_text()),
        "chat_template_text": text,
        "image_order": order,
        "prompt_ids": ids,
        "greedy_ids": greedy,
        "min_greedy_margin": min(margins),
        "logits_abs_max": float(logits.abs().max()),
        "vision_abs_max": {k: float(v.abs().max()) for k, v in soft.items()},
    })
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    total = sum(p.stat().st_size for p in out.iterdir())
    print(f"{out}: {total / 1024:.0f} KiB; prompt {len(ids)} ids; greedy {greedy}; "
          f"min margin {min(margins):.4f}")
    return {"model": model, "input_ids": input_ids, "kwargs": kwargs, "logits": logits,
            "ref": ref}


def subprocess_convert(path: Path) -> None:
    import subprocess
    subprocess.run(["/usr/bin/convert", "logo:", "-resize", "96x96!", str(path)], check=True)
    subprocess.run(["/usr/bin/convert", "logo:", "-resize", "160x120!",
                    str(path.parent / "logo.png")], check=True)


if __name__ == "__main__":
    main()
