#!/usr/bin/env python3
"""A checkpoint folder for timing Qwen 3.5's vision tower at real size: transformers' default
`Qwen3_5VisionConfig` (27 blocks, width 1152, MLP 4304, 16 heads, patch 16, merge 2, 48x48
position grid) with random weights and out_hidden_size 64, in front of the tiny text model of
tests/fixtures/qwen35-vl-tiny (its tokenizer, template and processor settings, with the
processor's max_pixels raised to 1024 * 1024 so that an 896 x 896 image keeps its size: 3136
patches, 784 soft tokens), plus a random 896 x 896 PNG. Not a fixture: written to the folder
given (default /tmp/qwen35_vision_bench), about 1.6 GB (float32).

Run (from the repository root):
  ~/.cache/oxinfer/refvenv/bin/python tools/ref/make_qwen35_vision_bench.py [OUT_DIR]
then time a run with and without the image (the difference is the encode):
  time target/release/oxinfer run -m OUT_DIR --image OUT_DIR/896.png -p x -n 1 --show-tokens
  time target/release/oxinfer run -m OUT_DIR -p x -n 1 --show-tokens
"""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "fixtures" / "qwen35-vl-tiny"
out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/qwen35_vision_bench")

cfg = json.loads((TINY / "config.json").read_text())
vision = {"out_hidden_size": cfg["text_config"]["hidden_size"]}  # everything else: defaults
config = Qwen3_5Config(text_config=cfg["text_config"], vision_config=vision,
                       **{k: cfg[k] for k in ("image_token_id", "video_token_id",
                                              "vision_start_token_id", "vision_end_token_id",
                                              "tie_word_embeddings")})
torch.manual_seed(0)
model = Qwen3_5ForConditionalGeneration(config).to(torch.float32).eval()
if out.exists():
    shutil.rmtree(out)
model.save_pretrained(out, safe_serialization=True)
for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
    shutil.copy(TINY / f, out / f)
pre = json.loads((TINY / "preprocessor_config.json").read_text())
pre.update(patch_size=16, size={"shortest_edge": 56 * 56, "longest_edge": 1024 * 1024})
(out / "preprocessor_config.json").write_text(json.dumps(pre, indent=1) + "\n")
rng = np.random.default_rng(0)
Image.fromarray(rng.integers(0, 256, (896, 896, 3), dtype=np.uint8)).save(out / "896.png")
size = sum(p.stat().st_size for p in out.iterdir())
print(f"{out}: {size / 2**20:.0f} MiB")
