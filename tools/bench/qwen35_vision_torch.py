#!/usr/bin/env python3
"""Times transformers' Qwen 3.5 vision tower on the CPU: the folder of
tools/ref/make_qwen35_vision_bench.py (a random tower of real size) and its 896 x 896 PNG,
the image processed by the folder's processor, then `model.model.get_image_features` (the
tower and its merger) in float32, `torch.set_num_threads(THREADS)`, best of ROUNDS.
The reference for `oxinfer run -m DIR --image DIR/896.png -p x -n 1` (docs/multimodal.md).

Run (from the repository root):
  ~/.cache/oxinfer/refvenv/bin/python tools/bench/qwen35_vision_torch.py [DIR] [THREADS] [ROUNDS]
"""
import sys
import time

import torch
from PIL import Image
from transformers import AutoProcessor, Qwen3_5ForConditionalGeneration

folder = sys.argv[1] if len(sys.argv) > 1 else "/tmp/qwen35_vision_bench"
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
torch.set_num_threads(threads)
model = Qwen3_5ForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
processor = AutoProcessor.from_pretrained(folder)
image = Image.open(f"{folder}/896.png").convert("RGB")
inputs = processor.image_processor(images=[image], return_tensors="pt")
print(f"pixel_values {tuple(inputs['pixel_values'].shape)}, grid {inputs['image_grid_thw'].tolist()}")
best = float("inf")
with torch.inference_mode():
    for r in range(rounds):
        t0 = time.perf_counter()
        model.model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"])
        dt = time.perf_counter() - t0
        best = min(best, dt)
        print(f"round {r + 1}: {dt:.2f} s")
print(f"best {best:.2f} s on {threads} threads")
