#!/usr/bin/env python3
"""Video references for the tiny Qwen 3.5 vision checkpoint of make_tiny_qwen35_vl.py (run that
first: this script reads its fixture folder and adds to it; the model and the image references
stay as they are).

transformers 5.24 classes followed: `Qwen3VLProcessor` (the `qwen3_5` processor: per frame group
`<t seconds><|vision_start|>` + pads + `<|vision_end|>` in place of `<|video_pad|>`,
`_calculate_timestamps`), `Qwen3VLVideoProcessor` (`sample_frames`, the video `smart_resize`,
torchvision uint8 bicubic antialiased resize, `patchify` with the last frame repeated up to the
temporal patch), `Qwen3_5Model.get_video_features` / `get_rope_index` (the video grid split into
one `t = 1` grid per frame group).

Writes into tests/fixtures/qwen35-vl-tiny/ (or qwen35moe-vl-tiny with `--variant moe`):
  video_preprocessor_config.json   the video processor settings (patch 4, fps 2, min 4 frames).
  clip.gif                         6 frames of 40x28, 250 ms each (4 fps): Pillow-made from logo.png.
  short.gif                        3 frames of 20x12, 100 ms each: fewer frames than min_frames, an
                                   odd count (the last frame is repeated to fill the patch).
  clip.png, clip.webp              clip.gif's frames (as Pillow decodes them) as an APNG and a
                                   lossless animated WebP, 250 ms each: the same video.
  pixels_video_<name>.npy          float32 [patches, 3 * 2 * patch^2]: pixel_values_videos.
  vision_video_<name>.npy          float32 [soft tokens, text hidden]: get_video_features.
  logits_video.npy                 float32 [n_prompt, vocab]: logits of the text+image+video prompt.
  reference_video.json             the videos' frame counts / fps / sampled indices / grids, the
                                   chat template text, the processor's prompt ids, the M-RoPE
                                   positions and delta, 32 greedy ids (generate, KV cache).

Needs torchvision (the video processor's backend): torchvision==0.29.2 in tools/ref/requirements.txt.

Run (from the repository root):
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_qwen35_video.py [--variant moe]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageSequence

from transformers import (PreTrainedTokenizerFast, Qwen3_5ForConditionalGeneration,
                          Qwen3_5MoeForConditionalGeneration, Qwen3VLProcessor)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
from transformers.video_utils import VideoMetadata

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_ref import FIXTURES, MIN_MARGIN, N_GREEDY, VOCAB, versions  # noqa: E402

MOE = "--variant" in sys.argv and sys.argv[sys.argv.index("--variant") + 1] == "moe"
OUT = FIXTURES / ("qwen35moe-vl-tiny" if MOE else "qwen35-vl-tiny")
MODEL = Qwen3_5MoeForConditionalGeneration if MOE else Qwen3_5ForConditionalGeneration
PATCH, MERGE, TEMPORAL = 4, 2, 2
# Video pixel budget over all sampled frames: clip.gif (4 frames of 28x40) goes over it.
VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS = 8 * 8, 4096
QUESTIONS = ["What happens?", "Say?", "Describe.", "Which?", "Go on.", "Hm?", "Why?", "Count.",
             "Where?", "Explain.", "One word.", "Again?"]
VIDEOS = {"clip": (6, 40, 28, 250), "short": (3, 20, 12, 100)}  # frames, width, height, ms


def make_gifs(out: Path) -> None:
    """Animated GIFs cut from logo.png: each frame a shifted crop, so every frame differs."""
    logo = Image.open(out / "logo.png").convert("RGB")
    for name, (n, w, h, ms) in VIDEOS.items():
        frames = [logo.crop((9 * i, 5 * i, 9 * i + 2 * w, 5 * i + 2 * h)).resize((w, h), Image.BOX)
                  for i in range(n)]
        frames[0].save(out / f"{name}.gif", save_all=True, append_images=frames[1:], duration=ms,
                       loop=0, optimize=False, disposal=1)
    n, ms = VIDEOS["clip"][0], VIDEOS["clip"][3]
    decoded = [f.convert("RGB") for f in ImageSequence.Iterator(Image.open(out / "clip.gif"))]
    assert len(decoded) == n
    decoded[0].save(out / "clip.png", save_all=True, append_images=decoded[1:], duration=ms,
                    loop=0, default_image=False)
    decoded[0].save(out / "clip.webp", save_all=True, append_images=decoded[1:], duration=ms,
                    loop=0, lossless=True)
    for ext in ("png", "webp"):
        again = [np.asarray(f.convert("RGB"))
                 for f in ImageSequence.Iterator(Image.open(out / f"clip.{ext}"))]
        assert len(again) == n and all(np.array_equal(a, np.asarray(d))
                                       for a, d in zip(again, decoded)), ext


def read_gif(path: Path) -> tuple[np.ndarray, VideoMetadata]:
    """All frames as RGB [T, H, W, 3] and metadata with the average fps (frames / duration), as
    a video decoder reports it."""
    im = Image.open(path)
    frames, ms = [], 0
    for f in ImageSequence.Iterator(im):
        frames.append(np.asarray(f.convert("RGB")))
        ms += f.info["duration"]
    arr = np.stack(frames)
    n, h, w = arr.shape[:3]
    fps = n / (ms / 1000.0)
    return arr, VideoMetadata(total_num_frames=n, fps=fps, width=w, height=h, duration=ms / 1000.0,
                              video_backend="pil")


def processors(tok) -> Qwen3VLProcessor:
    image = Qwen2VLImageProcessorPil.from_pretrained(OUT)
    video = Qwen3VLVideoProcessor(
        patch_size=PATCH, merge_size=MERGE, temporal_patch_size=TEMPORAL,
        size={"shortest_edge": VIDEO_MIN_PIXELS, "longest_edge": VIDEO_MAX_PIXELS},
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5], fps=2, min_frames=4, max_frames=768,
        cap_pixels_per_frame=False)
    cfg = video.to_dict()
    cfg.pop("_processor_class", None)
    (OUT / "video_preprocessor_config.json").write_text(
        json.dumps(cfg, indent=1, default=str) + "\n")
    return Qwen3VLProcessor(image_processor=image, tokenizer=tok, video_processor=video)


@torch.no_grad()
def main() -> None:
    model = MODEL.from_pretrained(OUT, dtype=torch.float32, attn_implementation="eager").eval()
    tok = PreTrainedTokenizerFast.from_pretrained(OUT)
    template = (OUT / "chat_template.jinja").read_text()
    make_gifs(OUT)
    proc = processors(tok)
    wide = Image.open(OUT / "wide.png").convert("RGB")
    clips = {name: read_gif(OUT / f"{name}.gif") for name in VIDEOS}

    ref = {"versions": versions(), "videos": {}}
    for name, (arr, meta) in clips.items():
        f = proc.video_processor(videos=[arr], video_metadata=[meta], return_tensors="pt",
                                 return_metadata=True)
        pv, thw = f["pixel_values_videos"], f["video_grid_thw"]
        np.save(OUT / f"pixels_video_{name}.npy", pv.numpy().astype(np.float32))
        out = model.model.get_video_features(pv, thw, return_dict=True).pooler_output[0]
        np.save(OUT / f"vision_video_{name}.npy", out.numpy().astype(np.float32))
        md = f["video_metadata"][0]
        ref["videos"][name] = {
            "frames": int(meta.total_num_frames), "size": [int(meta.height), int(meta.width)],
            "fps": meta.fps, "sampled_indices": [int(i) for i in md.frames_indices],
            "grid_thw": [int(x) for x in thw[0]], "soft_tokens": int(out.shape[0]),
            "vision_abs_max": float(out.abs().max())}

    order = ["clip", "short"]
    for question in QUESTIONS:
        messages = [{"role": "user", "content": [
            {"type": "text", "text": "Look:"}, {"type": "image"}, {"type": "video"},
            {"type": "text", "text": "and"}, {"type": "video"},
            {"type": "text", "text": question}]}]
        text = tok.apply_chat_template(messages, chat_template=template, tokenize=False,
                                       add_generation_prompt=True)
        inputs = proc(text=[text], images=[wide], videos=[clips[n][0] for n in order],
                      video_metadata=[clips[n][1] for n in order], return_tensors="pt")
        inputs.pop("video_metadata", None)
        ids = inputs["input_ids"][0].tolist()
        gen = model.generate(**inputs, max_new_tokens=N_GREEDY, do_sample=False,
                             output_logits=True, return_dict_in_generate=True)
        greedy = gen.sequences[0, len(ids):].tolist()
        margins = [float(v[0] - v[1]) for v in (torch.topk(l[0], 2).values for l in gen.logits)]
        if len(greedy) < N_GREEDY:
            print(f"{question!r}: stops after {len(greedy)} tokens")
            continue
        print(f"{question!r}: min margin {min(margins):.4f}, {len(set(greedy))} distinct")
        if min(margins) >= MIN_MARGIN and len(set(greedy)) >= 8 and max(greedy) < VOCAB:
            break
    else:
        raise SystemExit("no question gives safe greedy margins")
    model.model.rope_deltas = None
    logits = model(**inputs, use_cache=False).logits[0].float()
    np.save(OUT / "logits_video.npy", logits.numpy().astype(np.float32))
    positions, delta = model.model.get_rope_index(
        inputs["input_ids"], inputs["mm_token_type_ids"], image_grid_thw=inputs["image_grid_thw"],
        video_grid_thw=inputs["video_grid_thw"])
    ref.update({
        "chat_template_text": text,
        "question": question,
        "video_order": order,
        "prompt_ids": ids,
        "expanded_text": tok.decode(ids),
        "mrope_positions": positions[:, 0].tolist(),
        "mrope_delta": int(delta[0, 0]),
        "greedy_ids": greedy,
        "min_greedy_margin": min(margins),
        "logits_abs_max": float(logits.abs().max()),
    })
    (OUT / "reference_video.json").write_text(json.dumps(ref, indent=1) + "\n")
    for f in OUT.iterdir():
        f.chmod(0o644)
    new = [p for p in OUT.iterdir() if "video" in p.name or p.suffix == ".gif"]
    print(f"{OUT}: video files {sum(p.stat().st_size for p in new) / 1024:.0f} KiB; prompt "
          f"{len(ids)} ids; greedy {greedy}; min margin {min(margins):.4f}")


if __name__ == "__main__":
    main()
