#!/usr/bin/env python3
"""A pipeline folder for measuring the VAE at real size: Stable Diffusion 1.x's VAE geometry
(AutoencoderKL block_out_channels (128, 256, 512, 512), 2 layers per block, 32 groups,
sample_size 512: tiles of 64 latents) with random weights, next to tiny_sd1's text encoder,
tokenizer and scheduler and a tiny UNet that has no attention at full latent resolution (so
that at 1024 x 1024 the VAE, not the UNet, sets the peak memory). Not a fixture: written to the
folder given (default /tmp/sd_vae_bench), about 330 MB.

Run (from the repository root):
  ~/.cache/oxinfer/refvenv/bin/python tools/ref/make_sd_vae_bench.py [OUT_DIR [DIV]]
DIV (default 1) divides the VAE's channels (4: 32, 64, 128, 128 with 8 groups), for a loaded
machine: activations shrink with the channels, the mid block's attention scores do not.
then, for example:
  /usr/bin/time -v target/release/oxinfer image -m OUT_DIR -p x --steps 1 --cfg 1 \\
      --width 1024 --height 1024 --vae-tiling off -o /tmp/a.png
"""
import shutil
import sys
from pathlib import Path

import torch
from diffusers import AutoencoderKL, StableDiffusionPipeline, UNet2DConditionModel

ROOT = Path(__file__).resolve().parents[2]
out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/sd_vae_bench")
div = int(sys.argv[2]) if len(sys.argv) > 2 else 1
tiny = StableDiffusionPipeline.from_pretrained(ROOT / "tests" / "fixtures" / "tiny_sd1",
                                               dtype=torch.float32)
torch.manual_seed(0)
unet = UNet2DConditionModel(
    sample_size=64, in_channels=4, out_channels=4, block_out_channels=(32, 32),
    layers_per_block=1, norm_num_groups=8, cross_attention_dim=32, attention_head_dim=2,
    down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
    up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"))
vae = AutoencoderKL(
    in_channels=3, out_channels=3, latent_channels=4,
    block_out_channels=tuple(c // div for c in (128, 256, 512, 512)),
    down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
    layers_per_block=2, norm_num_groups=32 // div, sample_size=512)
pipe = StableDiffusionPipeline(vae=vae, text_encoder=tiny.text_encoder, tokenizer=tiny.tokenizer,
                               unet=unet, scheduler=tiny.scheduler, safety_checker=None,
                               feature_extractor=None, requires_safety_checker=False)
if out.exists():
    shutil.rmtree(out)
pipe.save_pretrained(out, safe_serialization=True)
# transformers saves tokenizer.json only; oxinfer reads vocab.json + merges.txt.
shutil.rmtree(out / "tokenizer")
shutil.copytree(ROOT / "tests" / "fixtures" / "tiny_sd1" / "tokenizer", out / "tokenizer")
print(f"wrote {out}")
