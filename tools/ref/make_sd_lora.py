#!/usr/bin/env python3
"""LoRA fused into tiny_sd1's UNet and text encoder, against diffusers float32
(`pipe.load_lora_weights(file)` + `pipe.fuse_lora(lora_scale=...)`).

Writes only new files, under tests/fixtures/tiny_sd1_lora/ (reads tiny_sd1):
  kohya.safetensors   a random rank-4 LoRA in the kohya / A1111 form with diffusers' module names
                      (`lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight`,
                      `.lora_up.weight`, `.alpha`; `lora_te_text_model_encoder_layers_0_...`, the
                      text encoder named with `text_model.` as LoRA files have it, though
                      transformers 5's CLIPTextModel has no such level: diffusers maps it),
                      float16 matrices, alpha 2 on the UNet (scale 0.5) and 3 on the text encoder
                      (0.75). It targets the modules LCM-LoRA's training script targets: to_q,
                      to_k, to_v, to_out.0, proj_in / proj_out (1 x 1 convs), ff.net.0.proj,
                      ff.net.2, the resnets' conv1 / conv2 (3 x 3), conv_shortcut (1 x 1),
                      time_emb_proj, the down / up samplers' convs; and q/k/v/out_proj, fc1, fc2
                      of every text encoder layer.
  peft.safetensors    the same LoRA in the diffusers / peft form (`unet.<module>.lora_A.weight`,
                      `lora_B.weight`, `text_encoder.<module>...`), float32, the alphas folded
                      into lora_B (the form has no alpha: diffusers takes alpha = rank).
  ldm.safetensors     the UNet part in the kohya form with the original LDM module names
                      (`lora_unet_input_blocks_1_1_proj_in...`). diffusers 0.42 does not load
                      this form for SD 1.x (its sgm block mapping is SDXL's: NoMatchingPeft-
                      ModuleError), so its reference is diffusers on the same UNet LoRA under
                      diffusers' names (a temporary file, not kept).
  reference/noise.npy            the initial latent noise [1, 4, 6, 8] (48 x 64 images)
  reference/lcm_step_noise.npy   LCM's per-step noise [4, 1, 4, 6, 8]
  reference/<case>_latents.npy, <case>_image.npy
cases (StableDiffusionPipeline, 48 x 64):
  base          no LoRA, Euler 4 steps, guidance 7.5 (how far the LoRA moves the result)
  kohya_s08     kohya.safetensors fused at lora_scale 0.8, Euler 4 steps, guidance 7.5
  peft_s1       peft.safetensors at scale 1, Euler 4 steps, guidance 7.5
  ldm_s1        the UNet part of kohya.safetensors (= ldm.safetensors renamed) at scale 1,
                Euler 4 steps, guidance 7.5
  lcm_kohya     kohya.safetensors at scale 1 with LCMScheduler.from_config, 4 steps, guidance 1
                (LCM-LoRA's usage in diffusers' docs: no classifier-free guidance)

Run from the repository root:
  ~/.cache/oxinfer/refvenv/bin/python tools/ref/make_sd_lora.py
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from diffusers import LCMScheduler, StableDiffusionPipeline
from safetensors.torch import save_file

import make_tiny_sd as base
from make_sd_i2i_inpaint import FIX, HEIGHT, SD1, WIDTH, fresh_fixture, versions

PROMPT, NEGATIVE, GUIDANCE = base.PROMPT, base.NEGATIVE, base.GUIDANCE
RANK = 4
UNET_ALPHA, TE_ALPHA = 2.0, 3.0
UNET_TARGETS = ("to_q", "to_k", "to_v", "to_out.0", "proj_in", "proj_out", "ff.net.0.proj",
                "ff.net.2", "conv1", "conv2", "conv_shortcut", "time_emb_proj",
                "downsamplers.0.conv", "upsamplers.0.conv")
TMP_UNET = Path(tempfile.gettempdir()) / "oxinfer_kohya_unet_lora.safetensors"
TE_TARGETS = ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2")


def targets(model, ends) -> list:
    return [(n, m) for n, m in model.named_modules()
            if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))
            and any(n == e or n.endswith("." + e) for e in ends)]


def lora_pair(m, g: torch.Generator):
    """Random (down, up) for module `m`, rounded to float16: down [r, in(, k, k)], up
    [out, r(, 1, 1)]."""
    w = m.weight
    fan_in = w[0].numel()
    down = torch.randn((RANK,) + tuple(w.shape[1:]), generator=g) / fan_in ** 0.5
    up = torch.randn((w.shape[0], RANK) + (1, 1) * (w.dim() == 4), generator=g) * 0.2
    return down.half(), up.half()


def make_loras(pipe, out):
    g = torch.Generator().manual_seed(51)
    kohya, peft, ldm, kohya_unet = {}, {}, {}, {}
    ucfg = dict(pipe.unet.config)
    for comp, model, ends, alpha, kprefix in [
            ("unet", pipe.unet, UNET_TARGETS, UNET_ALPHA, "lora_unet_"),
            ("text_encoder", pipe.text_encoder, TE_TARGETS, TE_ALPHA, "lora_te_")]:
        found = targets(model, ends)
        assert found, comp
        for name, m in found:
            down, up = lora_pair(m, g)
            # transformers 5's CLIPTextModel has no `text_model` level; LoRA files (and
            # diffusers' conversion of them) name it.
            if comp == "text_encoder" and not name.startswith("text_model."):
                name = "text_model." + name
            k = kprefix + name.replace(".", "_")
            kohya[f"{k}.lora_down.weight"] = down
            kohya[f"{k}.lora_up.weight"] = up
            kohya[f"{k}.alpha"] = torch.tensor(alpha)
            peft[f"{comp}.{name}.lora_A.weight"] = down.float()
            peft[f"{comp}.{name}.lora_B.weight"] = up.float() * (alpha / RANK)
            if comp == "unet":
                kohya_unet.update({k2: v for k2, v in kohya.items() if k2.startswith(k + ".")})
                lk = "lora_unet_" + base.unet_key_to_ldm(name + ".weight", ucfg)
                lk = lk.removesuffix(".weight").replace(".", "_")
                ldm[f"{lk}.lora_down.weight"] = down
                ldm[f"{lk}.lora_up.weight"] = up
                ldm[f"{lk}.alpha"] = torch.tensor(UNET_ALPHA)
    for name, sd in [("kohya", kohya), ("peft", peft), ("ldm", ldm)]:
        save_file({k: v.contiguous() for k, v in sd.items()}, out / f"{name}.safetensors")
    save_file({k: v.contiguous() for k, v in kohya_unet.items()}, TMP_UNET)
    return {n: len(sd) for n, sd in [("kohya", kohya), ("peft", peft), ("ldm", ldm)]}


def main():
    out = fresh_fixture("tiny_sd1_lora")
    ref_dir = out / "reference"
    shapes: dict = {}

    def pipeline():
        p = StableDiffusionPipeline.from_pretrained(SD1, dtype=torch.float32, safety_checker=None,
                                                    requires_safety_checker=False)
        p.set_progress_bar_config(disable=True)
        return p

    counts = make_loras(pipeline(), out)
    g = torch.Generator().manual_seed(52)
    noise = torch.randn((1, 4, HEIGHT // 8, WIDTH // 8), generator=g)
    lcm_noise = torch.randn((4, 1, 4, HEIGHT // 8, WIDTH // 8), generator=g)
    base.save("noise", noise, shapes)
    base.save("lcm_step_noise", lcm_noise, shapes)
    import diffusers.schedulers.scheduling_lcm as lcm_mod
    cases = {}
    for name, file, scale, lcm, guidance in [
            ("base", None, None, False, GUIDANCE),
            ("kohya_s08", "kohya", 0.8, False, GUIDANCE),
            ("peft_s1", "peft", 1.0, False, GUIDANCE),
            ("ldm_s1", "ldm", 1.0, False, GUIDANCE),
            ("lcm_kohya", "kohya", 1.0, True, 1.0)]:
        pipe = pipeline()
        if file is not None:
            path = TMP_UNET if file == "ldm" else out / f"{file}.safetensors"
            q_proj = pipe.text_encoder.encoder.layers[0].self_attn.q_proj.weight
            before = q_proj.detach().clone()
            pipe.load_lora_weights(str(path))
            pipe.fuse_lora(lora_scale=scale)
            te_moved = (pipe.text_encoder.encoder.layers[0].self_attn.q_proj.weight
                        - before).abs().max().item()
            assert (te_moved > 0) == (file != "ldm"), (file, te_moved)
        if lcm:
            pipe.scheduler = LCMScheduler.from_config(pipe.scheduler.config)
            q = list(lcm_noise)
            lcm_mod.randn_tensor = lambda *a, **k: q.pop(0).clone()
        with torch.no_grad():
            lat = pipe(PROMPT, negative_prompt=NEGATIVE, num_inference_steps=4,
                       guidance_scale=guidance, height=HEIGHT, width=WIDTH,
                       latents=noise.clone(), output_type="latent").images
            base.save(f"{name}_latents", lat, shapes)
            base.save(f"{name}_image",
                      pipe.vae.decode(lat / pipe.vae.config.scaling_factor).sample, shapes)
        cases[name] = dict(lora=file and f"{file}.safetensors", lora_scale=scale,
                           scheduler=type(pipe.scheduler).__name__, steps=4,
                           guidance_scale=guidance)
    import numpy as np
    lat = {n: np.load(ref_dir / f"{n}_latents.npy") for n in cases}
    moved = float(np.abs(lat["kohya_s08"] - lat["base"]).max())
    assert moved > 1e-2, moved
    TMP_UNET.unlink()
    ref = dict(versions=versions(), model="tiny_sd1", prompt=PROMPT, negative_prompt=NEGATIVE,
               guidance_scale=GUIDANCE, height=HEIGHT, width=WIDTH, rank=RANK, unet_alpha=UNET_ALPHA, te_alpha=TE_ALPHA,
               tensors=counts, cases=cases, files=shapes,
               kohya_s08_vs_base_max_abs=moved,
               note="ldm_s1: diffusers ran the UNet part of kohya.safetensors (the LoRA of "
                    "ldm.safetensors under diffusers' names); it does not load SD 1.x LDM names")
    (ref_dir / "reference.json").write_text(json.dumps(ref, indent=1, default=list))
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"wrote {out} ({total / 1e3:.0f} kB); LoRA moves latents by {moved:.3f}")


if __name__ == "__main__":
    main()
