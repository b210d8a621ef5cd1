#!/usr/bin/env python3
"""Tiny random Stable Diffusion 1.x-style pipeline and its diffusers float32 references.

Writes tests/fixtures/tiny_sd1_ldm/tiny_sd1.safetensors (tiny_sd1 as one original-layout LDM
checkpoint, checked by diffusers' single-file converters), tests/fixtures/tiny_sd1/ (and tests/fixtures/tiny_sd2/, the SD 2.x-style variant: gelu text
encoder padded with "!", linear proj_in, per-block head counts (2, 4) with cross-attention in every
block, v-prediction, Euler ancestral with `leading` spacing and steps_offset 1, fed recorded
ancestral noise, a 64x48 image; tiny_sd1 also holds a batched run, reference/batch_*.npy:
three images of one prompt at 64x48 with guidance and Euler ancestral, as `batch` in
reference.json):
  model_index.json, text_encoder/, tokenizer/, unet/, vae/, scheduler/   a diffusers folder
      (fp32 safetensors): CLIPTextModel (quick_gelu), CLIPTokenizer (a tiny byte-level BPE
      vocabulary trained here on a few sentences), UNet2DConditionModel (conv proj_in, 2 heads,
      one cross-attention down block, one cross-attention up block, cross-attention mid block),
      AutoencoderKL (4 blocks: latents are 1/8 of the image), EulerDiscreteScheduler (linspace).
  reference/reference.json   versions, prompt, settings, token ids of test strings, timesteps
  reference/*.npy            float32 arrays (names and shapes in reference.json)

Run (from the repository root):
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_sd.py
  .../python tools/ref/make_tiny_sd.py tiled-encode   (only tiny_sd1's reference/vae_tiled_enc_*,
      from the existing fixture: see make_tiled_encode_refs)
  .../python tools/ref/make_tiny_sd.py single-variants   (only tests/fixtures/tiny_sd_single_variants/:
      single-file model types and from_single_file runs, make_sd_single_variants.py)

Everything is seeded: re-running gives identical files.
"""
from __future__ import annotations

import collections
import json
import shutil
from pathlib import Path

import numpy as np
import torch
import diffusers
import transformers
from diffusers import (AutoencoderKL, DDIMScheduler, DPMSolverMultistepScheduler,
                       EulerAncestralDiscreteScheduler, EulerDiscreteScheduler, LCMScheduler,
                       LatentConsistencyModelPipeline, StableDiffusionPipeline,
                       UNet2DConditionModel)
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {
    "tiny_sd1": dict(act="quick_gelu", pad="<|endoftext|>", linear_proj=False, heads=2,
                     down=("CrossAttnDownBlock2D", "DownBlock2D"),
                     up=("UpBlock2D", "CrossAttnUpBlock2D"),
                     scheduler=(EulerDiscreteScheduler, dict(timestep_spacing="linspace",
                                                             prediction_type="epsilon")),
                     height=64, width=64),
    "tiny_sd2": dict(act="gelu", pad="!", linear_proj=True, heads=(2, 4),
                     down=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
                     up=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
                     scheduler=(EulerAncestralDiscreteScheduler,
                                dict(timestep_spacing="leading", prediction_type="v_prediction")),
                     height=48, width=64),
}
OUT = REF = None  # set per variant

PROMPT = "a photo of an astronaut riding a horse on the moon"
NEGATIVE = "blurry, low quality"
STEPS = 4
GUIDANCE = 7.5

CORPUS = """a photo of an astronaut riding a horse on the moon. a painting of a cat sitting
on a red chair in the garden. portrait of a woman with long hair, highly detailed, 4k.
blurry, low quality, worst quality. the quick brown fox jumps over the lazy dog!
an oil painting of mountains and a lake at sunset, trending on artstation"""

# Strings whose token ids are recorded (each padded to 77 as the pipeline does).
TOKENIZER_CASES = [
    PROMPT,
    NEGATIVE,
    "",
    "  A   Photo\tof THE  Moon!!  ",
    "it's a cat's toy, isn't it? 1234 dogs",
    "caf\u00e9 na\u00efve \u00fcber \u2014 emoji \U0001f600",
    "<|startoftext|>hello<|endoftext|> world",
    " ".join(["horse"] * 100),
]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def train_merges(n_merges: int) -> list[tuple[str, str]]:
    """Plain BPE on the corpus's lowercase words, CLIP style (last symbol carries '</w>')."""
    import re
    b2u = bytes_to_unicode()
    words = collections.Counter(re.findall(r"[a-z]+", CORPUS.lower()))
    seqs = {w: tuple(b2u[b] for b in w.encode()[:-1]) + (b2u[w.encode()[-1]] + "</w>",)
            for w in words}
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, s in seqs.items():
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += words[w]
        if not pairs:
            break
        best = max(sorted(pairs), key=lambda p: pairs[p])
        merges.append(best)
        for w, s in seqs.items():
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(s[i] + s[i + 1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = tuple(out)
    return merges


def write_tokenizer(d: Path, pad: str):
    d.mkdir(parents=True, exist_ok=True)
    chars = list(bytes_to_unicode().values())
    merges = train_merges(120)
    vocab = chars + [c + "</w>" for c in chars] + ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    (d / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}, ensure_ascii=False))
    (d / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    (d / "special_tokens_map.json").write_text(json.dumps({
        "bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>",
        "pad_token": pad, "unk_token": "<|endoftext|>"}, indent=1))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "CLIPTokenizer", "model_max_length": 77, "do_lower_case": True,
        "bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>",
        "pad_token": pad, "unk_token": "<|endoftext|>"}, indent=1))
    return len(vocab)


def save(name: str, arr, shapes: dict):
    a = arr.detach().cpu().numpy() if torch.is_tensor(arr) else np.asarray(arr)
    a = np.ascontiguousarray(a.astype(np.float32))
    np.save(REF / f"{name}.npy", a)
    shapes[name] = list(a.shape)


