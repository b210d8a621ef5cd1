//! `oxinfer image --init ... [--mask ...]` as a process against diffusers
//! (`tools/ref/make_sd_i2i_inpaint.py`): image to image with DDIM from a PNG with the posterior
//! noise given (`--encode-noise`), and inpainting from the init and mask PNGs of
//! `tests/fixtures/tiny_sd_inpaint` (the folder and its LDM single file with `--config`), final
//! latents and image within 1e-4, and with a plain model's mask (`tests/fixtures/tiny_sd1_inpaint4`);
//! bad inpainting input ends with one clear error line. Also `--lora` / `--lora-scale` on
//! tiny_sd1 against `tests/fixtures/tiny_sd1_lora` (`tools/ref/make_sd_lora.py`).

mod cli_process;
#[path = "../../oxinfer/tests/common/mod.rs"]
mod common;

use cli_process::{assert_fails_with, ok, oxinfer};
use common::{fixtures, max_abs_diff, read_npy_f32, scaled_diff, scratch_dir};
use std::path::Path;

/// Runs `oxinfer image` with `args` plus `--dump-latents` / `--dump-image` into `tmp` and
/// checks both against the references `{case}_latents.npy` / `{case}_image.npy` of `refs`.
fn run_and_check(tmp: &Path, args: &[String], refs: &Path, case: &str) {
    let (lat, img) = (tmp.join("lat.npy"), tmp.join("img.npy"));
    let mut argv: Vec<String> = args.to_vec();
    argv.extend(["--dump-latents".into(), lat.display().to_string()]);
    argv.extend(["--dump-image".into(), img.display().to_string()]);
    argv.extend(["-o".into(), tmp.join("out.png").display().to_string()]);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    ok(oxinfer(&argv));
    let want = |n: &str| read_npy_f32(&refs.join(format!("{case}_{n}.npy"))).1;
    let d = scaled_diff(&read_npy_f32(&lat).1, &want("latents"));
    let di = max_abs_diff(&read_npy_f32(&img).1, &want("image"));
    eprintln!("{case}: latents scaled diff {d:.2e}, image {di:.2e}");
    assert!(d < 1e-4 && di < 1e-4, "{case}: latents {d:e}, image {di:e}");
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn img2img_ddim_with_encode_noise_matches_diffusers() {
    let tmp = scratch_dir("image-cli-i2i-ddim");
    let dir = fixtures().join("tiny_sd1_i2i");
    let refs = dir.join("reference");
    let r = common::reference(&refs);
    let args: Vec<String> = [
        "image",
        "-m",
        &s(&fixtures().join("tiny_sd1")),
        "-p",
        r["prompt"].as_str().unwrap(),
        "-n",
        r["negative_prompt"].as_str().unwrap(),
        "--scheduler",
        "ddim",
        "--steps",
        "5",
        "--strength",
        "0.6",
        "--init",
        &s(&dir.join("init.png")),
        "--encode-noise",
        &s(&refs.join("enc_noise.npy")),
        "--init-noise",
        &s(&refs.join("noise.npy")),
    ]
    .map(String::from)
    .to_vec();
    run_and_check(&tmp, &args, &refs, "ddim");
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn inpainting_from_pngs_matches_diffusers_in_both_layouts() {
    let tmp = scratch_dir("image-cli-inpaint");
    let dir = fixtures().join("tiny_sd_inpaint");
    let refs = dir.join("reference");
    let r = common::reference(&refs);
    let file = fixtures().join("tiny_sd_inpaint_ldm/inpaint.safetensors");
    let tail: Vec<String> = [
        "-p",
        r["prompt"].as_str().unwrap(),
        "-n",
        r["negative_prompt"].as_str().unwrap(),
        "--steps",
        "4",
        "--strength",
        "0.75",
        "--init",
        &s(&dir.join("init.png")),
        "--mask",
        &s(&dir.join("mask.png")),
        "--encode-noise",
        &s(&refs.join("euler_s075_enc_noise.npy")),
        "--mask-encode-noise",
        &s(&refs.join("euler_s075_masked_enc_noise.npy")),
        "--init-noise",
        &s(&refs.join("euler_s075_noise.npy")),
    ]
    .map(String::from)
    .to_vec();
    for model in [
        vec!["-m".to_string(), s(&dir)],
        vec!["-m".into(), s(&file), "--config".into(), s(&dir)],
    ] {
        let args = [vec!["image".to_string()], model, tail.clone()].concat();
        run_and_check(&tmp, &args, &refs, "euler_s075");
    }
    // Bad input: one error line each.
    let (d, init) = (s(&dir), s(&dir.join("init.png")));
    let o = oxinfer(&["image", "-m", &d, "-p", "x", "--init", &init]);
    assert_fails_with(&o, &["inpainting model", "--mask"]);
    let o = oxinfer(&["image", "-m", &d, "-p", "x"]);
    assert_fails_with(&o, &["inpainting model", "--init"]);
    let small = tmp.join("small.png");
    image::RgbImage::new(32, 16).save(&small).unwrap();
    let o = oxinfer(&[
        "image",
        "-m",
        &d,
        "-p",
        "x",
        "--init",
        &init,
        "--mask",
        &s(&small),
    ]);
    assert_fails_with(&o, &["--mask", "small.png", "32x16", "64x48"]);
    let readme = s(&fixtures().join("../../README.md"));
    let o = oxinfer(&[
        "image", "-m", &d, "-p", "x", "--init", &init, "--mask", &readme,
    ]);
    assert_fails_with(&o, &["--mask", "README.md"]);
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `--mask` with tiny_sd1's plain 4-channel UNet (the image's latents blended in after every
/// step), against `tests/fixtures/tiny_sd1_inpaint4` (`tools/ref/make_sd_inpaint4.py`).
#[test]
fn inpainting_with_a_plain_model_matches_diffusers() {
    let tmp = scratch_dir("image-cli-inpaint4");
    let pngs = fixtures().join("tiny_sd_inpaint");
    let refs = fixtures().join("tiny_sd1_inpaint4/reference");
    let r = common::reference(&refs);
    let args: Vec<String> = [
        "image",
        "-m",
        &s(&fixtures().join("tiny_sd1")),
        "-p",
        r["prompt"].as_str().unwrap(),
        "-n",
        r["negative_prompt"].as_str().unwrap(),
        "--steps",
        "4",
        "--strength",
        "0.75",
        "--init",
        &s(&pngs.join("init.png")),
        "--mask",
        &s(&pngs.join("mask.png")),
        "--encode-noise",
        &s(&refs.join("euler_s075_enc_noise.npy")),
        "--init-noise",
        &s(&refs.join("euler_s075_noise.npy")),
    ]
    .map(String::from)
    .to_vec();
    run_and_check(&tmp, &args, &refs, "euler_s075");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `--lora` (the kohya fixture at `--lora-scale 0.8`, Euler; at scale 1 with the LCM scheduler
/// and guidance 1, as LCM-LoRA is used) against diffusers' fused LoRA; bad `--lora` input ends
/// with one clear error line.
#[test]
fn lora_matches_diffusers() {
    let tmp = scratch_dir("image-cli-lora");
    let dir = fixtures().join("tiny_sd1_lora");
    let refs = dir.join("reference");
    let r = common::reference(&refs);
    let (sd1, lora) = (
        s(&fixtures().join("tiny_sd1")),
        s(&dir.join("kohya.safetensors")),
    );
    let head: Vec<String> = [
        "image",
        "-m",
        &sd1,
        "-p",
        r["prompt"].as_str().unwrap(),
        "-n",
        r["negative_prompt"].as_str().unwrap(),
        "--steps",
        "4",
        "--width",
        "64",
        "--height",
        "48",
        "--init-noise",
        &s(&refs.join("noise.npy")),
        "--lora",
        &lora,
    ]
    .map(String::from)
    .to_vec();
    let euler = ["--lora-scale", "0.8"].map(String::from).to_vec();
    run_and_check(&tmp, &[head.clone(), euler].concat(), &refs, "kohya_s08");
    let lcm: Vec<String> = [
        "--scheduler",
        "lcm",
        "--cfg",
        "1",
        "--step-noise",
        &s(&refs.join("lcm_step_noise.npy")),
    ]
    .map(String::from)
    .to_vec();
    run_and_check(&tmp, &[head, lcm].concat(), &refs, "lcm_kohya");
    let readme = s(&fixtures().join("../../README.md"));
    let o = oxinfer(&["image", "-m", &sd1, "-p", "x", "--lora", &readme]);
    assert_fails_with(&o, &["README.md"]);
    let o = oxinfer(&[
        "image",
        "-m",
        &sd1,
        "-p",
        "x",
        "--lora",
        &lora,
        "--lora-scale",
        "1",
        "--lora-scale",
        "2",
    ]);
    assert_fails_with(&o, &["--lora-scale given 2 times for 1 --lora"]);
    let o = oxinfer(&[
        "image",
        "-m",
        &sd1,
        "-p",
        "x",
        "--lora",
        "missing.safetensors",
    ]);
    assert_fails_with(&o, &["--lora missing.safetensors", "not a file"]);
    let _ = std::fs::remove_dir_all(&tmp);
}
