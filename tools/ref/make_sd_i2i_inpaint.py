#!/usr/bin/env python3
"""Image-to-image with DDIM and DPM-Solver++ 2M, and inpainting, against diffusers 0.42 float32.

Writes only new files (re-running make_tiny_sd.py does not reproduce the older fixtures bit for
bit, so this script never touches them; it reads tests/fixtures/tiny_sd1):

tests/fixtures/tiny_sd1_i2i/        image-to-image references on tiny_sd1
  init.png                 a smooth random 64 x 48 RGB image (what `--init` reads)
  reference/input.npy      init.png as the pipeline sees it, NCHW [1, 3, 48, 64] in [-1, 1]
  reference/enc_noise.npy  the noise sampling the VAE posterior [1, 4, 6, 8]
  reference/noise.npy      the noise added at the first timestep run [1, 4, 6, 8]
  reference/<case>_latents.npy, <case>_image.npy   final latents and the VAE's image
  cases (StableDiffusionImg2ImgPipeline, guidance 7.5 with the negative prompt; the scheduler
  made with `from_config` of tiny_sd1's Euler config, as `--scheduler` does):
    ddim            DDIMScheduler, 5 steps, strength 0.6 (the last 3 run)
    dpmpp2m         DPMSolverMultistepScheduler, 6 steps, strength 0.5 (the last 3)
    dpmpp2m_karras  the same with use_karras_sigmas, 5 steps, strength 0.7 (the last 3)

tests/fixtures/tiny_sd_inpaint/     a tiny random inpainting pipeline (diffusers folder)
  tiny_sd1's tokenizer, text encoder, VAE and scheduler with a UNet of 9 input channels (the
  latents, the mask, the masked image's latents), block_out_channels (8, 16), its weights
  rounded to float16 and stored so (exact: float32 computes on the same values);
  init.png (64 x 48), mask.png (RGB, white = repaint; colours and greys near 0.5 check the
  grayscale conversion and the binarization), and references of StableDiffusionInpaintPipeline:
  reference/input.npy, mask.npy (the binarized mask [1, 1, 48, 64]), <case>_unet_in0.npy (the
  first UNet input, [2B, 9, 6, 8]), <case>_latents.npy, <case>_image.npy, with the posterior
  noise of the init image (`enc_noise`, only when strength < 1) and of the masked image
  (`masked_enc_noise`), the initial noise and per-step noise recorded:
    euler_s075      Euler (the folder's), 4 steps, strength 0.75, guidance 7.5
    euler_a_s1      Euler ancestral, 3 steps, strength 1 (pure noise), guidance 7.5
    dpmpp2m_b2      DPM-Solver++ 2M, 4 steps, strength 0.5, two images, guidance 1 (none)
tests/fixtures/tiny_sd_inpaint_ldm/inpaint.safetensors   the same pipeline as one
  original-layout (LDM) checkpoint, checked by diffusers' converters.

Run from the repository root:
  ~/.cache/oxinfer/refvenv/bin/python tools/ref/make_sd_i2i_inpaint.py
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch
import diffusers
import transformers
from PIL import Image
from diffusers import (DDIMScheduler, DPMSolverMultistepScheduler, EulerAncestralDiscreteScheduler,
                       StableDiffusionImg2ImgPipeline, StableDiffusionInpaintPipeline,
                       StableDiffusionPipeline, UNet2DConditionModel)

import make_tiny_sd as base

ROOT = base.ROOT
FIX = ROOT / "tests" / "fixtures"
SD1 = FIX / "tiny_sd1"
HEIGHT, WIDTH = 48, 64
PROMPT, NEGATIVE, GUIDANCE = base.PROMPT, base.NEGATIVE, base.GUIDANCE


def fresh_fixture(name: str) -> Path:
    """Empties tests/fixtures/NAME (made anew) and points base.save at its reference/ folder;
    returns the fixture folder."""
    out = FIX / name
    if out.exists():
        shutil.rmtree(out)
    (out / "reference").mkdir(parents=True)
    base.REF = out / "reference"
    return out


def versions() -> dict:
    return dict(diffusers=diffusers.__version__, transformers=transformers.__version__,
                torch=torch.__version__)


def smooth_png(path: Path, g: torch.Generator, cells: tuple[int, int]):
    """A smooth random RGB image of HEIGHT x WIDTH saved as an 8-bit PNG; returns the PIL image."""
    small = torch.rand((1, 3) + cells, generator=g)
    img = torch.nn.functional.interpolate(small, size=(HEIGHT, WIDTH), mode="bilinear",
                                          align_corners=False).clamp(0, 1)
    arr = (img[0].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
    Image.fromarray(arr, "RGB").save(path)
    return Image.open(path).convert("RGB")


def patch_noise(vae_queue: list, add_noise, step_noise):
    """Feeds recorded noise to diffusers: the VAE posterior's samples in order, the pipelines'
    initial noise, the ancestral schedulers' per-step draws."""
    import diffusers.models.autoencoders.vae as vae_mod
    import diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion_img2img as i2i
    import diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion_inpaint as inp
    import diffusers.schedulers.scheduling_euler_ancestral_discrete as ea
    vq = list(vae_queue)
    vae_mod.randn_tensor = lambda *a, **k: vq.pop(0).clone()
    i2i.randn_tensor = inp.randn_tensor = lambda *a, **k: add_noise.clone()
    sq = list(step_noise) if step_noise is not None else []
    ea.randn_tensor = lambda *a, **k: sq.pop(0).clone()
    return vq, sq


