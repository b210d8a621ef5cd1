//! Few-step Stable Diffusion against diffusers 0.42 float32 (fixtures of
//! `tools/ref/make_tiny_sd.py`, fed the same initial and per-step noise):
//! - `tests/fixtures/tiny_lcm`: a `LatentConsistencyModelPipeline` whose UNet has
//!   `time_cond_proj_dim` (the guidance scale's embedding enters the timestep embedding) with an
//!   `LCMScheduler`, 4 steps at guidance 8.5: the w-embedding, every UNet call, the latents after
//!   every step and the image; and image to image as `LatentConsistencyModelImg2ImgPipeline`
//!   (3 steps at strength 0.5, two images in 4 steps at strength 0.8; the posterior's sampling
//!   noise given): the timesteps, the latents after every step, the final latents and images;
//! - SD-Turbo style on `tests/fixtures/tiny_sd1`: guidance 0 (one UNet pass per step) with
//!   `trailing` timesteps, Euler in 1 step and Euler ancestral in 4: every UNet call and the
//!   latents after every step.

mod common;

use common::{fixtures, max_abs_diff, read_npy_f32, scaled_diff};
use oxinfer::arch::diffusion::config::JsonConfig;
use oxinfer::arch::diffusion::layers::guidance_embedding;
use oxinfer::arch::diffusion::scheduler::{ScheduleConfig, Scheduler};
use oxinfer::arch::diffusion::{FeatureMap, GenerateRequest, SchedulerKind, StableDiffusion};
use std::path::Path;

const TOL: f32 = 1e-4;

fn npy(dir: &Path, name: &str) -> (Vec<usize>, Vec<f32>) {
    read_npy_f32(&dir.join("reference").join(format!("{name}.npy")))
}

/// Runs `req` on `sd` and checks the latents after every step against `{prefix}step_latents`;
/// returns the worst scaled difference and the output.
fn check_steps(
    sd: &StableDiffusion,
    req: &GenerateRequest,
    dir: &Path,
    prefix: &str,
) -> (f32, oxinfer::arch::diffusion::pipeline::Generated) {
    let (_, want) = npy(dir, &format!("{prefix}step_latents"));
    let n = want.len() / req.steps;
    let mut worst = 0f32;
    let mut seen = 0;
    let out = sd
        .generate(req, &mut |i, _, lat| {
            worst = worst.max(scaled_diff(lat, &want[i * n..(i + 1) * n]));
            seen += 1;
        })
        .unwrap();
    assert_eq!(seen, req.steps, "{prefix}: steps run");
    (worst, out)
}

/// Every recorded UNet call `(input, timestep) → output` of one run, conditioned on `ctx`.
fn check_unet_calls(
    sd: &StableDiffusion,
    dir: &Path,
    prefix: &str,
    ts: &[serde_json::Value],
    ctx: &[f32],
    cond: Option<&[f32]>,
) -> f32 {
    let (shape, inputs) = npy(dir, &format!("{prefix}unet_in"));
    let (_, outputs) = npy(dir, &format!("{prefix}unet_out"));
    let (c, h, w) = (shape[2], shape[3], shape[4]);
    let n = c * h * w;
    assert_eq!(shape[1], 1, "{prefix}: one UNet pass per step");
    let mut worst = 0f32;
    for (s, t) in ts.iter().enumerate() {
        let x = FeatureMap::from_chw(&inputs[s * n..(s + 1) * n], c, h, w);
        let got = sd
            .unet
            .forward_cond(&x, t.as_f64().unwrap() as f32, ctx, cond)
            .unwrap()
            .to_chw();
        worst = worst.max(scaled_diff(&got, &outputs[s * n..(s + 1) * n]));
    }
    worst
}

