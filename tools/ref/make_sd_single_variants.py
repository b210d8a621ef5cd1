#!/usr/bin/env python3
"""Single-file model types as diffusers 0.42 infers them, and diffusers' runs of the tiny single
files loaded with `from_single_file`. Writes only tests/fixtures/tiny_sd_single_variants/ (the
tiny files themselves are tests/fixtures/tiny_sd_single/{sd1,sd2}.safetensors, made by
make_tiny_sd.py's make_single_files; this script reads them and never rewrites them).

1. model_types.json: the LDM tensor shapes (`shapes`; an inpainting entry has its base's
   `shapes_of` with `changed_shapes`) of the real geometries (SD 1.5, SD 2.1, the SD 1.5 and
   SD 2 inpainting UNets with 9 input channels), built on torch's meta device (no weights) under
   the LDM names make_tiny_sd.py maps to (checked there against diffusers' converters), with
   what diffusers decides from them: `infer_diffusers_model_type`, the hub repo of
   `DIFFUSERS_DEFAULT_PIPELINE_PATHS`, the UNet and VAE configs of
   `create_unet_diffusers_config_from_ldm` / `create_vae_diffusers_config_from_ldm` (given the
   original LDM inference yaml of each model, as `original_config=`), and the prediction type of
   `_legacy_load_scheduler` (a safetensors file has no `global_step`). The text encoder's
   geometry is the hub's (openai/clip-vit-large-patch14; SD 2.x's OpenCLIP ViT-H with 23 of its 24
   blocks): not read from a file here, so only the shapes the engine infers from are checked.

2. reference/*.npy: `StableDiffusionPipeline.from_single_file(file, config=DIR,
   local_files_only=True)` of the tiny files (diffusers cannot reach the hub here, and the hub
   repos' configs are the real geometry, which the tiny files do not have), where DIR is a
   diffusers folder of configs only (no weights) holding what a model type's hub repo holds with
   the tiny file's sizes: the family's fixed values (8 UNet heads or 64-wide heads, 64-wide text
   heads, 32 groups, scaling factor 0.18215, the scaled_linear 0.00085-0.012 schedule with
   steps_offset 1), the tiny tokenizer of tiny_sd1 padded as the family pads, and an Euler
   scheduler (linspace). Runs, 2 steps at guidance 7.5, 24 x 16, the initial noise of
   tiny_sd_single/reference/{fam}_init_noise.npy:
     sd1       v1 (epsilon)
     sd2       v2 as stable-diffusion-2-1 (v_prediction)
     sd2_base  the SD 2.x file as an epsilon model with `leading` spacing (SD 2.x base / SD-Turbo
               style: what diffusers cannot tell from the file, so the engine takes
               --prediction-type epsilon --timestep-spacing leading)

Run from the repository root:
  ~/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_sd.py single-variants
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
import diffusers
import transformers
from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel
from diffusers.loaders import single_file_utils as sfu
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

import make_tiny_sd as base

ROOT = base.ROOT
OUT = ROOT / "tests" / "fixtures" / "tiny_sd_single_variants"
SINGLE = ROOT / "tests" / "fixtures" / "tiny_sd_single"

# The original LDM inference configs (v1-inference.yaml, v2-inference-v.yaml,
# v1-inpainting-inference.yaml, v2-inpainting-inference.yaml of the Stability / RunwayML repos):
# only the fields diffusers' create_*_config_from_ldm read.
VAE_DD = dict(double_z=True, z_channels=4, resolution=256, in_channels=3, out_ch=3, ch=128,
              ch_mult=[1, 2, 4, 4], num_res_blocks=2, attn_resolutions=[], dropout=0.0)


def ldm_yaml(in_channels: int, v2: bool) -> dict:
    unet = dict(image_size=32, in_channels=in_channels, out_channels=4, model_channels=320,
                attention_resolutions=[4, 2, 1], num_res_blocks=2, channel_mult=[1, 2, 4, 4],
                transformer_depth=1, context_dim=1024 if v2 else 768, use_checkpoint=True,
                legacy=False)
    if v2:
        unet.update(num_head_channels=64, use_linear_in_transformer=True)
    else:
        unet.update(num_heads=8)
    return {"model": {"params": {"linear_start": 0.00085, "linear_end": 0.012, "timesteps": 1000,
                                 "scale_factor": 0.18215, "unet_config": {"params": unet},
                                 "first_stage_config": {"params": {"ddconfig": VAE_DD}}}}}


def meta_checkpoint(v2: bool, in_channels: int) -> dict:
    """LDM name -> meta tensor of the real geometry."""
    with torch.device("meta"):
        unet = UNet2DConditionModel(
            sample_size=96 if v2 else 64, in_channels=in_channels, out_channels=4,
            block_out_channels=(320, 640, 1280, 1280), layers_per_block=2,
            cross_attention_dim=1024 if v2 else 768,
            attention_head_dim=[5, 10, 20, 20] if v2 else 8, use_linear_projection=v2)
        vae = AutoencoderKL(block_out_channels=(128, 256, 512, 512), layers_per_block=2,
                            down_block_types=("DownEncoderBlock2D",) * 4,
                            up_block_types=("UpDecoderBlock2D",) * 4, latent_channels=4)
        te = CLIPTextModel(CLIPTextConfig(
            vocab_size=49408, hidden_size=1024 if v2 else 768,
            intermediate_size=4096 if v2 else 3072, num_hidden_layers=23 if v2 else 12,
            num_attention_heads=16 if v2 else 12, max_position_embeddings=77,
            hidden_act="gelu" if v2 else "quick_gelu", projection_dim=1024 if v2 else 768))
    ucfg, vcfg = dict(unet.config), dict(vae.config)
    ck = {}
    for k, t in unet.state_dict().items():
        ck["model.diffusion_model." + base.unet_key_to_ldm(k, ucfg)] = t
    for k, t in vae.state_dict().items():
        lk = base.vae_key_to_ldm(k, vcfg)
        if ".mid.attn_1." in lk and t.dim() == 2:
            t = t[:, :, None, None]
        ck["first_stage_model." + lk] = t
    if v2:
        ck.update(base.open_clip_ldm(te, torch.Generator().manual_seed(0)))
    else:
        for k, t in te.state_dict().items():
            ck["cond_stage_model.transformer.text_model." + k.removeprefix("text_model.")] = t
    return ck


def model_types() -> dict:
    out = {}
    for name, v2, cin in (("sd15", False, 4), ("sd21", True, 4), ("sd15_inpainting", False, 9),
                          ("sd2_inpainting", True, 9)):
        ck = meta_checkpoint(v2, cin)
        kind = sfu.infer_diffusers_model_type(ck)
        yaml = ldm_yaml(cin, v2)
        unet = sfu.create_unet_diffusers_config_from_ldm(yaml, ck)
        vae = sfu.create_vae_diffusers_config_from_ldm(yaml, ck)
        sched = sfu._legacy_load_scheduler(EulerDiscreteScheduler, ck, "scheduler")
        out[name] = dict(
            model_type=kind, hub=sfu.DIFFUSERS_DEFAULT_PIPELINE_PATHS[kind]["pretrained_model_name_or_path"],
            image_size=sfu.DIFFUSERS_TO_LDM_DEFAULT_IMAGE_SIZE_MAP[kind],
            prediction_type=sched.config.prediction_type,
            unet={k: unet[k] for k in ("sample_size", "in_channels", "out_channels", "down_block_types",
                                       "up_block_types", "block_out_channels", "layers_per_block",
                                       "cross_attention_dim", "attention_head_dim",
                                       "use_linear_projection", "transformer_layers_per_block")},
            vae=vae)
        shapes = {k: list(t.shape) for k, t in ck.items()}
        if cin == 4:
            out[name]["shapes"] = shapes
        else:
            # The inpainting geometry differs from its base's in one tensor: store that one.
            base_name = "sd21" if v2 else "sd15"
            changed = {k: s for k, s in shapes.items() if out[base_name]["shapes"].get(k) != s}
            assert shapes.keys() == out[base_name]["shapes"].keys() and len(changed) == 1, changed
            out[name].update(shapes_of=base_name, changed_shapes=changed)
        print(f"{name}: diffusers model type {kind}, {out[name]['hub']}, {len(ck)} tensors")
    return out


def config_dir(d: Path, fam: str, te, unet_cfg: dict, vae_cfg: dict, pad: str, prediction: str,
               spacing: str):
    """A diffusers folder of configs only, what the model type's hub repo holds (tiny sizes)."""
    d.mkdir(parents=True)
    (d / "model_index.json").write_text(json.dumps({
        "_class_name": "StableDiffusionPipeline", "_diffusers_version": diffusers.__version__,
        "feature_extractor": [None, None], "safety_checker": [None, None],
        "requires_safety_checker": False,
        "scheduler": ["diffusers", "EulerDiscreteScheduler"], "text_encoder": ["transformers", "CLIPTextModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"], "unet": ["diffusers", "UNet2DConditionModel"],
        "vae": ["diffusers", "AutoencoderKL"]}))
    te.config.save_pretrained(d / "text_encoder")
    UNet2DConditionModel.from_config(unet_cfg).save_config(d / "unet")
    AutoencoderKL.from_config(vae_cfg).save_config(d / "vae")
    EulerDiscreteScheduler(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012,
                           beta_schedule="scaled_linear", steps_offset=1, prediction_type=prediction,
                           timestep_spacing=spacing).save_config(d / "scheduler")
    tok = CLIPTokenizer.from_pretrained(ROOT / "tests" / "fixtures" / "tiny_sd1" / "tokenizer", pad_token=pad)
    tok.save_pretrained(d / "tokenizer")


