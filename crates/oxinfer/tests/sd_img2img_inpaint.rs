//! Image to image with DDIM and DPM-Solver++ 2M (plain and Karras), and inpainting, against
//! diffusers 0.42 float32 (`tools/ref/make_sd_i2i_inpaint.py`):
//! - `tests/fixtures/tiny_sd1_i2i`: `StableDiffusionImg2ImgPipeline` on tiny_sd1 with each
//!   scheduler made by `from_config` of its Euler config (DDIM then clips its predicted sample,
//!   diffusers' default), strength < 1, guidance 7.5, the posterior and added noise fed in;
//! - `tests/fixtures/tiny_sd_inpaint`: `StableDiffusionInpaintPipeline` with a 9-channel UNet:
//!   Euler at strength 0.75, Euler ancestral at strength 1 (pure noise), DPM-Solver++ 2M with two
//!   images and no guidance; the same pipeline as one LDM file gives identical results; bad
//!   requests (a mask without an image, none to an inpainting model, a mask of another size)
//!   are one error naming what is wrong;
//! - `tests/fixtures/tiny_sd1_inpaint4` (`tools/ref/make_sd_inpaint4.py`): the same pipeline
//!   with tiny_sd1's plain 4-channel UNet (the image's latents blended in after each step).
//!
//! Final latents (scaled) and images within 1e-4.

mod common;

use common::{fixtures, max_abs_diff, read_npy_f32, scaled_diff};
use oxinfer::arch::diffusion::{
    GenerateRequest, Generated, PipelineSource, SchedulerKind, StableDiffusion,
};
use serde_json::Value;
use std::path::{Path, PathBuf};

const TOL: f32 = 1e-4;

fn npy(dir: &Path, name: &str) -> Vec<f32> {
    read_npy_f32(&dir.join("reference").join(format!("{name}.npy"))).1
}

/// A request with the prompts of reference `r` at its size.
fn request(r: &Value, steps: usize, strength: f64, guidance: f64) -> GenerateRequest {
    GenerateRequest {
        prompt: r["prompt"].as_str().unwrap().into(),
        negative_prompt: r["negative_prompt"].as_str().unwrap().into(),
        steps,
        guidance_scale: guidance as f32,
        width: r["width"].as_u64().unwrap() as usize,
        height: r["height"].as_u64().unwrap() as usize,
        strength: strength as f32,
        ..Default::default()
    }
}

fn scheduler(name: &str) -> SchedulerKind {
    SchedulerKind::parse(name).unwrap_or_else(|| panic!("scheduler {name}"))
}

#[test]
fn img2img_ddim_and_dpm_match_diffusers() {
    let dir = fixtures().join("tiny_sd1_i2i");
    let r = common::reference(&dir.join("reference"));
    let sd = StableDiffusion::load(&fixtures().join("tiny_sd1")).unwrap();
    for (name, case) in r["cases"].as_object().unwrap() {
        let steps = case["steps"].as_u64().unwrap() as usize;
        let mut sd_case = request(&r, steps, case["strength"].as_f64().unwrap(), 7.5);
        sd_case.scheduler = Some(scheduler(case["scheduler"].as_str().unwrap()));
        sd_case.init_image = Some(npy(&dir, "input"));
        sd_case.encode_noise = Some(npy(&dir, "enc_noise"));
        sd_case.init_noise = Some(npy(&dir, "noise"));
        // The Karras case: its own schedule (a field of the config the folder lacks).
        let pipeline = if case["config"]["use_karras_sigmas"] == true {
            let mut p = StableDiffusion::load(&fixtures().join("tiny_sd1")).unwrap();
            p.schedule.karras = true;
            Some(p)
        } else {
            None
        };
        let p = pipeline.as_ref().unwrap_or(&sd);
        let mut ran = 0;
        let out = p.generate(&sd_case, &mut |_, _, _| ran += 1).unwrap();
        assert_eq!(ran, 3, "{name}: the last 3 steps run");
        let d = scaled_diff(&out.latents, &npy(&dir, &format!("{name}_latents")));
        let di = max_abs_diff(&out.image, &npy(&dir, &format!("{name}_image")));
        eprintln!("img2img {name}: latents scaled diff {d:.2e}, image max abs diff {di:.2e}");
        assert!(d < TOL && di < TOL, "{name}: latents {d:e}, image {di:e}");
    }
}

/// The inpainting fixture folder.
fn inpaint_dir() -> PathBuf {
    fixtures().join("tiny_sd_inpaint")
}