def scheduler_refs(shapes: dict) -> dict:
    """Each scheduler's timesteps/sigmas and its step outputs on seeded random inputs."""
    base = dict(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012,
                beta_schedule="scaled_linear")
    cases = {
        "euler": (EulerDiscreteScheduler, dict(timestep_spacing="linspace")),
        "euler_leading_v": (EulerDiscreteScheduler, dict(timestep_spacing="leading", steps_offset=1,
                                                         prediction_type="v_prediction")),
        "euler_a": (EulerAncestralDiscreteScheduler, dict(timestep_spacing="linspace")),
        "ddim": (DDIMScheduler, dict(timestep_spacing="leading", steps_offset=1,
                                     clip_sample=False, set_alpha_to_one=False)),
        "ddim_trailing_v": (DDIMScheduler, dict(timestep_spacing="trailing", clip_sample=False,
                                                set_alpha_to_one=False,
                                                prediction_type="v_prediction")),
        "dpmpp2m": (DPMSolverMultistepScheduler, dict(timestep_spacing="linspace")),
        "dpmpp2m_karras": (DPMSolverMultistepScheduler, dict(timestep_spacing="linspace",
                                                             use_karras_sigmas=True)),
        "lcm": (LCMScheduler, dict(original_inference_steps=50, steps_offset=1)),
        "lcm_v_clip": (LCMScheduler, dict(original_inference_steps=100, prediction_type="v_prediction",
                                          clip_sample=True, clip_sample_range=1.5,
                                          timestep_scaling=5.0)),
    }
    steps = 6
    out = {}
    import diffusers.schedulers.scheduling_euler_ancestral_discrete as ea
    import diffusers.schedulers.scheduling_lcm as lcm_mod
    for name, (cls, extra) in cases.items():
        sched = cls(**base, **extra)
        sched.set_timesteps(steps)
        g = torch.Generator().manual_seed(7)
        shape = (1, 4, 2, 3)
        sample = torch.randn(shape, generator=g) * float(sched.init_noise_sigma)
        outs_in, outs_model, outs_noise, outs_prev = [], [], [], []
        for t in sched.timesteps:
            model_out = torch.randn(shape, generator=g)
            noise = torch.randn(shape, generator=g)
            ea.randn_tensor = lambda *a, _n=noise, **k: _n.clone()
            lcm_mod.randn_tensor = ea.randn_tensor
            scaled = sched.scale_model_input(sample, t)
            prev = sched.step(model_out, t, sample).prev_sample
            outs_in.append(sample.clone()); outs_model.append(model_out); outs_noise.append(noise)
            outs_prev.append(torch.stack([scaled, prev]))
            sample = prev
        save(f"sched_{name}_sample", torch.stack(outs_in), shapes)
        save(f"sched_{name}_model", torch.stack(outs_model), shapes)
        save(f"sched_{name}_noise", torch.stack(outs_noise), shapes)
        save(f"sched_{name}_scaled_prev", torch.stack(outs_prev), shapes)
        sigmas = getattr(sched, "sigmas", None)
        # JSON has no infinities (DPM's lambda_min_clipped = -inf is its default anyway).
        config = {k: v for k, v in dict(sched.config).items()
                  if not (k.startswith("_") or (isinstance(v, float) and not np.isfinite(v)))}
        config["_class_name"] = cls.__name__
        out[name] = dict(config=config,
                         steps=steps,
                         timesteps=[float(t) for t in sched.timesteps],
                         sigmas=None if sigmas is None else [float(s) for s in sigmas],
                         init_noise_sigma=float(sched.init_noise_sigma))
    return out


