#!/usr/bin/env python3
"""oxinfer vs diffusers (torch CPU) on a Stable Diffusion 1.5-geometry pipeline with random weights.

No real weights are needed: `make` writes a diffusers folder with SD 1.5's shapes, seeded:
  unet/          UNet2DConditionModel, SD 1.5's config (320/640/1280/1280, 2 layers per block,
                 cross_attention_dim 768, 8 heads, CrossAttnDownBlock2D x3 + DownBlock2D,
                 UpBlock2D + CrossAttnUpBlock2D x3), 860M parameters
  vae/           AutoencoderKL, SD's VAE config (128/256/512/512, 4 latent channels, 0.18215)
  text_encoder/  CLIPTextModel, ViT-L/14 text config (768 wide, 12 layers, 12 heads, 3072 MLP,
                 quick_gelu, 77 positions, vocabulary 49408)
  tokenizer/     tests/fixtures/tiny_sd1's CLIP tokenizer (634 tokens, ids inside 49408: same
                 sequence length 77, so the same compute as the real tokenizer)
  scheduler/     EulerDiscreteScheduler as SD 1.5 (scaled_linear 0.00085-0.012, 1000 steps,
                 leading spacing, steps_offset 1)
all fp32 safetensors (about 4.3 GB).

`bench` alternates the engines, per size and round: one diffusers process (load timed, then
a 64 x 64 one-step warm-up call, then pipe() with N1 and with N2 steps, per-step times from callback_on_step_end, peak RSS from
getrusage), then oxinfer with N1 and with N2 steps under /usr/bin/time -v (wall, peak RSS; its
last stderr line gives load and generation time). s/step = (t(N2) - t(N1)) / (N2 - N1).
Load averages are recorded before every run. Results are appended as JSON lines.

Run (from anywhere; 2 threads each):
  PY=~/.cache/oxinfer/refvenv/bin/python
  $PY tools/bench/sd_cpu_bench.py make /tmp/sdbench/sd15_random
  $PY tools/bench/sd_cpu_bench.py bench /tmp/sdbench/sd15_random --oxinfer /tmp/sdbench/oxinfer \\
      --sizes 256:1:4 512:1:2 --rounds 2 --threads 2 --out /tmp/sdbench/results.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "a photo of an astronaut riding a horse on the moon"
GUIDANCE = 7.5


def make(out: Path):
    import torch
    from diffusers import (AutoencoderKL, EulerDiscreteScheduler, StableDiffusionPipeline,
                           UNet2DConditionModel)
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    tok_dir = ROOT / "tests" / "fixtures" / "tiny_sd1" / "tokenizer"
    tok = CLIPTokenizer.from_pretrained(tok_dir)
    n_tok = len(tok)  # 634: <|startoftext|> 632, <|endoftext|> 633
    torch.manual_seed(1)
    te = CLIPTextModel(CLIPTextConfig(
        vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
        num_attention_heads=12, max_position_embeddings=77, hidden_act="quick_gelu",
        layer_norm_eps=1e-5, projection_dim=768,
        bos_token_id=n_tok - 2, eos_token_id=n_tok - 1, pad_token_id=n_tok - 1))
    torch.manual_seed(2)
    unet = UNet2DConditionModel(
        sample_size=64, in_channels=4, out_channels=4, center_input_sample=False,
        flip_sin_to_cos=True, freq_shift=0, block_out_channels=(320, 640, 1280, 1280),
        layers_per_block=2, downsample_padding=1, mid_block_scale_factor=1, act_fn="silu",
        norm_num_groups=32, norm_eps=1e-5, cross_attention_dim=768, attention_head_dim=8,
        down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3)
    torch.manual_seed(3)
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(128, 256, 512, 512),
        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
        layers_per_block=2, act_fn="silu", norm_num_groups=32, sample_size=512,
        scaling_factor=0.18215)
    sched = EulerDiscreteScheduler(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012,
                                   beta_schedule="scaled_linear", timestep_spacing="leading",
                                   steps_offset=1, prediction_type="epsilon")
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=te, tokenizer=tok, unet=unet,
                                   scheduler=sched, safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)
    if out.exists():
        shutil.rmtree(out)
    pipe.save_pretrained(out, safe_serialization=True)
    # Real SD folders ship vocab.json + merges.txt (what oxinfer reads): use the fixture's files.
    shutil.rmtree(out / "tokenizer")
    shutil.copytree(tok_dir, out / "tokenizer")
    n = {k: sum(p.numel() for p in m.parameters()) for k, m in
         (("unet", unet), ("vae", vae), ("text_encoder", te))}
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(json.dumps(dict(wrote=str(out), params=n, bytes=total)))


def diffusers_run(folder: Path, size: int, steps: list[int], threads: int, out_png: str):
    """One process: load, then one pipe() per step count. Prints one JSON line."""
    import torch
    torch.set_num_threads(threads)
    from diffusers import StableDiffusionPipeline
    t0 = time.perf_counter()
    pipe = StableDiffusionPipeline.from_pretrained(folder, torch_dtype=torch.float32,
                                                   safety_checker=None)
    pipe.set_progress_bar_config(disable=True)
    load_s = time.perf_counter() - t0
    # The first pipe() call pages the mapped weights in and sets up torch's kernels (about
    # 12 s at 256 x 256 on a 2-core EPYC): a 64 x 64 one-step call first, timed apart.
    t0 = time.perf_counter()
    with torch.inference_mode():
        pipe(PROMPT, num_inference_steps=1, height=64, width=64, guidance_scale=GUIDANCE,
             generator=torch.Generator().manual_seed(0))
    warmup_s = time.perf_counter() - t0
    runs = []
    for n in steps:
        marks = []

        def cb(p, i, t, kw):
            marks.append(time.perf_counter())
            return kw

        g = torch.Generator().manual_seed(1)
        t0 = time.perf_counter()
        with torch.inference_mode():
            img = pipe(PROMPT, num_inference_steps=n, height=size, width=size,
                       guidance_scale=GUIDANCE, generator=g, callback_on_step_end=cb).images[0]
        t1 = time.perf_counter()
        img.save(out_png.replace(".png", f"_{n}.png"))
        runs.append(dict(steps=n, e2e_s=t1 - t0, first_step_incl_text_s=marks[0] - t0,
                         step_s=[b - a for a, b in zip(marks, marks[1:])],
                         after_last_step_s=t1 - marks[-1], image_size=list(img.size)))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
    print(json.dumps(dict(load_s=load_s, warmup_s=warmup_s, runs=runs, peak_rss_mib=rss, torch=torch.__version__,
                          threads=torch.get_num_threads())))


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def oxinfer_run(exe: str, folder: Path, size: int, n: int, threads: int, png: str) -> dict:
    cmd = ["/usr/bin/time", "-v", exe, "image", "-m", str(folder), "-p", PROMPT, "--steps", str(n),
           "--cfg", str(GUIDANCE), "--width", str(size), "--height", str(size), "--seed", "1",
           "-o", png, "-t", str(threads)]
    la = loadavg()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    err = p.stderr
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    tail = [l for l in err.splitlines() if l.strip() and not l.startswith("\t")]
    res = dict(engine="oxinfer", size=size, steps=n, rc=p.returncode, wall_s=wall,
               peak_rss_mib=int(rss.group(1)) / 1024 if rss else None, loadavg_before=la,
               last_stderr=tail[-1][-400:] if tail else "", cmd=" ".join(cmd[2:]))
    if p.returncode != 0:
        res["stderr"] = err[-3000:]
    else:
        from PIL import Image
        res["image_size"] = list(Image.open(png).size)
    return res


def bench(a):
    out = open(a.out, "a")

    def emit(d):
        print(json.dumps(d), flush=True)
        out.write(json.dumps(d) + "\n")
        out.flush()

    for spec in a.sizes:
        size, n1, n2 = (int(x) for x in spec.split(":"))
        for r in range(1, a.rounds + 1):
            la = loadavg()
            cmd = [sys.executable, __file__, "diffusers-run", str(a.folder), str(size),
                   f"{n1},{n2}", str(a.threads), f"{a.workdir}/diffusers_{size}_r{r}.png"]
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            d = dict(engine="diffusers", size=size, round=r, rc=p.returncode, process_wall_s=wall,
                     loadavg_before=la, cmd=" ".join(cmd))
            if p.returncode == 0:
                d.update(json.loads(p.stdout.strip().splitlines()[-1]))
                e = {x["steps"]: x["e2e_s"] for x in d["runs"]}
                d["s_per_step_from_e2e"] = (e[n2] - e[n1]) / (n2 - n1)
            else:
                d["stderr"] = p.stderr[-3000:]
            emit(d)
            runs = []
            for n in (n1, n2):
                o = oxinfer_run(a.oxinfer, a.folder, size, n, a.threads,
                                f"{a.workdir}/oxinfer_{size}_r{r}_{n}.png")
                o["round"] = r
                emit(o)
                runs.append(o)
            if all(o["rc"] == 0 for o in runs):
                emit(dict(engine="oxinfer", size=size, round=r,
                          s_per_step_from_wall=(runs[1]["wall_s"] - runs[0]["wall_s"]) / (n2 - n1)))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("out", type=Path)
    d = sub.add_parser("diffusers-run")
    d.add_argument("folder", type=Path)
    d.add_argument("size", type=int)
    d.add_argument("steps")
    d.add_argument("threads", type=int)
    d.add_argument("png")
    b = sub.add_parser("bench")
    b.add_argument("folder", type=Path)
    b.add_argument("--oxinfer", default="/tmp/sdbench/oxinfer")
    b.add_argument("--sizes", nargs="+", default=["256:1:4", "512:1:2"])
    b.add_argument("--rounds", type=int, default=2)
    b.add_argument("--threads", type=int, default=2)
    b.add_argument("--workdir", default="/tmp/sdbench")
    b.add_argument("--out", default="/tmp/sdbench/results.jsonl")
    a = ap.parse_args()
    if a.cmd == "make":
        make(a.out)
    elif a.cmd == "diffusers-run":
        diffusers_run(a.folder, a.size, [int(x) for x in a.steps.split(",")], a.threads, a.png)
    else:
        bench(a)


if __name__ == "__main__":
    main()
