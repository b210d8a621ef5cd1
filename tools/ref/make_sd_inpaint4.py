#!/usr/bin/env python3
"""Inpainting with a plain 4-channel UNet against diffusers float32.

diffusers' `StableDiffusionInpaintPipeline` with `unet.config.in_channels == 4` runs the plain
UNet on the latents alone and, after every scheduler step, puts the init image's latents back
where the mask keeps the image: `latents = (1 - mask) * add_noise(image_latents, noise,
t_next) + mask * latents` (no noise after the last step), the mask binarized and downsampled
(nearest) to the latents. Its init image is always encoded (also at strength 1), and so is the
masked image (a posterior sample drawn and then unused by a 4-channel UNet).

Writes only new files: tests/fixtures/tiny_sd1_inpaint4/reference/ (reads tiny_sd1, and the
init.png / mask.png of tests/fixtures/tiny_sd_inpaint, never rewriting them):
  input.npy, mask.npy                  the init image [1, 3, 48, 64] in [-1, 1], the binarized
                                       mask [1, 1, 48, 64]
  <case>_enc_noise.npy                 the init image's posterior noise [1, 4, 6, 8]
  <case>_masked_enc_noise.npy          the masked image's (drawn by diffusers, unused)
  <case>_noise.npy                     the initial noise [B, 4, 6, 8] (also the blend's noise)
  <case>_step_noise.npy                Euler ancestral's per-step noise [steps, B, 4, 6, 8]
  <case>_latents.npy, <case>_image.npy final latents and the VAE's image
cases (tiny_sd1, schedulers made by `from_config` of its Euler config as `--scheduler` does):
  euler_s075   Euler, 4 steps, strength 0.75, guidance 7.5
  euler_a_s1   Euler ancestral, 3 steps, strength 1 (pure noise), guidance 7.5
  ddim_s06     DDIM, 5 steps, strength 0.6, guidance 7.5
  dpmpp2m_b2   DPM-Solver++ 2M, 4 steps, strength 0.5, two images, guidance 1 (none)
  lcm_s075     LCM, 4 steps, strength 0.75 (the last 3 of its 4 timesteps), guidance 1, its
               per-step noise given (LCM-LoRA's usage, here on the plain tiny UNet)

Run from the repository root:
  ~/.cache/oxinfer/refvenv/bin/python tools/ref/make_sd_inpaint4.py
"""
from __future__ import annotations

import json

import torch
from PIL import Image
import diffusers.schedulers.scheduling_lcm as lcm_mod
from diffusers import (DDIMScheduler, DPMSolverMultistepScheduler,
                       EulerAncestralDiscreteScheduler, LCMScheduler,
                       StableDiffusionInpaintPipeline)

import make_tiny_sd as base
from make_sd_i2i_inpaint import (FIX, HEIGHT, SD1, WIDTH, fresh_fixture, patch_noise,
                                 versions)

PROMPT, NEGATIVE, GUIDANCE = base.PROMPT, base.NEGATIVE, base.GUIDANCE


def main():
    out = fresh_fixture("tiny_sd1_inpaint4")
    ref_dir = out / "reference"
    src = FIX / "tiny_sd_inpaint"
    init = Image.open(src / "init.png").convert("RGB")
    mask = Image.open(src / "mask.png").convert("RGB")
    pipe = StableDiffusionInpaintPipeline.from_pretrained(SD1, dtype=torch.float32,
                                                          safety_checker=None,
                                                          requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    assert pipe.unet.config.in_channels == 4
    shapes: dict = {}
    base.save("input", pipe.image_processor.preprocess(init), shapes)
    base.save("mask", pipe.mask_processor.preprocess(mask, height=HEIGHT, width=WIDTH), shapes)
    lat = (4, HEIGHT // 8, WIDTH // 8)
    euler = pipe.scheduler
    g = torch.Generator().manual_seed(41)
    cases = {}
    for name, cls, steps, strength, guidance, batch in [
            ("euler_s075", None, 4, 0.75, GUIDANCE, 1),
            ("euler_a_s1", EulerAncestralDiscreteScheduler, 3, 1.0, GUIDANCE, 1),
            ("ddim_s06", DDIMScheduler, 5, 0.6, GUIDANCE, 1),
            ("dpmpp2m_b2", DPMSolverMultistepScheduler, 4, 0.5, 1.0, 2),
            ("lcm_s075", LCMScheduler, 4, 0.75, 1.0, 1)]:
        pipe.scheduler = euler if cls is None else cls.from_config(euler.config)
        enc_noise = torch.randn((1,) + lat, generator=g)
        masked_enc_noise = torch.randn((1,) + lat, generator=g)
        noise = torch.randn((batch,) + lat, generator=g)
        step_noise = torch.randn((steps, batch) + lat, generator=g)
        base.save(f"{name}_enc_noise", enc_noise, shapes)
        base.save(f"{name}_masked_enc_noise", masked_enc_noise, shapes)
        base.save(f"{name}_noise", noise, shapes)
        if cls in (EulerAncestralDiscreteScheduler, LCMScheduler):
            base.save(f"{name}_step_noise", step_noise, shapes)
        # diffusers' order: the init image's posterior sample (always, for a 4-channel UNet),
        # the initial noise, the masked image's posterior sample.
        vq, _ = patch_noise([enc_noise, masked_enc_noise], noise, step_noise)
        lq = list(step_noise)
        lcm_mod.randn_tensor = lambda *a, **k: lq.pop(0).clone()
        calls = []
        hook = pipe.unet.register_forward_hook(lambda *a: calls.append(1))
        with torch.no_grad():
            lat_out = pipe(PROMPT, image=init, mask_image=mask, strength=strength,
                           negative_prompt=NEGATIVE, num_inference_steps=steps,
                           guidance_scale=guidance, num_images_per_prompt=batch, height=HEIGHT,
                           width=WIDTH, output_type="latent").images
            hook.remove()
            assert not vq, "posterior samples left"
            base.save(f"{name}_latents", lat_out, shapes)
            base.save(f"{name}_image",
                      pipe.vae.decode(lat_out / pipe.vae.config.scaling_factor).sample, shapes)
        cases[name] = dict(scheduler=type(pipe.scheduler).__name__, steps=steps, strength=strength,
                           guidance_scale=guidance, batch=batch, unet_calls=len(calls),
                           timesteps=[float(t) for t in pipe.scheduler.timesteps])
    ref = dict(versions=versions(), model="tiny_sd1", prompt=PROMPT, negative_prompt=NEGATIVE,
               height=HEIGHT, width=WIDTH, cases=cases, files=shapes,
               images="tests/fixtures/tiny_sd_inpaint/init.png and mask.png")
    (ref_dir / "reference.json").write_text(json.dumps(ref, indent=1, default=list))
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"wrote {out} ({total / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