def make_i2i():
    out = FIX / "tiny_sd1_i2i"
    ref_dir = out / "reference"
    if out.exists():
        shutil.rmtree(out)
    ref_dir.mkdir(parents=True)
    base.REF = ref_dir
    shapes: dict = {}
    g = torch.Generator().manual_seed(31)
    init = smooth_png(out / "init.png", g, (HEIGHT // 8, WIDTH // 8))
    lat = (1, 4, HEIGHT // 8, WIDTH // 8)
    enc_noise = torch.randn(lat, generator=g)
    add_noise = torch.randn(lat, generator=g)
    base.save("enc_noise", enc_noise, shapes)
    base.save("noise", add_noise, shapes)
    pipe = StableDiffusionImg2ImgPipeline.from_pretrained(SD1, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    base.save("input", pipe.image_processor.preprocess(init), shapes)
    euler = pipe.scheduler
    cases = {}
    for name, cls, extra, steps, strength in [
            ("ddim", DDIMScheduler, {}, 5, 0.6),
            ("dpmpp2m", DPMSolverMultistepScheduler, {}, 6, 0.5),
            ("dpmpp2m_karras", DPMSolverMultistepScheduler, dict(use_karras_sigmas=True), 5, 0.7)]:
        pipe.scheduler = cls.from_config(euler.config, **extra)
        vq, _ = patch_noise([enc_noise], add_noise, None)
        with torch.no_grad():
            lat_out = pipe(PROMPT, image=init, strength=strength, negative_prompt=NEGATIVE,
                           num_inference_steps=steps, guidance_scale=GUIDANCE,
                           output_type="latent").images
            assert not vq
            base.save(f"{name}_latents", lat_out, shapes)
            base.save(f"{name}_image",
                      pipe.vae.decode(lat_out / pipe.vae.config.scaling_factor).sample, shapes)
        config = {k: v for k, v in dict(pipe.scheduler.config).items()
                  if not (k.startswith("_") or (isinstance(v, float) and not np.isfinite(v)))}
        cases[name] = dict(scheduler=cls.__name__, config=config, steps=steps, strength=strength,
                           timesteps=[float(t) for t in pipe.scheduler.timesteps])
    ref = dict(versions=versions(), model="tiny_sd1", prompt=PROMPT, negative_prompt=NEGATIVE,
               guidance_scale=GUIDANCE, height=HEIGHT, width=WIDTH, cases=cases, files=shapes)
    (ref_dir / "reference.json").write_text(json.dumps(ref, indent=1, default=list))
    print(f"wrote {out}")


def inpaint_pipeline(out: Path):
    """tiny_sd1 with a 9-channel UNet, saved as a diffusers folder at `out`."""
    sd = StableDiffusionPipeline.from_pretrained(SD1, dtype=torch.float32)
    ucfg = {k: v for k, v in dict(sd.unet.config).items() if not k.startswith("_")}
    ucfg.update(in_channels=9, block_out_channels=(8, 16))
    torch.manual_seed(32)
    unet = UNet2DConditionModel(**ucfg)
    g = torch.Generator().manual_seed(33)
    with torch.no_grad():
        for p in unet.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
            p.copy_(p.half().float())
    pipe = StableDiffusionInpaintPipeline(
        vae=sd.vae, text_encoder=sd.text_encoder, tokenizer=sd.tokenizer, unet=unet,
        scheduler=sd.scheduler, safety_checker=None, feature_extractor=None,
        requires_safety_checker=False)
    pipe.save_pretrained(out, safe_serialization=True)
    # tiny_sd1's own files (identical blobs), and the UNet in float16 (its values are).
    for part in ("tokenizer", "text_encoder", "vae", "scheduler"):
        shutil.rmtree(out / part)
        shutil.copytree(SD1 / part, out / part)
    shutil.rmtree(out / "unet")
    unet.to(torch.float16).save_pretrained(out / "unet")
    cfg_path = out / "unet" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("_name_or_path", None)
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    pipe = StableDiffusionInpaintPipeline.from_pretrained(out, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    assert pipe.unet.dtype == torch.float32
    return pipe


def write_inpaint_single_file(pipe, path: Path):
    """The pipeline as one LDM checkpoint: the UNet in float16 (exact), the rest float32."""
    from safetensors.torch import save_file
    from diffusers.loaders.single_file_utils import convert_ldm_unet_checkpoint
    tmp = path.with_suffix(".tmp.safetensors")
    base.write_single_file(None, pipe, tmp)  # checks VAE / text encoder / UNet round trips
    from safetensors.torch import load_file
    ldm = load_file(tmp)
    tmp.unlink()
    for k in ldm:
        if k.startswith("model.diffusion_model."):
            ldm[k] = ldm[k].half()
    back = convert_ldm_unet_checkpoint({k: v.float() for k, v in ldm.items()}, dict(pipe.unet.config))
    assert all(torch.equal(back[k], t) for k, t in pipe.unet.state_dict().items())
    save_file(ldm, path)


def mask_png(path: Path, g: torch.Generator):
    """A coloured mask: a smooth random field per channel, so its grayscale (PIL's "L") and
    the 0.5 threshold both matter; about half of it repainted."""
    small = torch.rand((1, 3, 3, 4), generator=g)
    img = torch.nn.functional.interpolate(small, size=(HEIGHT, WIDTH), mode="bilinear",
                                          align_corners=False).clamp(0, 1)
    arr = (img[0].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
    Image.fromarray(arr, "RGB").save(path)
    return Image.open(path).convert("RGB")


def make_inpaint():
    out = FIX / "tiny_sd_inpaint"
    ref_dir = out / "reference"
    if out.exists():
        shutil.rmtree(out)
    pipe = inpaint_pipeline(out)
    ref_dir.mkdir(parents=True)
    base.REF = ref_dir
    ldm_dir = FIX / "tiny_sd_inpaint_ldm"
    ldm_dir.mkdir(exist_ok=True)
    write_inpaint_single_file(pipe, ldm_dir / "inpaint.safetensors")
    shapes: dict = {}
    g = torch.Generator().manual_seed(34)
    init = smooth_png(out / "init.png", g, (HEIGHT // 8, WIDTH // 8))
    mask = mask_png(out / "mask.png", g)
    base.save("input", pipe.image_processor.preprocess(init), shapes)
    m = pipe.mask_processor.preprocess(mask, height=HEIGHT, width=WIDTH)
    base.save("mask", m, shapes)
    share = float(m.mean())
    assert 0.2 < share < 0.8, share
    lat = (4, HEIGHT // 8, WIDTH // 8)
    euler = pipe.scheduler
    cases = {}
    for name, cls, steps, strength, guidance, batch in [
            ("euler_s075", None, 4, 0.75, GUIDANCE, 1),
            ("euler_a_s1", EulerAncestralDiscreteScheduler, 3, 1.0, GUIDANCE, 1),
            ("dpmpp2m_b2", DPMSolverMultistepScheduler, 4, 0.5, 1.0, 2)]:
        pipe.scheduler = euler if cls is None else cls.from_config(euler.config)
        enc_noise = torch.randn((1,) + lat, generator=g)
        masked_enc_noise = torch.randn((1,) + lat, generator=g)
        noise = torch.randn((batch,) + lat, generator=g)
        step_noise = torch.randn((steps, batch) + lat, generator=g)
        vae_queue = ([enc_noise] if strength < 1 else []) + [masked_enc_noise]
        if strength < 1:
            base.save(f"{name}_enc_noise", enc_noise, shapes)
        base.save(f"{name}_masked_enc_noise", masked_enc_noise, shapes)
        base.save(f"{name}_noise", noise, shapes)
        if cls is EulerAncestralDiscreteScheduler:
            base.save(f"{name}_step_noise", step_noise, shapes)
        vq, sq = patch_noise(vae_queue, noise, step_noise)
        records = []
        hook = pipe.unet.register_forward_hook(
            lambda mod, args, kwargs, o: records.append(args[0].clone()), with_kwargs=True)
        with torch.no_grad():
            lat_out = pipe(PROMPT, image=init, mask_image=mask, strength=strength,
                           negative_prompt=NEGATIVE, num_inference_steps=steps,
                           guidance_scale=guidance, num_images_per_prompt=batch, height=HEIGHT,
                           width=WIDTH, output_type="latent").images
            hook.remove()
            assert not vq, "posterior samples left"
            base.save(f"{name}_unet_in0", records[0], shapes)
            base.save(f"{name}_latents", lat_out, shapes)
            base.save(f"{name}_image",
                      pipe.vae.decode(lat_out / pipe.vae.config.scaling_factor).sample, shapes)
        cases[name] = dict(scheduler=type(pipe.scheduler).__name__, steps=steps, strength=strength,
                           guidance_scale=guidance, batch=batch, unet_calls=len(records),
                           timesteps=[float(t) for t in pipe.scheduler.timesteps])
    ref = dict(versions=versions(), prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT,
               width=WIDTH, mask_share=share, cases=cases, files=shapes,
               note="noise order in diffusers: the init image's posterior sample (strength < 1), "
                    "the initial noise, the masked image's posterior sample")
    (ref_dir / "reference.json").write_text(json.dumps(ref, indent=1, default=list))
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"wrote {out} ({total / 1e3:.0f} kB)")


if __name__ == "__main__":
    make_i2i()
    make_inpaint()