/// The request of inpainting case `name` of the reference, with its recorded noise.
fn inpaint_request(dir: &Path, r: &Value, name: &str) -> GenerateRequest {
    let case = &r["cases"][name];
    let steps = case["steps"].as_u64().unwrap() as usize;
    let mut req = request(
        r,
        steps,
        case["strength"].as_f64().unwrap(),
        case["guidance_scale"].as_f64().unwrap(),
    );
    let file = |n: &str| dir.join("reference").join(format!("{name}_{n}.npy"));
    let opt = |n: &str| file(n).is_file().then(|| read_npy_f32(&file(n)).1);
    req.scheduler = Some(scheduler(case["scheduler"].as_str().unwrap()));
    req.batch = case["batch"].as_u64().unwrap() as usize;
    req.init_image = Some(npy(dir, "input"));
    req.mask = Some(npy(dir, "mask"));
    req.encode_noise = opt("enc_noise");
    req.mask_encode_noise = opt("masked_enc_noise");
    req.init_noise = opt("noise");
    req.step_noise = opt("step_noise");
    req
}

#[test]
fn inpainting_matches_diffusers_in_both_layouts() {
    let dir = inpaint_dir();
    let r = common::reference(&dir.join("reference"));
    let sd = StableDiffusion::load(&dir).unwrap();
    assert!(sd.is_inpainting());
    let file = fixtures().join("tiny_sd_inpaint_ldm/inpaint.safetensors");
    let single = StableDiffusion::load_single_file(&file, &dir).unwrap();
    for (name, case) in r["cases"].as_object().unwrap() {
        let (req, out) = check_inpaint_case(&sd, &dir, &r, name, case);
        if name == "euler_s075" {
            let one = single.generate(&req, &mut |_, _, _| {}).unwrap();
            assert_eq!(one.latents, out.latents, "single file against the folder");
        }
    }
}

/// Runs inpainting case `name` of the reference in `dir` on `sd`: the steps run, the final
/// latents and image within [`TOL`]; returns the request and its output.
fn check_inpaint_case(
    sd: &StableDiffusion,
    dir: &Path,
    r: &Value,
    name: &str,
    case: &Value,
) -> (GenerateRequest, Generated) {
    let req = inpaint_request(dir, r, name);
    let mut ran = 0;
    let out = sd.generate(&req, &mut |_, _, _| ran += 1).unwrap();
    assert_eq!(
        ran,
        case["unet_calls"].as_u64().unwrap() as usize,
        "{name}: steps run"
    );
    let d = scaled_diff(&out.latents, &npy(dir, &format!("{name}_latents")));
    let di = max_abs_diff(&out.image, &npy(dir, &format!("{name}_image")));
    eprintln!("inpainting {name}: latents scaled diff {d:.2e}, image max abs diff {di:.2e}");
    assert!(d < TOL && di < TOL, "{name}: latents {d:e}, image {di:e}");
    (req, out)
}

/// `tests/fixtures/tiny_sd1_inpaint4` (`tools/ref/make_sd_inpaint4.py`): inpainting with
/// tiny_sd1's plain 4-channel UNet, the image's latents blended in after every step, with
/// Euler, Euler ancestral (strength 1), DDIM and DPM-Solver++ 2M (two images, no guidance).
#[test]
fn inpainting_with_a_plain_unet_matches_diffusers() {
    let dir = fixtures().join("tiny_sd1_inpaint4");
    let r = common::reference(&dir.join("reference"));
    let sd = StableDiffusion::load(&fixtures().join("tiny_sd1")).unwrap();
    assert!(!sd.is_inpainting());
    for (name, case) in r["cases"].as_object().unwrap() {
        check_inpaint_case(&sd, &dir, &r, name, case);
    }
}

#[test]
fn bad_inpainting_requests_are_clear_errors() {
    let dir = inpaint_dir();
    let r = common::reference(&dir.join("reference"));
    let sd = StableDiffusion::open(PipelineSource::Folder(&dir), None)
        .unwrap()
        .0;
    let good = inpaint_request(&dir, &r, "euler_s075");
    let err = |p: &StableDiffusion, req: &GenerateRequest| match p.generate(req, &mut |_, _, _| {})
    {
        Ok(_) => panic!("generated"),
        Err(e) => e.to_string(),
    };
    let e = err(
        &sd,
        &GenerateRequest {
            mask: None,
            ..good.clone()
        },
    );
    assert!(e.contains("inpainting model") && e.contains("mask"), "{e}");
    let e = err(
        &sd,
        &GenerateRequest {
            init_image: None,
            ..good.clone()
        },
    );
    assert!(e.contains("init image"), "{e}");
    let small = GenerateRequest {
        mask: Some(vec![1.0; 10]),
        ..good.clone()
    };
    let e = err(&sd, &small);
    assert!(
        e.contains("mask has 10 values") && e.contains("[48, 64]"),
        "{e}"
    );
    let plain = StableDiffusion::load(&fixtures().join("tiny_sd1")).unwrap();
    let no_image = GenerateRequest {
        init_image: None,
        ..good.clone()
    };
    let e = err(&plain, &no_image);
    assert!(e.contains("a mask needs an init image"), "{e}");
}
