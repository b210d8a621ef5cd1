//! LoRA files fused into tiny_sd1 at load against diffusers 0.42 float32
//! (`tools/ref/make_sd_lora.py`: `pipe.load_lora_weights(file)` + `pipe.fuse_lora(lora_scale)`),
//! `tests/fixtures/tiny_sd1_lora`: the kohya form (UNet and text encoder, float16, alphas) at
//! scale 0.8, the diffusers / peft form at scale 1, the kohya form with LDM module names, and
//! the kohya LoRA with the LCM scheduler at guidance 1 (LCM-LoRA's usage); Euler 4 steps
//! otherwise; the kohya case over tiny_sd1's LDM single file gives the folder's latents. Final
//! latents (scaled) and images within 1e-4. Bad files (a key of no known form,
//! a module for a weight the model lacks, a misshapen module, a missing up matrix) are one
//! error naming the key.

mod common;

use common::safetensors_raw::{read_raw_tensors, write_raw_tensors, RawTensor};
use common::{fixtures, max_abs_diff, read_npy_f32, scaled_diff, scratch_dir};
use oxinfer::arch::diffusion::{LoraSpec, PipelineSource, SchedulerKind, StableDiffusion};
use std::path::{Path, PathBuf};

const TOL: f32 = 1e-4;

fn lora_dir() -> PathBuf {
    fixtures().join("tiny_sd1_lora")
}

/// tiny_sd1 with `loras` fused.
fn open(loras: &[LoraSpec]) -> Result<StableDiffusion, String> {
    let dir = fixtures().join("tiny_sd1");
    StableDiffusion::open_with(PipelineSource::Folder(&dir), None, loras)
        .map(|(sd, _)| sd)
        .map_err(|e| e.to_string())
}

#[test]
fn fused_loras_match_diffusers() {
    let dir = lora_dir();
    let refs = dir.join("reference");
    let r = common::reference(&refs);
    let npy = |n: &str| read_npy_f32(&refs.join(format!("{n}.npy"))).1;
    let (w, h) = (
        r["width"].as_u64().unwrap() as usize,
        r["height"].as_u64().unwrap() as usize,
    );
    for (name, case) in r["cases"].as_object().unwrap() {
        // diffusers loads the LDM-named file's LoRA under diffusers' names (see the script).
        let file = match name.as_str() {
            "ldm_s1" => Some("ldm.safetensors".to_string()),
            _ => case["lora"].as_str().map(String::from),
        };
        let loras: Vec<LoraSpec> = file
            .iter()
            .map(|f| LoraSpec {
                path: dir.join(f),
                scale: case["lora_scale"].as_f64().unwrap() as f32,
            })
            .collect();
        let sd = open(&loras).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut req = common::sd_request(&r, 4, (w, h), npy("noise"));
        req.guidance_scale = case["guidance_scale"].as_f64().unwrap() as f32;
        req.scheduler = SchedulerKind::parse(case["scheduler"].as_str().unwrap());
        if req.scheduler == Some(SchedulerKind::Lcm) {
            req.step_noise = Some(npy("lcm_step_noise"));
        }
        let out = sd.generate(&req, &mut |_, _, _| {}).unwrap();
        if name == "kohya_s08" {
            // The same LoRA over tiny_sd1 as one LDM file: the same weights, the same result.
            let file = fixtures().join("tiny_sd1_ldm/tiny_sd1.safetensors");
            let config = fixtures().join("tiny_sd1");
            let source = PipelineSource::SingleFile {
                file: &file,
                config: &config,
            };
            let single = StableDiffusion::open_with(source, None, &loras).unwrap().0;
            let one = single.generate(&req, &mut |_, _, _| {}).unwrap();
            assert_eq!(one.latents, out.latents, "single file against the folder");
        }
        let d = scaled_diff(&out.latents, &npy(&format!("{name}_latents")));
        let di = max_abs_diff(&out.image, &npy(&format!("{name}_image")));
        eprintln!("lora {name}: latents scaled diff {d:.2e}, image max abs diff {di:.2e}");
        assert!(d < TOL && di < TOL, "{name}: latents {d:e}, image {di:e}");
    }
}

/// The kohya fixture with `edit` applied to its tensors, written to `tmp/name`.
fn variant(tmp: &Path, name: &str, edit: impl FnOnce(&mut Vec<RawTensor>)) -> LoraSpec {
    let mut t = read_raw_tensors(&lora_dir().join("kohya.safetensors"));
    edit(&mut t);
    let path = tmp.join(name);
    write_raw_tensors(&path, &t);
    LoraSpec { path, scale: 1.0 }
}

#[test]
fn bad_lora_files_are_one_error_naming_the_key() {
    let tmp = scratch_dir("sd-lora-bad");
    let conv = "lora_unet_up_blocks_0_resnets_0_conv1";
    let rename = |t: &mut Vec<RawTensor>, from: &str, to: &str| {
        for x in t.iter_mut() {
            if let Some(rest) = x.0.strip_prefix(from) {
                x.0 = format!("{to}{rest}");
            }
        }
    };
    let cases: Vec<(LoraSpec, Vec<&str>)> = vec![
        (
            variant(&tmp, "unknown.safetensors", |t| {
                rename(
                    t,
                    &format!("{conv}.lora_down"),
                    &format!("{conv}.hada_w1_a"),
                )
            }),
            vec!["unknown.safetensors", "hada_w1_a", "known form"],
        ),
        (
            variant(&tmp, "other.safetensors", |t| {
                rename(t, conv, "lora_unet_up_blocks_7_resnets_0_conv1")
            }),
            vec!["up_blocks_7_resnets_0_conv1", "targets no weight"],
        ),
        (
            variant(&tmp, "shape.safetensors", |t| {
                let x = t
                    .iter_mut()
                    .find(|x| x.0 == format!("{conv}.lora_down.weight"))
                    .unwrap();
                x.2[1] /= 2;
                x.3.truncate(x.3.len() / 2);
            }),
            vec![conv, "do not fit", "up_blocks.0.resnets.0.conv1.weight"],
        ),
        (
            variant(&tmp, "noup.safetensors", |t| {
                t.retain(|x| x.0 != format!("{conv}.lora_up.weight"))
            }),
            vec![conv, "no up"],
        ),
    ];
    for (spec, want) in cases {
        let e = match open(std::slice::from_ref(&spec)) {
            Ok(_) => panic!("{}: loaded", spec.path.display()),
            Err(e) => e,
        };
        for w in want {
            assert!(e.contains(w), "{e} lacks {w}");
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