def img2img_refs(out: Path, height: int, width: int, ref: dict, shapes: dict):
    """The VAE encoder's posterior and an image-to-image run (strength 0.75: the last 3 of 4
    steps) with the posterior's sampling noise and the added noise given."""
    import diffusers.models.autoencoders.vae as vae_mod
    import diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion_img2img as i2i
    from diffusers import StableDiffusionImg2ImgPipeline
    pipe = StableDiffusionImg2ImgPipeline.from_pretrained(out, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    g = torch.Generator().manual_seed(9)
    # A smooth random image in [0, 1] (what the pipeline normalizes to [-1, 1]).
    small = torch.rand((1, 3, height // 8, width // 8), generator=g)
    image01 = torch.nn.functional.interpolate(small, size=(height, width), mode="bilinear",
                                              align_corners=False).clamp(0, 1)
    save("img2img_input", image01 * 2 - 1, shapes)  # [-1, 1], what the VAE encodes
    lat = (1, 4, height // 8, width // 8)
    enc_noise = torch.randn(lat, generator=g)
    add_noise = torch.randn(lat, generator=g)
    step_noise = torch.randn((STEPS,) + lat, generator=g)
    save("img2img_enc_noise", enc_noise, shapes)
    save("img2img_noise", add_noise, shapes)
    save("img2img_step_noise", step_noise[:, None].squeeze(1), shapes)
    with torch.no_grad():
        post = pipe.vae.encode(image01 * 2 - 1).latent_dist
        save("vae_enc_mean", post.mean, shapes)
        save("vae_enc_std", post.std, shapes)
        vae_mod.randn_tensor = lambda *a, **k: enc_noise.clone()
        i2i.randn_tensor = lambda *a, **k: add_noise.clone()
        import diffusers.schedulers.scheduling_euler_ancestral_discrete as ea
        queue = list(step_noise)
        ea.randn_tensor = lambda *a, **k: queue.pop(0).clone()
        lat_out = pipe(PROMPT, image=image01, strength=0.75, negative_prompt=NEGATIVE,
                       num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                       output_type="latent").images
        save("img2img_latents", lat_out, shapes)
        save("img2img_image", pipe.vae.decode(lat_out / pipe.vae.config.scaling_factor).sample,
             shapes)
    ref["img2img"] = dict(strength=0.75, steps=STEPS,
                          note="ancestral noise: the first steps-run of img2img_step_noise")


RESNET_TO_LDM = {"norm1": "in_layers.0", "conv1": "in_layers.2", "time_emb_proj": "emb_layers.1",
                 "norm2": "out_layers.0", "conv2": "out_layers.3", "conv_shortcut": "skip_connection"}
VAE_ATTN_TO_LDM = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v",
                   "to_out.0": "proj_out"}


def unet_key_to_ldm(k: str, cfg: dict) -> str:
    """diffusers UNet2DConditionModel name -> original LDM name (the inverse of diffusers'
    convert_ldm_unet_checkpoint), without the model.diffusion_model. prefix."""
    L = cfg["layers_per_block"]
    p = k.split(".")
    def resnet(rest):
        name = ".".join(rest[:-1])
        return RESNET_TO_LDM[name] + "." + rest[-1]
    if p[0] == "time_embedding":
        return {"linear_1": "time_embed.0", "linear_2": "time_embed.2"}[p[1]] + "." + p[2]
    if p[0] == "conv_in":
        return "input_blocks.0.0." + p[1]
    if p[0] == "conv_norm_out":
        return "out.0." + p[1]
    if p[0] == "conv_out":
        return "out.2." + p[1]
    if p[0] == "down_blocks":
        b = int(p[1])
        if p[2] == "downsamplers":
            return f"input_blocks.{(b + 1) * (L + 1)}.0.op." + p[-1]
        i = 1 + b * (L + 1) + int(p[3])
        if p[2] == "resnets":
            return f"input_blocks.{i}.0." + resnet(p[4:])
        return f"input_blocks.{i}.1." + ".".join(p[4:])
    if p[0] == "mid_block":
        if p[1] == "resnets":
            return f"middle_block.{2 * int(p[2])}." + resnet(p[3:])
        return "middle_block.1." + ".".join(p[3:])
    if p[0] == "up_blocks":
        u = int(p[1])
        if p[2] == "upsamplers":
            has_attn = cfg["up_block_types"][u].startswith("CrossAttn")
            return f"output_blocks.{u * (L + 1) + L}.{2 if has_attn else 1}.conv." + p[-1]
        j = u * (L + 1) + int(p[3])
        if p[2] == "resnets":
            return f"output_blocks.{j}.0." + resnet(p[4:])
        return f"output_blocks.{j}.1." + ".".join(p[4:])
    raise KeyError(k)


def vae_key_to_ldm(k: str, cfg: dict) -> str:
    """diffusers AutoencoderKL name -> original LDM name (inverse of convert_ldm_vae_checkpoint)."""
    n = len(cfg["block_out_channels"])
    p = k.split(".")
    if p[0] in ("quant_conv", "post_quant_conv") or p[1] in ("conv_in", "conv_out"):
        return k
    if p[1] == "conv_norm_out":
        return f"{p[0]}.norm_out.{p[2]}"
    if p[1] == "mid_block":
        if p[2] == "resnets":
            return f"{p[0]}.mid.block_{int(p[3]) + 1}." + ".".join(p[4:])
        name = ".".join(p[4:-1])
        return f"{p[0]}.mid.attn_1.{VAE_ATTN_TO_LDM[name]}.{p[-1]}"
    b = int(p[2])
    if p[1] == "down_blocks":
        if p[3] == "downsamplers":
            return f"encoder.down.{b}.downsample.conv.{p[-1]}"
        rest = ".".join(p[5:]).replace("conv_shortcut", "nin_shortcut")
        return f"encoder.down.{b}.block.{p[4]}.{rest}"
    if p[1] == "up_blocks":
        if p[3] == "upsamplers":
            return f"decoder.up.{n - 1 - b}.upsample.conv.{p[-1]}"
        rest = ".".join(p[5:]).replace("conv_shortcut", "nin_shortcut")
        return f"decoder.up.{n - 1 - b}.block.{p[4]}.{rest}"
    raise KeyError(k)


def write_single_file(out: Path, pipe, path: Path):
    """The pipeline as one original-layout (LDM) checkpoint, checked by converting it back with
    diffusers' own single-file converters."""
    from safetensors.torch import save_file
    from diffusers.loaders.single_file_utils import (convert_ldm_clip_checkpoint,
                                                     convert_ldm_unet_checkpoint,
                                                     convert_ldm_vae_checkpoint)
    ucfg, vcfg = dict(pipe.unet.config), dict(pipe.vae.config)
    unet_sd, vae_sd = pipe.unet.state_dict(), pipe.vae.state_dict()
    te_sd = pipe.text_encoder.state_dict()
    ldm = {}
    for k, t in unet_sd.items():
        ldm["model.diffusion_model." + unet_key_to_ldm(k, ucfg)] = t.contiguous()
    for k, t in vae_sd.items():
        lk = vae_key_to_ldm(k, vcfg)
        if ".mid.attn_1." in lk and t.dim() == 2:
            t = t[:, :, None, None]  # LDM keeps these as 1x1 convs
        ldm["first_stage_model." + lk] = t.contiguous()
    for k, t in te_sd.items():
        ldm["cond_stage_model.transformer.text_model." + k.removeprefix("text_model.")] = t.contiguous()
    back_u = convert_ldm_unet_checkpoint(ldm, ucfg)
    back_v = convert_ldm_vae_checkpoint(ldm, vcfg)
    back_t = convert_ldm_clip_checkpoint(ldm)
    assert back_u.keys() == unet_sd.keys() and all(torch.equal(back_u[k], unet_sd[k]) for k in unet_sd)
    assert back_v.keys() == vae_sd.keys(), set(back_v) ^ set(vae_sd)
    assert all(torch.equal(back_v[k].reshape(vae_sd[k].shape), vae_sd[k]) for k in vae_sd)
    assert {k.removeprefix("text_model.") for k in back_t} == {k.removeprefix("text_model.") for k in te_sd}
    save_file(ldm, path)


def run_recorded(pipe, steps: int, guidance: float, noise, step_noise, shapes: dict, prefix: str,
                 **kw):
    """Runs `pipe` with the given initial noise and per-step noise (Euler ancestral's and
    LCM's draws), recording every UNet call and the latents after every step as
    `{prefix}unet_in`, `{prefix}unet_out`, `{prefix}step_latents`; returns the final latents
    and the UNet's timesteps."""
    import diffusers.schedulers.scheduling_euler_ancestral_discrete as ea
    import diffusers.schedulers.scheduling_lcm as lcm_mod
    queue = list(step_noise)
    ea.randn_tensor = lcm_mod.randn_tensor = lambda *a, **k: queue.pop(0).clone()
    records, lat_steps = [], []
    hook = pipe.unet.register_forward_hook(
        lambda m, args, kwargs, out: records.append(
            (args[0].clone(), float(args[1]), out[0].clone())), with_kwargs=True)

    def on_step(p, i, t, kw):
        lat_steps.append(kw["latents"].clone())
        return kw
    latents = pipe(PROMPT, num_inference_steps=steps, guidance_scale=guidance,
                   latents=noise.clone(), output_type="latent", callback_on_step_end=on_step,
                   **kw).images
    hook.remove()
    save(f"{prefix}unet_in", torch.stack([r[0] for r in records]), shapes)
    save(f"{prefix}unet_out", torch.stack([r[2] for r in records]), shapes)
    save(f"{prefix}step_latents", torch.stack(lat_steps), shapes)
    return latents, [r[1] for r in records]


def tiled_vae_refs(pipe, shapes: dict):
    """diffusers' tiled VAE decode (tiles of 64 image / 8 latent pixels here, stride 6, blended
    over 16 pixels) of [1, 4, 10, 13] latents: 2 x 3 tiles, the last row 4 and the last column 1
    latent pixel(s) high/wide."""
    z = torch.randn((1, 4, 10, 13), generator=torch.Generator().manual_seed(14))
    with torch.no_grad():
        plain = pipe.vae.decode(z).sample
        pipe.vae.enable_tiling()
        tiled = pipe.vae.decode(z).sample
        pipe.vae.disable_tiling()
    assert tiled.shape == plain.shape and (tiled - plain).abs().max() > 1e-2
    save("vae_tiled_in", z, shapes)
    save("vae_tiled_out", tiled, shapes)


def turbo_refs(pipe, height: int, width: int, ref: dict, shapes: dict):
    """SD-Turbo-style runs: guidance 0 (one UNet pass per step, no negative prompt) with
    `trailing` timesteps, Euler in 1 step and Euler ancestral in 4 (recorded noise)."""
    saved = pipe.scheduler
    noise = torch.from_numpy(np.load(REF / "init_noise.npy"))
    lat = (1, 4, height // 8, width // 8)
    ref["turbo"] = {}
    for name, cls, steps in (("euler_trailing_1", EulerDiscreteScheduler, 1),
                             ("euler_a_trailing_4", EulerAncestralDiscreteScheduler, 4)):
        pipe.scheduler = cls.from_config(saved.config, timestep_spacing="trailing")
        step_noise = torch.randn((steps,) + lat, generator=torch.Generator().manual_seed(10))
        save(f"turbo_{name}_step_noise", step_noise, shapes)
        with torch.no_grad():
            _, ts = run_recorded(pipe, steps, 0.0, noise, step_noise, shapes, f"turbo_{name}_")
        config = {k: v for k, v in dict(pipe.scheduler.config).items() if not k.startswith("_")}
        config["_class_name"] = cls.__name__
        ref["turbo"][name] = dict(config=config, steps=steps, guidance_scale=0.0,
                                  timesteps=[float(t) for t in pipe.scheduler.timesteps],
                                  unet_timesteps=ts)
    pipe.scheduler = saved


# The batched run: images per prompt, and a non-square size.
BATCH = 3
BATCH_HEIGHT, BATCH_WIDTH = 48, 64


def batch_refs(pipe, ref: dict, shapes: dict):
    """`BATCH` images of one prompt in one call (`num_images_per_prompt`: the UNet runs on
    [BATCH negative; BATCH prompt]) with guidance, Euler ancestral (the folder's Euler config),
    at 48x64, fed recorded initial noise `batch_init_noise` [BATCH, 4, 6, 8] and per-step noise
    `batch_step_noise` [steps, BATCH, 4, 6, 8] (one draw of the whole batch per step, as
    diffusers draws it); writes the latents after every step, the final latents and the VAE's
    images. New files only: every other reference is unchanged by it."""
    import diffusers.schedulers.scheduling_euler_ancestral_discrete as ea
    saved = pipe.scheduler
    pipe.scheduler = EulerAncestralDiscreteScheduler.from_config(saved.config)
    lat = (BATCH, 4, BATCH_HEIGHT // 8, BATCH_WIDTH // 8)
    g = torch.Generator().manual_seed(15)
    noise = torch.randn(lat, generator=g)
    step_noise = torch.randn((STEPS,) + lat, generator=g)
    save("batch_init_noise", noise, shapes)
    save("batch_step_noise", step_noise, shapes)
    queue = list(step_noise)
    ea.randn_tensor = lambda *a, **k: queue.pop(0).clone()
    lat_steps = []

    def on_step(p, i, t, kw):
        lat_steps.append(kw["latents"].clone())
        return kw
    with torch.no_grad():
        latents = pipe(PROMPT, negative_prompt=NEGATIVE, num_images_per_prompt=BATCH,
                       num_inference_steps=STEPS, guidance_scale=GUIDANCE, height=BATCH_HEIGHT,
                       width=BATCH_WIDTH, latents=noise.clone(), output_type="latent",
                       callback_on_step_end=on_step).images
        assert not queue and latents.shape == lat
        save("batch_step_latents", torch.stack(lat_steps), shapes)  # [S, BATCH, 4, 6, 8]
        save("batch_final_latents", latents, shapes)
        save("batch_image", pipe.vae.decode(latents / pipe.vae.config.scaling_factor).sample,
             shapes)  # [BATCH, 3, 48, 64]
    ref["batch"] = dict(images=BATCH, height=BATCH_HEIGHT, width=BATCH_WIDTH, steps=STEPS,
                        guidance_scale=GUIDANCE, scheduler="EulerAncestralDiscreteScheduler",
                        timesteps=[float(t) for t in pipe.scheduler.timesteps])
    pipe.scheduler = saved


def make_lcm():
    """tests/fixtures/tiny_lcm: tiny_sd1's text encoder, tokenizer and VAE with an LCM-distilled
    style UNet (`time_cond_proj_dim` 32: the guidance scale's embedding enters the timestep
    embedding) and an LCMScheduler, as a LatentConsistencyModelPipeline; references of a 4-step
    run at guidance 8.5 with recorded noise."""
    global OUT, REF
    src = ROOT / "tests" / "fixtures" / "tiny_sd1"
    OUT = ROOT / "tests" / "fixtures" / "tiny_lcm"
    REF = OUT / "reference"
    if OUT.exists():
        shutil.rmtree(OUT)
    REF.mkdir(parents=True)
    base = StableDiffusionPipeline.from_pretrained(src, torch_dtype=torch.float32)
    ucfg = {k: v for k, v in dict(base.unet.config).items() if not k.startswith("_")}
    ucfg["time_cond_proj_dim"] = 32
    torch.manual_seed(11)
    unet = UNet2DConditionModel(**ucfg)
    g = torch.Generator().manual_seed(12)
    with torch.no_grad():
        for p in unet.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    sched = LCMScheduler(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012,
                         beta_schedule="scaled_linear", original_inference_steps=50,
                         set_alpha_to_one=True, steps_offset=1, clip_sample=False,
                         timestep_scaling=10.0)
    pipe = LatentConsistencyModelPipeline(
        vae=base.vae, text_encoder=base.text_encoder, tokenizer=base.tokenizer, unet=unet,
        scheduler=sched, safety_checker=None, feature_extractor=None,
        requires_safety_checker=False)
    pipe.save_pretrained(OUT, safe_serialization=True)
    # transformers saves tokenizer.json only: ship tiny_sd1's vocab.json + merges.txt instead.
    shutil.rmtree(OUT / "tokenizer")
    shutil.copytree(src / "tokenizer", OUT / "tokenizer")
    pipe = LatentConsistencyModelPipeline.from_pretrained(OUT, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    height = width = 64
    steps, guidance = 4, 8.5
    shapes: dict = {}
    ref: dict = dict(
        versions=dict(diffusers=diffusers.__version__, transformers=transformers.__version__,
                      torch=torch.__version__),
        prompt=PROMPT, steps=steps, guidance_scale=guidance, height=height, width=width,
        files=shapes)
    lat = (1, 4, height // 8, width // 8)
    noise = torch.randn(lat, generator=torch.Generator().manual_seed(5))
    step_noise = torch.randn((steps,) + lat, generator=torch.Generator().manual_seed(8))
    save("init_noise", noise, shapes)
    save("step_noise", step_noise, shapes)
    with torch.no_grad():
        w = torch.tensor([guidance - 1.0])
        save("w_embedding", pipe.get_guidance_scale_embedding(w, embedding_dim=32)[0], shapes)
        latents, ts = run_recorded(pipe, steps, guidance, noise, step_noise, shapes, "")
        ref["unet_timesteps"] = ts
        ref["timesteps"] = [float(t) for t in pipe.scheduler.timesteps]
        save("final_latents", latents, shapes)
        save("image", pipe.vae.decode(latents / pipe.vae.config.scaling_factor).sample, shapes)
    (REF / "reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False))
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"wrote {OUT} ({total / 1e6:.2f} MB)")


def make_lcm_img2img():
    """Image-to-image references on the existing tests/fixtures/tiny_lcm (read, not rewritten):
    LatentConsistencyModelImg2ImgPipeline at guidance 8.5 on a smooth random 64x64 image, the
    posterior's sampling noise, the added noise and the per-step noise given. Writes only
    reference/i2i_*.npy and the key `img2img` of reference.json (the rest kept): per case
    (`s05`: 3 steps at strength 0.5, one image; `s08`: 4 steps at strength 0.8, two images of
    one posterior sample) its timesteps, the latents after every step, the final latents and
    the images."""
    global OUT, REF
    import diffusers.models.autoencoders.vae as vae_mod
    import diffusers.pipelines.latent_consistency_models.pipeline_latent_consistency_img2img as i2i
    import diffusers.schedulers.scheduling_lcm as lcm_mod
    from diffusers import LatentConsistencyModelImg2ImgPipeline
    OUT = ROOT / "tests" / "fixtures" / "tiny_lcm"
    REF = OUT / "reference"
    ref = json.loads((REF / "reference.json").read_text())
    shapes = ref["files"]
    pipe = LatentConsistencyModelImg2ImgPipeline.from_pretrained(OUT, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    height, width, guidance = ref["height"], ref["width"], ref["guidance_scale"]
    g = torch.Generator().manual_seed(21)
    small = torch.rand((1, 3, height // 8, width // 8), generator=g)
    image01 = torch.nn.functional.interpolate(small, size=(height, width), mode="bilinear",
                                              align_corners=False).clamp(0, 1)
    save("i2i_input", image01 * 2 - 1, shapes)  # [-1, 1], what the VAE encodes
    lat = (4, height // 8, width // 8)
    enc_noise = torch.randn((1,) + lat, generator=g)
    save("i2i_enc_noise", enc_noise, shapes)
    cases = {}
    for name, steps, strength, batch in [("s05", 3, 0.5, 1), ("s08", 4, 0.8, 2)]:
        noise = torch.randn((batch,) + lat, generator=g)
        step_noise = torch.randn((steps, batch) + lat, generator=g)
        save(f"i2i_{name}_noise", noise, shapes)
        save(f"i2i_{name}_step_noise", step_noise, shapes)
        vae_mod.randn_tensor = lambda *a, **k: enc_noise.clone()
        i2i.randn_tensor = lambda *a, _n=noise, **k: _n.clone()
        queue = list(step_noise)
        lcm_mod.randn_tensor = lambda *a, **k: queue.pop(0).clone()
        lat_steps = []

        def on_step(p, i, t, kw):
            lat_steps.append(kw["latents"].clone())
            return kw
        with torch.no_grad():
            out = pipe(PROMPT, image=image01, strength=strength, num_inference_steps=steps,
                       guidance_scale=guidance, num_images_per_prompt=batch,
                       output_type="latent", callback_on_step_end=on_step).images
            save(f"i2i_{name}_step_latents", torch.stack(lat_steps), shapes)
            save(f"i2i_{name}_final_latents", out, shapes)
            save(f"i2i_{name}_image",
                 pipe.vae.decode(out / pipe.vae.config.scaling_factor).sample, shapes)
        cases[name] = dict(steps=steps, strength=strength, batch=batch,
                           timesteps=[float(t) for t in pipe.scheduler.timesteps])
    ref["img2img"] = dict(cases=cases, note="one posterior sample (i2i_enc_noise) for every "
                          "image; i2i_<case>_noise is added at the first timestep; step k of "
                          "i2i_<case>_step_noise is LCM's noise after step k (the last unused)")
    (REF / "reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False))
    print(f"wrote {REF} img2img references")


def make_sd1_lcm_img2img():
    """tiny_sd1 (a UNet without `time_cond_proj_dim`, as an LCM-LoRA fused into SD 1.5) with
    tiny_lcm's LCMScheduler in StableDiffusionImg2ImgPipeline: strength 0.75 of 4 steps at
    guidance 7.5 with the negative prompt, on tiny_sd1's img2img_input with its encode and added
    noise. Writes only tests/fixtures/tiny_sd1/reference/img2img_lcm_*.npy and the key
    `img2img_lcm` of its reference.json (the rest kept)."""
    global OUT, REF
    import diffusers.models.autoencoders.vae as vae_mod
    import diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion_img2img as i2i
    import diffusers.schedulers.scheduling_lcm as lcm_mod
    from diffusers import StableDiffusionImg2ImgPipeline
    OUT = ROOT / "tests" / "fixtures" / "tiny_sd1"
    REF = OUT / "reference"
    ref = json.loads((REF / "reference.json").read_text())
    shapes = ref["files"]
    pipe = StableDiffusionImg2ImgPipeline.from_pretrained(OUT, dtype=torch.float32)
    pipe.scheduler = LCMScheduler.from_pretrained(ROOT / "tests" / "fixtures" / "tiny_lcm",
                                                  subfolder="scheduler")
    pipe.set_progress_bar_config(disable=True)
    ld = lambda n: torch.from_numpy(np.load(REF / f"{n}.npy"))
    image = ld("img2img_input")
    enc_noise, add_noise = ld("img2img_enc_noise"), ld("img2img_noise")
    steps, strength = STEPS, 0.75
    step_noise = torch.randn((steps,) + tuple(add_noise.shape),
                             generator=torch.Generator().manual_seed(23))
    save("img2img_lcm_step_noise", step_noise, shapes)
    vae_mod.randn_tensor = lambda *a, **k: enc_noise.clone()
    i2i.randn_tensor = lambda *a, **k: add_noise.clone()
    queue = list(step_noise)
    lcm_mod.randn_tensor = lambda *a, **k: queue.pop(0).clone()
    with torch.no_grad():
        out = pipe(PROMPT, image=(image + 1) / 2, strength=strength, negative_prompt=NEGATIVE,
                   num_inference_steps=steps, guidance_scale=GUIDANCE,
                   output_type="latent").images
        save("img2img_lcm_latents", out, shapes)
        save("img2img_lcm_image", pipe.vae.decode(out / pipe.vae.config.scaling_factor).sample,
             shapes)
    ref["img2img_lcm"] = dict(strength=strength, steps=steps,
                              timesteps=[float(t) for t in pipe.scheduler.timesteps],
                              note="timesteps: the whole schedule, of which the last 3 run; step k of "
                              "img2img_lcm_step_noise follows the k-th step run")
    (REF / "reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False))
    print(f"wrote {REF} img2img_lcm references")


SINGLE = {
    # Geometries that follow the families' fixed values the single-file loader assumes (32 norm
    # groups; SD 1.x: 8 UNet heads, epsilon; SD 2.x: 64-wide UNet heads, v-prediction; 64-wide
    # text heads), small otherwise: a 2-level VAE (latents 1/2 of the image).
    # SD 2.x's 64-wide heads need 64 channels: one UNet level (no down/up sampling) keeps it small.
    "sd1": dict(act="quick_gelu", tokenizer="tiny_sd1", unet_ch=(32, 32), heads=8, linear_proj=False,
                prediction="epsilon", open_clip=False,
                down=("CrossAttnDownBlock2D", "DownBlock2D"), up=("UpBlock2D", "CrossAttnUpBlock2D")),
    "sd2": dict(act="gelu", tokenizer="tiny_sd2", unet_ch=(64,), heads=1, linear_proj=True,
                prediction="v_prediction", open_clip=True,
                down=("DownBlock2D",), up=("UpBlock2D",)),
}


def open_clip_ldm(te, g) -> dict:
    """transformers' CLIP text model under OpenCLIP's LDM names (cond_stage_model.model.*), q/k/v
    fused into in_proj, plus what SD 2.x files also carry and diffusers drops: one more (last)
    residual block, whose output SD 2.x does not use, and a text projection."""
    sd = {k.removeprefix("text_model."): t for k, t in te.state_dict().items()}
    out = {"token_embedding.weight": sd["embeddings.token_embedding.weight"],
           "positional_embedding": sd["embeddings.position_embedding.weight"],
           "ln_final.weight": sd["final_layer_norm.weight"], "ln_final.bias": sd["final_layer_norm.bias"]}
    n = te.config.num_hidden_layers
    for i in range(n + 1):
        def get(name):
            key = f"encoder.layers.{i}.{name}"
            if i < n:
                return sd[key]
            ref = sd[f"encoder.layers.0.{name}"]
            return torch.randn(ref.shape, generator=g) * 0.1
        b = f"transformer.resblocks.{i}."
        for t in ("weight", "bias"):
            out[b + f"ln_1.{t}"] = get(f"layer_norm1.{t}")
            out[b + f"ln_2.{t}"] = get(f"layer_norm2.{t}")
            out[b + f"attn.in_proj_{t}"] = torch.cat([get(f"self_attn.{p}_proj.{t}") for p in "qkv"])
            out[b + f"attn.out_proj.{t}"] = get(f"self_attn.out_proj.{t}")
            out[b + f"mlp.c_fc.{t}"] = get(f"mlp.fc1.{t}")
            out[b + f"mlp.c_proj.{t}"] = get(f"mlp.fc2.{t}")
    d = te.config.hidden_size
    out["text_projection"] = torch.randn((d, d), generator=g) * 0.1
    return {"cond_stage_model.model." + k: t for k, t in out.items()}


def make_single_files():
    """tests/fixtures/tiny_sd_single/{sd1,sd2}.safetensors: tiny pipelines saved only as LDM
    single files in float16 (weights rounded to float16 first, so the float32 references see the
    same values), SD 1.x with CLIP's layout and SD 2.x with OpenCLIP's (fused in_proj, an extra
    last block), each checked by diffusers' own converters; references of a 2-step Euler run
    (16 x 24 image, guidance 7.5) with the default scheduler the family's single files get."""
    from safetensors.torch import save_file
    from diffusers.loaders.single_file_utils import (convert_ldm_unet_checkpoint,
                                                     convert_ldm_vae_checkpoint,
                                                     convert_open_clip_checkpoint)
    out_dir = ROOT / "tests" / "fixtures" / "tiny_sd_single"
    if out_dir.exists():
        shutil.rmtree(out_dir)
    ref_dir = out_dir / "reference"
    ref_dir.mkdir(parents=True)
    global REF
    REF = ref_dir
    shapes: dict = {}
    ref: dict = dict(versions=dict(diffusers=diffusers.__version__,
                                   transformers=transformers.__version__, torch=torch.__version__),
                     prompt=PROMPT, negative_prompt=NEGATIVE, steps=2, guidance_scale=GUIDANCE,
                     height=16, width=24, files=shapes)
    for fam, v in SINGLE.items():
        tok = CLIPTokenizer.from_pretrained(ROOT / "tests" / "fixtures" / v["tokenizer"] / "tokenizer")
        torch.manual_seed(20)
        te = CLIPTextModel(CLIPTextConfig(
            vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=1, max_position_embeddings=77, hidden_act=v["act"],
            layer_norm_eps=1e-5, projection_dim=64, bos_token_id=len(tok) - 2,
            eos_token_id=len(tok) - 1, pad_token_id=len(tok) - 1))
        torch.manual_seed(21)
        unet = UNet2DConditionModel(
            sample_size=8, in_channels=4, out_channels=4, block_out_channels=v["unet_ch"],
            layers_per_block=1, norm_num_groups=32, cross_attention_dim=64,
            attention_head_dim=v["heads"], down_block_types=v["down"], up_block_types=v["up"],
            use_linear_projection=v["linear_proj"])
        torch.manual_seed(22)
        vae = AutoencoderKL(
            in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 32),
            down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
            layers_per_block=1, norm_num_groups=32, sample_size=32)
        g = torch.Generator().manual_seed(23)
        with torch.no_grad():
            for m in (te, unet, vae):
                for p in m.parameters():
                    p.add_(torch.randn(p.shape, generator=g) * 0.05)
                    p.copy_(p.half().float())
        sched = EulerDiscreteScheduler(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012,
                                       beta_schedule="scaled_linear", steps_offset=1,
                                       prediction_type=v["prediction"], timestep_spacing="linspace")
        pipe = StableDiffusionPipeline(vae=vae, text_encoder=te, tokenizer=tok, unet=unet,
                                       scheduler=sched, safety_checker=None, feature_extractor=None,
                                       requires_safety_checker=False)
        pipe.set_progress_bar_config(disable=True)
        ucfg, vcfg = dict(unet.config), dict(vae.config)
        ldm = {}
        for k, t in unet.state_dict().items():
            ldm["model.diffusion_model." + unet_key_to_ldm(k, ucfg)] = t
        for k, t in vae.state_dict().items():
            lk = vae_key_to_ldm(k, vcfg)
            if ".mid.attn_1." in lk and t.dim() == 2:
                t = t[:, :, None, None]
            ldm["first_stage_model." + lk] = t
        if v["open_clip"]:
            ldm.update(open_clip_ldm(te, g))
            strip = lambda d: {k.removeprefix("text_model."): t for k, t in d.items()}
            back = strip(convert_open_clip_checkpoint(te, ldm))
            te_sd = strip(te.state_dict())
            extra = {k for k in back if k not in te_sd}
            assert all(f"layers.{te.config.num_hidden_layers}." in k for k in extra), extra
            assert all(torch.equal(back[k], te_sd[k]) for k in te_sd), "open_clip round trip"
        else:
            for k, t in te.state_dict().items():
                ldm["cond_stage_model.transformer.text_model." + k.removeprefix("text_model.")] = t
        back_u = convert_ldm_unet_checkpoint(ldm, ucfg)
        assert all(torch.equal(back_u[k], t) for k, t in unet.state_dict().items())
        back_v = convert_ldm_vae_checkpoint(ldm, vcfg)
        assert all(torch.equal(back_v[k].reshape(t.shape), t) for k, t in vae.state_dict().items())
        save_file({k: t.half().contiguous() for k, t in ldm.items()}, out_dir / f"{fam}.safetensors")
        h, w = ref["height"], ref["width"]
        noise = torch.randn((1, 4, h // 2, w // 2), generator=torch.Generator().manual_seed(24))
        save(f"{fam}_init_noise", noise, shapes)
        with torch.no_grad():
            ids = tok([PROMPT], padding="max_length", max_length=77, truncation=True,
                      return_tensors="pt").input_ids
            save(f"{fam}_text_embeddings", te(ids)[0], shapes)
            lat = pipe(PROMPT, negative_prompt=NEGATIVE, num_inference_steps=2,
                       guidance_scale=GUIDANCE, height=h, width=w, latents=noise.clone(),
                       output_type="latent").images
            save(f"{fam}_final_latents", lat, shapes)
            save(f"{fam}_image", vae.decode(lat / vae.config.scaling_factor).sample, shapes)
        ref[fam] = dict(unet=ucfg["block_out_channels"], timesteps=[float(t) for t in sched.timesteps])
    (ref_dir / "reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False, default=list))
    total = sum(f.stat().st_size for f in out_dir.rglob("*") if f.is_file())
    print(f"wrote {out_dir} ({total / 1e6:.2f} MB)")


def make(name: str, v: dict):
    global OUT, REF
    OUT = ROOT / "tests" / "fixtures" / name
    REF = OUT / "reference"
    HEIGHT, WIDTH = v["height"], v["width"]
    torch.manual_seed(0)
    if OUT.exists():
        shutil.rmtree(OUT)
    REF.mkdir(parents=True)
    vocab_size = write_tokenizer(OUT / "tokenizer", v["pad"])
    tok = CLIPTokenizer.from_pretrained(OUT / "tokenizer")

    torch.manual_seed(1)
    te = CLIPTextModel(CLIPTextConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, max_position_embeddings=77, hidden_act=v["act"],
        layer_norm_eps=1e-5, projection_dim=32,
        bos_token_id=vocab_size - 2, eos_token_id=vocab_size - 1, pad_token_id=vocab_size - 1))
    torch.manual_seed(2)
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, block_out_channels=(16, 32),
        layers_per_block=1, norm_num_groups=8, cross_attention_dim=32,
        attention_head_dim=v["heads"], down_block_types=v["down"], up_block_types=v["up"],
        use_linear_projection=v["linear_proj"])
    torch.manual_seed(3)
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8, 16, 16, 16),
        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
        layers_per_block=1, norm_num_groups=4, sample_size=64)
    # Random init leaves some parameters at exact constants (norm gains 1, biases 0, zero-init
    # output convs): perturb every parameter so each one matters to the outputs.
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for m in (te, unet, vae):
            for p in m.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.05)
    cls, extra = v["scheduler"]
    sched = cls(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012,
                beta_schedule="scaled_linear", steps_offset=1, **extra)
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=te, tokenizer=tok, unet=unet,
                                   scheduler=sched, safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)
    pipe.save_pretrained(OUT, safe_serialization=True)
    # Real SD folders ship vocab.json + merges.txt only: test that path.
    (OUT / "tokenizer" / "tokenizer.json").unlink()
    pipe = StableDiffusionPipeline.from_pretrained(OUT, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)

    shapes: dict = {}
    ref: dict = dict(
        versions=dict(diffusers=diffusers.__version__, transformers=transformers.__version__,
                      torch=torch.__version__),
        prompt=PROMPT, negative_prompt=NEGATIVE, steps=STEPS, guidance_scale=GUIDANCE,
        height=HEIGHT, width=WIDTH, files=shapes)
    ref["tokenizer_cases"] = [
        dict(text=s, ids=tok(s, padding="max_length", max_length=77, truncation=True).input_ids)
        for s in TOKENIZER_CASES]

    with torch.no_grad():
        ids = tok([NEGATIVE, PROMPT], padding="max_length", max_length=77, truncation=True,
                  return_tensors="pt").input_ids
        emb = pipe.text_encoder(ids)[0]
        save("text_embeddings", emb, shapes)  # [2, 77, 32]: negative, prompt

        noise = torch.randn((1, 4, HEIGHT // 8, WIDTH // 8), generator=torch.Generator().manual_seed(5))
        save("init_noise", noise, shapes)
        records = []
        hook = pipe.unet.register_forward_hook(
            lambda m, args, kwargs, out: records.append(
                (args[0].clone(), float(args[1]), out[0].clone())), with_kwargs=True)
        # Euler ancestral draws fresh noise each step: hand it recorded noise instead.
        step_noise = torch.randn((STEPS, 1, 4, HEIGHT // 8, WIDTH // 8),
                                 generator=torch.Generator().manual_seed(8))
        if cls is EulerAncestralDiscreteScheduler:
            save("step_noise", step_noise, shapes)
        import diffusers.schedulers.scheduling_euler_ancestral_discrete as ea
        queue = list(step_noise)
        ea.randn_tensor = lambda *a, **k: queue.pop(0).clone()
        lat_steps = []
        def on_step(p, i, t, kw):
            lat_steps.append(kw["latents"].clone())
            return kw
        latents = pipe(PROMPT, negative_prompt=NEGATIVE, num_inference_steps=STEPS,
                       guidance_scale=GUIDANCE, height=HEIGHT, width=WIDTH, latents=noise.clone(),
                       output_type="latent", callback_on_step_end=on_step).images
        hook.remove()
        save("unet_in", torch.stack([r[0] for r in records]), shapes)  # [S, 2, 4, 8, 8]
        save("unet_out", torch.stack([r[2] for r in records]), shapes)
        ref["unet_timesteps"] = [r[1] for r in records]
        save("step_latents", torch.stack(lat_steps), shapes)  # [S, 1, 4, 8, 8]
        save("final_latents", latents, shapes)
        image = pipe.vae.decode(latents / pipe.vae.config.scaling_factor).sample
        save("image", image, shapes)  # [1, 3, 64, 64], raw decoder output
        ref["timesteps"] = [float(t) for t in pipe.scheduler.timesteps]

        # A VAE decode on its own, of larger-valued latents.
        z = torch.randn((1, 4, 3, 5), generator=torch.Generator().manual_seed(6))
        save("vae_in", z, shapes)
        save("vae_out", pipe.vae.decode(z).sample, shapes)

    img2img_refs(OUT, HEIGHT, WIDTH, ref, shapes)
    if name == "tiny_sd1":
        # Its own folder: with it inside tiny_sd1 that fixture would pass 3 MB.
        ldm_dir = ROOT / "tests" / "fixtures" / "tiny_sd1_ldm"
        ldm_dir.mkdir(exist_ok=True)
        write_single_file(OUT, pipe, ldm_dir / "tiny_sd1.safetensors")
        # The UNet stored in float16 (diffusers' fp16 variant file), to check half-precision
        # loading against the float32 references.
        UNet2DConditionModel.from_pretrained(OUT / "unet").to(torch.float16).save_pretrained(
            REF / "unet_fp16", variant="fp16")
        # No machine-specific path in the fixture.
        cfg_path = REF / "unet_fp16" / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg.pop("_name_or_path", None)
        cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    if name == "tiny_sd1":
        tiled_vae_refs(pipe, shapes)
        ref["schedulers"] = scheduler_refs(shapes)
        turbo_refs(pipe, HEIGHT, WIDTH, ref, shapes)
        batch_refs(pipe, ref, shapes)
    (REF / "reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False))
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"wrote {OUT} ({total / 1e6:.2f} MB)")


def make_tiled_encode_refs():
    """tiny_sd1's tiled VAE encode (diffusers' `_tiled_encode`: tiles of 64 image pixels, stride
    48, moments blended over 2 latent pixels and cropped to 6) of an 80 x 104 image (2 x 3 tiles,
    the last row 32 and the last column 8 pixels), and an image-to-image run of it with
    `vae.enable_tiling()` (so the decode tiles too) and recorded noise. Loads the existing
    fixture and writes only the `vae_tiled_enc_*` files and their keys in reference.json (run:
    `make_tiny_sd.py tiled-encode`)."""
    global OUT, REF
    import diffusers.models.autoencoders.vae as vae_mod
    import diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion_img2img as i2i
    from diffusers import StableDiffusionImg2ImgPipeline
    OUT = ROOT / "tests" / "fixtures" / "tiny_sd1"
    REF = OUT / "reference"
    ref = json.loads((REF / "reference.json").read_text())
    shapes = ref["files"]
    height, width = 80, 104
    pipe = StableDiffusionImg2ImgPipeline.from_pretrained(OUT, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    g = torch.Generator().manual_seed(15)
    small = torch.rand((1, 3, height // 8, width // 8), generator=g)
    image01 = torch.nn.functional.interpolate(small, size=(height, width), mode="bilinear",
                                              align_corners=False).clamp(0, 1)
    lat = (1, 4, height // 8, width // 8)
    enc_noise = torch.randn(lat, generator=g)
    add_noise = torch.randn(lat, generator=g)
    save("vae_tiled_enc_input", image01 * 2 - 1, shapes)
    save("vae_tiled_enc_noise", enc_noise, shapes)
    save("vae_tiled_enc_add_noise", add_noise, shapes)
    with torch.no_grad():
        plain = pipe.vae.encode(image01 * 2 - 1).latent_dist
        pipe.vae.enable_tiling()
        post = pipe.vae.encode(image01 * 2 - 1).latent_dist
        assert (post.mean - plain.mean).abs().max() > 1e-2
        save("vae_tiled_enc_mean", post.mean, shapes)
        save("vae_tiled_enc_std", post.std, shapes)
        vae_mod.randn_tensor = lambda *a, **k: enc_noise.clone()
        i2i.randn_tensor = lambda *a, **k: add_noise.clone()
        lat_out = pipe(PROMPT, image=image01, strength=0.75, negative_prompt=NEGATIVE,
                       num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                       output_type="latent").images
        save("vae_tiled_enc_img2img_latents", lat_out, shapes)
        save("vae_tiled_enc_img2img_image",
             pipe.vae.decode(lat_out / pipe.vae.config.scaling_factor).sample, shapes)
    ref["vae_tiled_encode"] = dict(height=height, width=width, strength=0.75, steps=STEPS,
                                   note="tiled encode and decode (vae.enable_tiling())")
    (REF / "reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False))
    print(f"wrote {REF} vae_tiled_enc_*")


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["tiled-encode"]:
        make_tiled_encode_refs()
        sys.exit()
    if sys.argv[1:] == ["single-variants"]:
        # Only tests/fixtures/tiny_sd_single_variants/ (make_sd_single_variants.py).
        sys.path.insert(0, str(Path(__file__).parent))
        from make_sd_single_variants import main as make_single_variants
        make_single_variants()
        sys.exit()
    for name, v in VARIANTS.items():
        make(name, v)
    make_lcm()
    make_lcm_img2img()
    make_sd1_lcm_img2img()
    make_single_files()