#[test]
fn lcm_pipeline_matches_diffusers() {
    let dir = fixtures().join("tiny_lcm");
    let r = common::reference(&dir.join("reference"));
    let sd = StableDiffusion::load(&dir).unwrap();
    assert_eq!(sd.default_scheduler, SchedulerKind::Lcm);
    assert_eq!(sd.unet.config.time_cond_proj_dim, Some(32));
    assert_eq!((sd.default_steps(), sd.default_guidance()), (4, 8.5));
    let guidance = r["guidance_scale"].as_f64().unwrap() as f32;

    let (_, want_w) = npy(&dir, "w_embedding");
    let w = guidance_embedding(guidance - 1.0, 32);
    let d = max_abs_diff(&w, &want_w);
    eprintln!("LCM w-embedding: max abs diff {d:.2e}");
    assert!(d < 1e-5, "w-embedding: {d:e}");

    let ctx = sd.encode_prompt(r["prompt"].as_str().unwrap()).unwrap();
    let ts = r["unet_timesteps"].as_array().unwrap();
    let d = check_unet_calls(&sd, &dir, "", ts, &ctx, Some(&w));
    eprintln!("LCM UNet, every call: worst scaled max diff {d:.2e}");
    assert!(d < TOL, "LCM UNet calls: {d:e}");

    let steps = r["steps"].as_u64().unwrap() as usize;
    let req = GenerateRequest {
        prompt: r["prompt"].as_str().unwrap().into(),
        steps,
        guidance_scale: guidance,
        width: r["width"].as_u64().unwrap() as usize,
        height: r["height"].as_u64().unwrap() as usize,
        init_noise: Some(npy(&dir, "init_noise").1),
        step_noise: Some(npy(&dir, "step_noise").1),
        ..Default::default()
    };
    let (worst, out) = check_steps(&sd, &req, &dir, "");
    eprintln!("LCM pipeline step latents: worst scaled max diff {worst:.2e}");
    assert!(worst < TOL, "LCM step latents: {worst:e}");
    let d = scaled_diff(&out.latents, &npy(&dir, "final_latents").1);
    assert!(d < TOL, "LCM final latents: {d:e}");
    let d = max_abs_diff(&out.image, &npy(&dir, "image").1);
    eprintln!("LCM image: max abs diff {d:.2e}");
    assert!(d < TOL, "LCM image: {d:e}");

    // The timestep condition is required by this UNet.
    let x = FeatureMap::from_chw(&npy(&dir, "init_noise").1, 4, 8, 8);
    let e = sd.unet.forward(&x, 999.0, &ctx).err().unwrap().to_string();
    assert!(e.contains("time_cond_proj_dim"), "{e}");
}

