#!/usr/bin/env python3
"""Times transformers' Gemma 4 vision tower on the CPU: the folder of
tools/ref/make_gemma4_vision_bench.py (a random tower of real size) and its 896 x 896 PNG, the
image processed by the folder's image processor, then `model.model.get_image_features` (the
tower and its projection into the text model) in float32, `torch.set_num_threads(THREADS)`,
best of ROUNDS. The reference for `oxinfer run -m DIR --image DIR/896.png -p x -n 1`
(docs/multimodal.md).

Run (from the repository root):
  ~/.cache/oxinfer/refvenv/bin/python tools/bench/gemma4_vision_torch.py [DIR] [THREADS] [ROUNDS]
"""
import sys
import time

import torch
from PIL import Image
from transformers import Gemma4ForConditionalGeneration
from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

folder = sys.argv[1] if len(sys.argv) > 1 else "/tmp/gemma4_vision_bench"
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
torch.set_num_threads(threads)
model = Gemma4ForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
proc = Gemma4ImageProcessorPil.from_pretrained(folder)
image = Image.open(f"{folder}/896.png").convert("RGB")
f = proc(images=[image], return_tensors="pt")
pv, pos = f["pixel_values"], f["image_position_ids"]
real = int((pos[0] >= 0).all(-1).sum())
print(f"pixel_values {tuple(pv.shape)}, {real} real patches")
best = float("inf")
with torch.inference_mode():
    for r in range(rounds):
        t0 = time.perf_counter()
        feats = model.model.get_image_features(pv, pos, return_dict=True).pooler_output[0]
        dt = time.perf_counter() - t0
        best = min(best, dt)
        print(f"round {r + 1}: {dt:.2f} s, {tuple(feats.shape)} soft tokens")
print(f"best {best:.2f} s on {threads} threads")
