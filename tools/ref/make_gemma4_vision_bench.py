#!/usr/bin/env python3
"""A checkpoint folder for timing Gemma 4's vision tower at real size: transformers' default
`Gemma4VisionConfig` (16 layers, width 768, MLP 3072, 12 heads, patch 16, pooling 3) with
random weights, in front of the tiny text and audio models of tests/fixtures/tiny_gemma4_mm
(its tokenizer, template and processor settings, with the image processor at transformers'
defaults: patch 16, pooling 3, 280 soft tokens at most, so an 896 x 896 image is resized to
fit 2,520 patches), plus a random 896 x 896 PNG. Not a fixture: written to the folder given
(default /tmp/gemma4_vision_bench), float32.

Run (from the repository root):
  ~/.cache/oxinfer/refvenv/bin/python tools/ref/make_gemma4_vision_bench.py [OUT_DIR]
then time a run with and without the image (the difference is the encode):
  time target/release/oxinfer run -m OUT_DIR --image OUT_DIR/896.png -p x -n 1 --device cpu
  time target/release/oxinfer run -m OUT_DIR -p x -n 1 --device cpu
and transformers' own (tools/bench/gemma4_vision_torch.py OUT_DIR).
"""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import Gemma4Config, Gemma4ForConditionalGeneration, Gemma4VisionConfig
from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "fixtures" / "tiny_gemma4_mm"
out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/gemma4_vision_bench")

cfg = json.loads((TINY / "config.json").read_text())
keep = {k: v for k, v in cfg.items()
        if k not in ("text_config", "vision_config", "audio_config", "architectures", "dtype",
                     "transformers_version", "model_type")}
config = Gemma4Config(text_config=cfg["text_config"], audio_config=cfg["audio_config"],
                      vision_config=Gemma4VisionConfig().to_dict(), **keep)
torch.manual_seed(0)
model = Gemma4ForConditionalGeneration(config).to(torch.float32).eval()
if out.exists():
    shutil.rmtree(out)
model.save_pretrained(out, safe_serialization=True)
for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
          "processor_config.json"):
    shutil.copy(TINY / f, out / f)
proc = Gemma4ImageProcessorPil().to_dict()
proc.pop("_processor_class", None)
(out / "preprocessor_config.json").write_text(json.dumps(proc, indent=1, default=str) + "\n")
rng = np.random.default_rng(0)
Image.fromarray(rng.integers(0, 256, (896, 896, 3), dtype=np.uint8)).save(out / "896.png")
size = sum(p.stat().st_size for p in out.iterdir())
v = config.vision_config
print(f"{out}: {size / 2**20:.0f} MiB; vision tower {v.num_hidden_layers} layers, width "
      f"{v.hidden_size}, MLP {v.intermediate_size}, {v.num_attention_heads} heads, patch "
      f"{v.patch_size}, pooling {v.pooling_kernel_size}")