def tiny_runs(ref: dict, shapes: dict):
    """from_single_file of the tiny files with a configs-only folder; 2 Euler steps."""
    single_ref = json.loads((SINGLE / "reference" / "reference.json").read_text())
    runs = {"sd1": ("sd1", "<|endoftext|>", "epsilon", "linspace"),
            "sd2": ("sd2", "!", "v_prediction", "linspace"),
            "sd2_base": ("sd2", "!", "epsilon", "leading")}
    h, w = 16, 24
    for run, (fam, pad, prediction, spacing) in runs.items():
        v = base.SINGLE[fam]
        # The configs the tiny file's geometry and the family's fixed values give (what the
        # engine infers); diffusers only loads and converts the weights with them.
        tok = CLIPTokenizer.from_pretrained(ROOT / "tests" / "fixtures" / "tiny_sd1" / "tokenizer")
        te = CLIPTextModel(CLIPTextConfig(
            vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=1, max_position_embeddings=77, hidden_act=v["act"],
            layer_norm_eps=1e-5, projection_dim=64))
        unet_cfg = dict(sample_size=96 if fam == "sd2" else 64, in_channels=4, out_channels=4,
                        block_out_channels=v["unet_ch"], layers_per_block=1, norm_num_groups=32,
                        cross_attention_dim=64, attention_head_dim=v["heads"],
                        down_block_types=v["down"], up_block_types=v["up"],
                        use_linear_projection=v["linear_proj"])
        vae_cfg = dict(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 32),
                       down_block_types=("DownEncoderBlock2D",) * 2,
                       up_block_types=("UpDecoderBlock2D",) * 2, layers_per_block=1,
                       norm_num_groups=32, sample_size=768 if fam == "sd2" else 512,
                       scaling_factor=0.18215)
        with tempfile.TemporaryDirectory() as tmp:
            cfg = Path(tmp) / "config"
            config_dir(cfg, fam, te, unet_cfg, vae_cfg, pad, prediction, spacing)
            pipe = StableDiffusionPipeline.from_single_file(
                str(SINGLE / f"{fam}.safetensors"), config=str(cfg), local_files_only=True,
                torch_dtype=torch.float32, safety_checker=None, requires_safety_checker=False)
        pipe.set_progress_bar_config(disable=True)
        assert type(pipe.scheduler).__name__ == "EulerDiscreteScheduler"
        assert pipe.scheduler.config.prediction_type == prediction
        noise = torch.from_numpy(np.load(SINGLE / "reference" / f"{fam}_init_noise.npy"))
        with torch.no_grad():
            lat = pipe(base.PROMPT, negative_prompt=base.NEGATIVE, num_inference_steps=2,
                       guidance_scale=base.GUIDANCE, height=h, width=w, latents=noise.clone(),
                       output_type="latent").images
            base.save(f"{run}_final_latents", lat, shapes)
            base.save(f"{run}_image", pipe.vae.decode(lat / pipe.vae.config.scaling_factor).sample, shapes)
            ids = pipe.tokenizer([base.PROMPT], padding="max_length", max_length=77, truncation=True,
                                 return_tensors="pt").input_ids
            base.save(f"{run}_text_embeddings", pipe.text_encoder(ids)[0], shapes)
        ref[run] = dict(file=f"tiny_sd_single/{fam}.safetensors", prediction_type=prediction,
                        timestep_spacing=spacing, timesteps=[float(t) for t in pipe.scheduler.timesteps])
        print(f"{run}: timesteps {ref[run]['timesteps']}")
    assert single_ref["prompt"] == base.PROMPT


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    (OUT / "reference").mkdir(parents=True)
    base.REF = OUT / "reference"
    (OUT / "model_types.json").write_text(json.dumps(model_types(), separators=(",", ":")))
    shapes: dict = {}
    ref = dict(versions=dict(diffusers=diffusers.__version__, transformers=transformers.__version__,
                             torch=torch.__version__),
               prompt=base.PROMPT, negative_prompt=base.NEGATIVE, steps=2, guidance_scale=base.GUIDANCE,
               height=16, width=24, files=shapes)
    tiny_runs(ref, shapes)
    (OUT / "reference" / "reference.json").write_text(json.dumps(ref, indent=1, default=list))
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"wrote {OUT} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
