//! `oxinfer image` as a process on the tiny Stable Diffusion fixtures: with diffusers' recorded
//! noise it writes the latents and image diffusers computed (within 1e-4) and a PNG of them;
//! bad input ends with one clear error line.

mod cli_process;
#[path = "../../oxinfer/tests/common/mod.rs"]
mod common;

use cli_process::{assert_fails_with, ok, oxinfer};
use common::{fixtures, max_abs_diff, read_npy_f32, scratch_dir};

#[test]
fn image_matches_diffusers_and_writes_a_png() {
    let tmp = scratch_dir("image-cli");
    for (v, w, h, euler_a) in [
        ("tiny_sd1", "64", "64", false),
        ("tiny_sd2", "64", "48", true),
    ] {
        let dir = fixtures().join(v);
        let r = common::reference(&dir.join("reference"));
        let refp = |f: &str| dir.join("reference").join(f);
        let (lat, img, png) = (
            tmp.join(format!("{v}-lat.npy")),
            tmp.join(format!("{v}-img.npy")),
            tmp.join(format!("{v}.png")),
        );
        let mut args = vec![
            "image".to_string(),
            "-m".into(),
            dir.display().to_string(),
            "-p".into(),
            r["prompt"].as_str().unwrap().into(),
            "-n".into(),
            r["negative_prompt"].as_str().unwrap().into(),
            "--steps".into(),
            "4".into(),
            "--cfg".into(),
            "7.5".into(),
            "--width".into(),
            w.into(),
            "--height".into(),
            h.into(),
            "--init-noise".into(),
            refp("init_noise.npy").display().to_string(),
            "--dump-latents".into(),
            lat.display().to_string(),
            "--dump-image".into(),
            img.display().to_string(),
            "-o".into(),
            png.display().to_string(),
        ];
        if euler_a {
            args.extend([
                "--step-noise".into(),
                refp("step_noise.npy").display().to_string(),
            ]);
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let (_, err) = ok(oxinfer(&argv));
        assert!(err.contains("wrote"), "{err}");
        let d = max_abs_diff(
            &read_npy_f32(&lat).1,
            &read_npy_f32(&refp("final_latents.npy")).1,
        );
        assert!(d < 1e-4 * 60.0, "{v} latents: {d:e}");
        let d = max_abs_diff(&read_npy_f32(&img).1, &read_npy_f32(&refp("image.npy")).1);
        assert!(d < 1e-4, "{v} image: {d:e}");
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{v}: not a PNG");
        // IHDR: width and height, big-endian, at bytes 16..24.
        let dim = |o: usize| u32::from_be_bytes(bytes[o..o + 4].try_into().unwrap());
        assert_eq!(
            (dim(16).to_string(), dim(20).to_string()),
            (w.to_string(), h.to_string())
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn bad_image_input_is_one_clear_error() {
    let dir = fixtures().join("tiny_sd1");
    let d = dir.display().to_string();
    let o = oxinfer(&[
        "image",
        "-m",
        &d,
        "-p",
        "x",
        "--width",
        "60",
        "--steps",
        "1",
        "-o",
        "/dev/null",
    ]);
    assert_fails_with(&o, &["width = 60", "multiple of 8"]);
    let o = oxinfer(&["image", "-m", "/nonexistent/sd", "-p", "x"]);
    assert_fails_with(&o, &["model_index.json", "missing"]);
    let noise = dir.join("reference/vae_in.npy").display().to_string();
    let o = oxinfer(&[
        "image",
        "-m",
        &d,
        "-p",
        "x",
        "--width",
        "64",
        "--height",
        "64",
        "--init-noise",
        &noise,
    ]);
    assert_fails_with(
        &o,
        &[
            "--init-noise",
            "shape [1, 4, 3, 5]",
            "expected [1, 4, 8, 8]",
        ],
    );
    let o = oxinfer(&["image", "-m", &d, "-p", "x", "--scheduler", "plms"]);
    assert_fails_with(&o, &["--scheduler plms", "unknown"]);
    let readme = fixtures().join("../../README.md").display().to_string();
    let o = oxinfer(&["image", "-m", &d, "-p", "x", "--init", &readme]);
    assert_fails_with(&o, &["--init", "README.md"]);
}

#[test]
fn image_to_image_from_a_png() {
    let tmp = scratch_dir("image-cli-i2i");
    let d = fixtures().join("tiny_sd1").display().to_string();
    let (a, b) = (tmp.join("a.png"), tmp.join("b.png"));
    let (a_s, b_s) = (a.display().to_string(), b.display().to_string());
    ok(oxinfer(&[
        "image", "-m", &d, "-p", "a cat", "--steps", "2", "--width", "64", "--height", "48", "-o",
        &a_s,
    ]));
    // Image to image from a.png, written to `out`, by the model named by `model`.
    let img2img = |model: &[&str], out: &str| {
        let tail = [
            "-p",
            "a dog",
            "--steps",
            "4",
            "--init",
            &a_s,
            "--strength",
            "0.5",
            "--scheduler",
            "ddim",
            "-o",
            out,
        ];
        ok(oxinfer(&[&["image"], model, &tail].concat()))
    };
    let (_, err) = img2img(&["-m", &d], &b_s);
    assert!(err.contains("64x48"), "{err}");
    // The same run from the single-file (LDM) checkpoint writes the same PNG.
    let ldm = fixtures()
        .join("tiny_sd1_ldm/tiny_sd1.safetensors")
        .display()
        .to_string();
    let c = tmp.join("c.png").display().to_string();
    img2img(&["-m", &ldm, "--config", &d], &c);
    assert_eq!(std::fs::read(&b).unwrap(), std::fs::read(&c).unwrap());
    let o = oxinfer(&["image", "-m", &ldm, "-p", "x"]);
    assert_fails_with(&o, &["single file", "--config"]);
    let o = oxinfer(&[
        "image", "-m", &d, "-p", "x", "--init", &a_s, "--width", "32",
    ]);
    assert_fails_with(&o, &["--width 32", "--init image's 64"]);
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Runs the tiny SD 2.x single file (tokenizer given) with `flags`, the prompts of reference
/// `r`, 2 steps at 24 x 16 from the fixture's initial noise, checks the image against `want`
/// (within 1e-4; `what` names the run) and returns the command's stderr.
fn sd2_single_file_image(
    tmp: &std::path::Path,
    r: &serde_json::Value,
    flags: &[&str],
    want: &std::path::Path,
    what: &str,
) -> String {
    let img = tmp.join("sd2.npy").display().to_string();
    let (model, tokenizer) = (
        fx("tiny_sd_single/sd2.safetensors"),
        fx("tiny_sd1/tokenizer"),
    );
    let noise = fx("tiny_sd_single/reference/sd2_init_noise.npy");
    let png = tmp.join("sd2.png").display().to_string();
    let mut args = vec!["image", "-m", &model, "--tokenizer", &tokenizer];
    args.extend_from_slice(flags);
    args.extend([
        "-p",
        r["prompt"].as_str().unwrap(),
        "-n",
        r["negative_prompt"].as_str().unwrap(),
        "--steps",
        "2",
        "--width",
        "24",
        "--height",
        "16",
        "--init-noise",
        &noise,
        "--dump-image",
        &img,
        "-o",
        &png,
    ]);
    let (_, err) = ok(oxinfer(&args));
    let d = max_abs_diff(
        &read_npy_f32(std::path::Path::new(&img)).1,
        &read_npy_f32(want).1,
    );
    assert!(d < 1e-4, "{what} image: {d:e}");
    err
}

/// The path of `rel` under the fixtures, as a string argument.
fn fx(rel: &str) -> String {
    fixtures().join(rel).display().to_string()
}

/// An SD 2.x single file without --config (configs inferred, tokenizer given) and an LCM
/// folder with its defaults (4 steps, guidance 8.5 as a w-embedding) write what diffusers
/// computed; tiled decoding runs from the command line.
#[test]
fn single_file_lcm_and_tiling_from_the_command_line() {
    let tmp = scratch_dir("image-cli-sd2-lcm");
    let r = common::reference(&fixtures().join("tiny_sd_single/reference"));
    let want = fixtures().join("tiny_sd_single/reference/sd2_image.npy");
    let err = sd2_single_file_image(&tmp, &r, &[], &want, "sd2 single file");
    assert!(
        err.contains("SD 2.x") && err.contains("v_prediction") && err.contains("'v2'"),
        "{err}"
    );

    let lat = tmp.join("lcm.npy").display().to_string();
    let (_, err) = ok(oxinfer(&[
        "image",
        "-m",
        &fx("tiny_lcm"),
        "-p",
        "a photo of an astronaut riding a horse on the moon",
        "--width",
        "64",
        "--height",
        "64",
        "--init-noise",
        &fx("tiny_lcm/reference/init_noise.npy"),
        "--step-noise",
        &fx("tiny_lcm/reference/step_noise.npy"),
        "--dump-latents",
        &lat,
        "-o",
        &tmp.join("lcm.png").display().to_string(),
    ]));
    assert!(err.contains("4 steps"), "{err}");
    let want = read_npy_f32(&fixtures().join("tiny_lcm/reference/final_latents.npy")).1;
    let d = max_abs_diff(&read_npy_f32(std::path::Path::new(&lat)).1, &want);
    assert!(d < 1e-4 * 10.0, "LCM latents: {d:e}");

    // Tiled and whole decodes of the same latents differ only near the seams.
    let d = fx("tiny_sd1");
    let run = |tiling: &str| {
        let out = tmp.join(format!("t-{tiling}.npy"));
        let o = out.display().to_string();
        ok(oxinfer(&[
            "image",
            "-m",
            &d,
            "-p",
            "a cat",
            "--steps",
            "1",
            "--width",
            "104",
            "--height",
            "80",
            "--vae-tiling",
            tiling,
            "--dump-image",
            &o,
            "-o",
            "/dev/null",
        ]));
        read_npy_f32(&out).1
    };
    let (tiled, whole) = (run("on"), run("off"));
    assert_eq!(tiled.len(), 3 * 104 * 80);
    assert!(max_abs_diff(&tiled, &whole) > 1e-3);
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `--batch 3` with diffusers' batched noise (tiny_sd1's `reference/batch_*`: 64x48, guidance,
/// Euler ancestral) writes out-1.png ... out-3.png and the `[3, ...]` latents and images
/// diffusers computed; a batch out of range and noise of one image are one clear error line.
#[test]
fn batch_writes_n_pngs_and_matches_diffusers() {
    let tmp = scratch_dir("image-cli-batch");
    let dir = fixtures().join("tiny_sd1");
    let d = dir.display().to_string();
    let r = common::reference(&dir.join("reference"));
    let refp = |f: &str| dir.join("reference").join(f).display().to_string();
    let (lat, img) = (tmp.join("lat.npy"), tmp.join("img.npy"));
    let (lat_s, img_s) = (lat.display().to_string(), img.display().to_string());
    let out = tmp.join("out.png").display().to_string();
    let (init, steps) = (refp("batch_init_noise.npy"), refp("batch_step_noise.npy"));
    let (_, err) = ok(oxinfer(&[
        "image",
        "-m",
        &d,
        "-p",
        r["prompt"].as_str().unwrap(),
        "-n",
        r["negative_prompt"].as_str().unwrap(),
        "--steps",
        "4",
        "--cfg",
        "7.5",
        "--scheduler",
        "euler-a",
        "--width",
        "64",
        "--height",
        "48",
        "--batch",
        "3",
        "--init-noise",
        &init,
        "--step-noise",
        &steps,
        "--dump-latents",
        &lat_s,
        "--dump-image",
        &img_s,
        "-o",
        &out,
    ]));
    assert!(err.contains("3 images"), "{err}");
    for i in 1..=3 {
        let p = tmp.join(format!("out-{i}.png"));
        assert!(err.contains(&p.display().to_string()), "{err}");
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(
            &bytes[..8],
            b"\x89PNG\r\n\x1a\n",
            "{}: not a PNG",
            p.display()
        );
        let dim = |o: usize| u32::from_be_bytes(bytes[o..o + 4].try_into().unwrap());
        assert_eq!((dim(16), dim(20)), (64, 48));
    }
    assert!(!tmp.join("out.png").exists());
    let (shape, got) = read_npy_f32(&lat);
    assert_eq!(shape, [3, 4, 6, 8]);
    let d_lat = max_abs_diff(
        &got,
        &read_npy_f32(&dir.join("reference/batch_final_latents.npy")).1,
    );
    assert!(d_lat < 1e-4 * 60.0, "batch latents: {d_lat:e}");
    let (shape, got) = read_npy_f32(&img);
    assert_eq!(shape, [3, 3, 48, 64]);
    let d_img = max_abs_diff(
        &got,
        &read_npy_f32(&dir.join("reference/batch_image.npy")).1,
    );
    assert!(d_img < 1e-4, "batch images: {d_img:e}");

    for bad in ["0", "17"] {
        let o = oxinfer(&["image", "-m", &d, "-p", "x", "--batch", bad]);
        assert_fails_with(&o, &[&format!("--batch {bad}"), "between 1 and 16"]);
    }
    let one = refp("init_noise.npy");
    let o = oxinfer(&[
        "image",
        "-m",
        &d,
        "-p",
        "x",
        "--width",
        "64",
        "--height",
        "64",
        "--batch",
        "2",
        "--init-noise",
        &one,
    ]);
    assert_fails_with(
        &o,
        &[
            "--init-noise",
            "shape [1, 4, 8, 8]",
            "expected [2, 4, 8, 8]",
        ],
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

/// The SD 2.x single file run as an epsilon model with `leading` timesteps (what the file cannot
/// tell, given as flags) writes what diffusers' `from_single_file` computed with those values;
/// the built-in tokenizer refuses the tiny vocabulary with one error line, and the flags are
/// refused for a folder.
#[test]
fn single_file_flags_for_what_the_file_cannot_tell() {
    let tmp = scratch_dir("image-cli-single-flags");
    let r = common::reference(&fixtures().join("tiny_sd_single_variants/reference"));
    let sd2 = fx("tiny_sd_single/sd2.safetensors");
    let flags = [
        "--prediction-type",
        "epsilon",
        "--image-size",
        "512",
        "--timestep-spacing",
        "leading",
    ];
    let want = fixtures().join("tiny_sd_single_variants/reference/sd2_base_image.npy");
    let err = sd2_single_file_image(&tmp, &r, &flags, &want, "sd2 as epsilon/leading");
    assert!(
        err.contains("epsilon (given)") && err.contains("leading timesteps (given)"),
        "{err}"
    );
    let o = oxinfer(&["image", "-m", &sd2, "-p", "x"]);
    assert_fails_with(&o, &["sd2.safetensors", "634", "built-in CLIP tokenizer"]);
    let o = oxinfer(&[
        "image",
        "-m",
        &fx("tiny_sd1"),
        "-p",
        "x",
        "--prediction-type",
        "epsilon",
    ]);
    assert_fails_with(&o, &["single-file", "folder"]);
    let _ = std::fs::remove_dir_all(&tmp);
}