#[test]
fn lcm_image_to_image_matches_diffusers() {
    let dir = fixtures().join("tiny_lcm");
    let r = common::reference(&dir.join("reference"));
    let sd = StableDiffusion::load(&dir).unwrap();
    let (width, height) = (
        r["width"].as_u64().unwrap() as usize,
        r["height"].as_u64().unwrap() as usize,
    );
    let image = npy(&dir, "i2i_input").1;
    let base = GenerateRequest {
        prompt: r["prompt"].as_str().unwrap().into(),
        guidance_scale: r["guidance_scale"].as_f64().unwrap() as f32,
        width,
        height,
        init_image: Some(image.clone()),
        encode_noise: Some(npy(&dir, "i2i_enc_noise").1),
        ..Default::default()
    };
    let cases = r["img2img"]["cases"].as_object().unwrap();
    assert_eq!(cases.len(), 2);
    for (name, case) in cases {
        let steps = case["steps"].as_u64().unwrap() as usize;
        let strength = case["strength"].as_f64().unwrap();
        let batch = case["batch"].as_u64().unwrap() as usize;
        // The timesteps: `steps` of the distillation schedule cut by the strength.
        let sched =
            Scheduler::with_strength(SchedulerKind::Lcm, sd.schedule.clone(), steps, strength)
                .unwrap();
        let want_ts: Vec<f32> = case["timesteps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(sched.timesteps, want_ts, "{name}: timesteps");

        let prefix = format!("i2i_{name}_");
        let req = GenerateRequest {
            steps,
            strength: strength as f32,
            batch,
            init_noise: Some(npy(&dir, &format!("{prefix}noise")).1),
            step_noise: Some(npy(&dir, &format!("{prefix}step_noise")).1),
            ..base.clone()
        };
        let (worst, out) = check_steps(&sd, &req, &dir, &prefix);
        eprintln!("LCM img2img {name} step latents: worst scaled max diff {worst:.2e}");
        assert!(worst < TOL, "{name} step latents: {worst:e}");
        let d = scaled_diff(
            &out.latents,
            &npy(&dir, &format!("{prefix}final_latents")).1,
        );
        eprintln!("LCM img2img {name} final latents: scaled max diff {d:.2e}");
        assert!(d < TOL, "{name} final latents: {d:e}");
        assert_eq!(out.images, batch);
        let d = max_abs_diff(&out.image, &npy(&dir, &format!("{prefix}image")).1);
        eprintln!("LCM img2img {name} image: max abs diff {d:.2e}");
        assert!(d < TOL, "{name} image: {d:e}");
    }

    // Where diffusers refuses: a strength outside [0, 1], or one whose cut schedule
    // (floor(50 · strength) timesteps) is shorter than the steps.
    for (strength, steps, what) in [
        (1.5, 4, "(0, 1]"),
        (-0.1, 4, "(0, 1]"),
        (0.0, 4, "= 0 timesteps"),
        (0.05, 4, "= 2 timesteps"),
        (0.1, 6, "= 5 timesteps"),
    ] {
        let req = GenerateRequest {
            steps,
            strength,
            ..base.clone()
        };
        let e = sd
            .generate(&req, &mut |_, _, _| {})
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("strength") && e.contains(what),
            "{strength}: {e}"
        );
    }
    // The fewest timesteps that suffice: floor(50 · 0.1) = 5 for 5 steps.
    let req = GenerateRequest {
        steps: 5,
        strength: 0.1,
        ..base
    };
    let out = sd.generate(&req, &mut |_, _, _| {}).unwrap();
    assert!(out.latents.iter().all(|v| v.is_finite()));
}

#[test]
fn turbo_style_runs_match_diffusers() {
    let dir = fixtures().join("tiny_sd1");
    let r = common::reference(&dir.join("reference"));
    let mut sd = StableDiffusion::load(&dir).unwrap();
    let ctx = sd.encode_prompt(r["prompt"].as_str().unwrap()).unwrap();
    for (name, case) in r["turbo"].as_object().unwrap() {
        let cfg = JsonConfig::from_value(&dir, case["config"].clone());
        sd.schedule = ScheduleConfig::parse(&cfg).unwrap();
        let class = case["config"]["_class_name"].as_str().unwrap();
        let kind = SchedulerKind::parse(class).unwrap();
        let prefix = format!("turbo_{name}_");
        let ts = case["unet_timesteps"].as_array().unwrap();
        let d = check_unet_calls(&sd, &dir, &prefix, ts, &ctx, None);
        eprintln!("turbo {name} UNet, every call: worst scaled max diff {d:.2e}");
        assert!(d < TOL, "{name} UNet calls: {d:e}");
        let req = GenerateRequest {
            prompt: r["prompt"].as_str().unwrap().into(),
            negative_prompt: "ignored without guidance".into(),
            steps: case["steps"].as_u64().unwrap() as usize,
            guidance_scale: 0.0,
            width: r["width"].as_u64().unwrap() as usize,
            height: r["height"].as_u64().unwrap() as usize,
            scheduler: Some(kind),
            init_noise: Some(npy(&dir, "init_noise").1),
            step_noise: Some(npy(&dir, &format!("{prefix}step_noise")).1),
            ..Default::default()
        };
        let (worst, _) = check_steps(&sd, &req, &dir, &prefix);
        eprintln!("turbo {name} step latents: worst scaled max diff {worst:.2e}");
        assert!(worst < TOL, "{name} step latents: {worst:e}");
    }
}
