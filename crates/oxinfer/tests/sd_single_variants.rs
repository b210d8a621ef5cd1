//! Single files loaded as diffusers' `from_single_file` loads them with no config
//! (`tools/ref/make_sd_single_variants.py`, `tests/fixtures/tiny_sd_single_variants`):
//! - the model type, hub repo, image size, prediction type and UNet / VAE configs diffusers 0.42
//!   infers from the tensor shapes of SD 1.5, SD 2.1 and the v1 / v2 inpainting UNets (real
//!   geometry, shapes only), against the engine's inference from the same shapes;
//! - the tiny single files run as diffusers runs them (`from_single_file(config=...)`): v1, v2
//!   (v-prediction) and v2 as an epsilon model with `leading` timesteps (SD 2.x base / SD-Turbo
//!   style, which the file cannot tell: given as options): text embeddings, final latents, image;
//! - files of no known family and a vocabulary the built-in tokenizer does not fit end in one
//!   error naming the file; an inpainting file loads as diffusers' 'inpainting' type and refuses
//!   a request without a mask.

mod common;

use common::safetensors_raw::{read_raw_tensors, write_raw_tensors};
use common::{
    fixture_json, fixtures, max_abs_diff, read_npy_f32, scaled_diff, scratch_dir, sd_request,
};
use oxinfer::arch::diffusion::ldm_config::{self, Family};
use oxinfer::arch::diffusion::ldm_model_type::{prediction_name, ModelType, SingleFileOptions};
use oxinfer::arch::diffusion::scheduler::{Prediction, Spacing};
use oxinfer::arch::diffusion::{PipelineSource, StableDiffusion};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

const TOL: f32 = 1e-4;

/// The shapes of a `model_types.json` entry (an inpainting one: its base's, changed).
fn shapes_of(all: &Value, name: &str) -> BTreeMap<String, Vec<usize>> {
    let e = &all[name];
    let (base, changed) = match e["shapes_of"].as_str() {
        Some(b) => (&all[b]["shapes"], Some(&e["changed_shapes"])),
        None => (&e["shapes"], None),
    };
    let mut out: BTreeMap<String, Vec<usize>> = serde_json::from_value(base.clone()).unwrap();
    if let Some(c) = changed {
        let c: BTreeMap<String, Vec<usize>> = serde_json::from_value(c.clone()).unwrap();
        out.extend(c);
    }
    out
}

#[test]
fn model_types_and_configs_match_diffusers_on_real_geometry() {
    let all = fixture_json("tiny_sd_single_variants/model_types.json");
    for (name, want) in all.as_object().unwrap() {
        let shapes = shapes_of(&all, name);
        let path = Path::new(name);
        let got = ldm_config::infer_shapes(
            path,
            shapes.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
            SingleFileOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let m = got.model;
        assert_eq!(m.model_type.name(), want["model_type"], "{name}");
        assert_eq!(m.model_type.hub_repo(), want["hub"], "{name}");
        assert_eq!(m.image_size as u64, want["image_size"], "{name}");
        assert_eq!(
            prediction_name(m.prediction),
            want["prediction_type"],
            "{name}"
        );
        assert_eq!(
            got.scheduler["prediction_type"], want["prediction_type"],
            "{name}"
        );
        for (k, v) in want["unet"].as_object().unwrap() {
            // diffusers may write one value for every block (a head count, a transformer
            // depth) where the engine writes one per block.
            let g = &got.unet[k];
            let per_block = g.as_array().is_some_and(|a| a.iter().all(|x| x == v));
            assert!(
                g == v || per_block,
                "{name}: unet.{k}: engine {g}, diffusers {v}"
            );
        }
        for (k, v) in want["vae"].as_object().unwrap() {
            assert_eq!(&got.vae[k], v, "{name}: vae.{k}");
        }
        let family = match m.model_type {
            ModelType::V1 | ModelType::Inpainting => Family::Sd1,
            _ => Family::Sd2,
        };
        assert_eq!(m.family, family, "{name}");
        eprintln!(
            "{name}: model type {} as diffusers, configs equal",
            m.model_type.name()
        );
    }
}

#[test]
fn tiny_single_files_run_as_from_single_file() {
    let dir = fixtures().join("tiny_sd_single_variants/reference");
    let r = common::reference(&dir);
    let npy = |name: &str| read_npy_f32(&dir.join(format!("{name}.npy"))).1;
    let tokenizer = fixtures().join("tiny_sd1/tokenizer");
    for run in ["sd1", "sd2", "sd2_base"] {
        let file = fixtures().join(r[run]["file"].as_str().unwrap());
        let options = if run == "sd2_base" {
            SingleFileOptions {
                prediction: Some(Prediction::Epsilon),
                spacing: Some(Spacing::Leading),
                image_size: Some(512),
            }
        } else {
            SingleFileOptions::default()
        };
        let source = PipelineSource::SingleFileInferred {
            file: &file,
            tokenizer: Some(&tokenizer),
            options,
        };
        let (sd, m) = StableDiffusion::open(source, None).unwrap();
        let m = m.unwrap();
        assert_eq!(prediction_name(m.prediction), r[run]["prediction_type"]);
        let emb = sd.encode_prompt(r["prompt"].as_str().unwrap()).unwrap();
        let de = max_abs_diff(&emb, &npy(&format!("{run}_text_embeddings")));
        let fam = &run[..3];
        let noise = fixtures().join(format!("tiny_sd_single/reference/{fam}_init_noise.npy"));
        let req = sd_request(&r, 2, (24, 16), read_npy_f32(&noise).1);
        let out = sd.generate(&req, &mut |_, _, _| {}).unwrap();
        let dl = scaled_diff(&out.latents, &npy(&format!("{run}_final_latents")));
        let di = max_abs_diff(&out.image, &npy(&format!("{run}_image")));
        eprintln!(
            "{run} ({}): text embeddings {de:.2e}, final latents scaled {dl:.2e}, image {di:.2e}",
            m.describe()
        );
        assert!(
            de < TOL && dl < TOL && di < TOL,
            "{run}: {de:e} {dl:e} {di:e}"
        );
    }
}

/// Loads `file` with configs inferred and the built-in tokenizer; the error text.
fn inferred_error(file: &Path) -> String {
    let source = PipelineSource::SingleFileInferred {
        file,
        tokenizer: None,
        options: SingleFileOptions::default(),
    };
    match StableDiffusion::open(source, None) {
        Ok(_) => panic!("{} loaded", file.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn single_files_that_cannot_run_are_one_clear_error() {
    let tmp = scratch_dir("sd-single-variants");
    let sd1 = read_raw_tensors(&fixtures().join("tiny_sd_single/sd1.safetensors"));
    // An inpainting UNet: conv_in over 9 channels.
    let conv_in = "model.diffusion_model.input_blocks.0.0.weight";
    let inpaint: Vec<_> = sd1
        .iter()
        .cloned()
        .map(|(k, dt, mut shape, mut b)| {
            if k == conv_in {
                shape[1] = 9;
                b = vec![0u8; shape.iter().product::<usize>() * 2];
            }
            (k, dt, shape, b)
        })
        .collect();
    let file = tmp.join("inpaint.safetensors");
    write_raw_tensors(&file, &inpaint);
    // It loads as diffusers' 'inpainting' type; a request without a mask is refused.
    let tokenizer = fixtures().join("tiny_sd1/tokenizer");
    let source = PipelineSource::SingleFileInferred {
        file: &file,
        tokenizer: Some(&tokenizer),
        options: SingleFileOptions::default(),
    };
    let (sd, inferred) = StableDiffusion::open(source, None).expect("inpainting single file");
    assert_eq!(inferred.map(|m| m.model_type), Some(ModelType::Inpainting));
    assert!(sd.is_inpainting());
    let req = sd_request(
        &fixture_json("tiny_sd_single/reference/reference.json"),
        1,
        (16, 16),
        vec![0.0; 4 * 8 * 8],
    );
    let e = sd
        .generate(&req, &mut |_, _, _| {})
        .err()
        .expect("no mask")
        .to_string();
    assert!(e.contains("inpainting model") && e.contains("mask"), "{e}");
    // No text encoder of a known layout.
    let unet_only: Vec<_> = sd1
        .iter()
        .filter(|t| t.0.starts_with("model.diffusion_model."))
        .cloned()
        .collect();
    let file = tmp.join("unet_only.safetensors");
    write_raw_tensors(&file, &unet_only);
    let e = inferred_error(&file);
    assert!(
        e.contains("unet_only.safetensors") && e.contains("no text encoder"),
        "{e}"
    );
    // An SDXL-style file.
    let mut xl = unet_only.clone();
    xl.push((
        "conditioner.embedders.0.transformer.text_model.embeddings.token_embedding.weight".into(),
        "F16".into(),
        vec![2, 2],
        vec![0; 8],
    ));
    let file = tmp.join("xl.safetensors");
    write_raw_tensors(&file, &xl);
    let e = inferred_error(&file);
    assert!(e.contains("xl.safetensors") && e.contains("SDXL"), "{e}");
    // The tiny vocabulary (634 tokens) with the built-in tokenizer (49,408).
    let e = inferred_error(&fixtures().join("tiny_sd_single/sd1.safetensors"));
    assert!(
        e.contains("sd1.safetensors") && e.contains("634") && e.contains("49408"),
        "{e}"
    );
    // An image size that is not a multiple of the VAE's scale.
    let source = PipelineSource::SingleFileInferred {
        file: &fixtures().join("tiny_sd_single/sd1.safetensors"),
        tokenizer: None,
        options: SingleFileOptions {
            image_size: Some(511),
            ..Default::default()
        },
    };
    let e = StableDiffusion::open(source, None)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("511"), "{e}");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A single file with CLIP's 49,408-token vocabulary loads with nothing else: the built-in
/// tokenizer is used and its ids reach the text encoder (the SD 1.x file with its token
/// embedding grown to 49,408 rows; the tiny vocabulary's rows kept, the rest zero).
#[test]
fn full_vocabulary_single_file_uses_the_builtin_tokenizer() {
    let tmp = scratch_dir("sd-single-builtin");
    let emb = "cond_stage_model.transformer.text_model.embeddings.token_embedding.weight";
    let grown: Vec<_> = read_raw_tensors(&fixtures().join("tiny_sd_single/sd1.safetensors"))
        .into_iter()
        .map(|(k, dt, mut shape, mut b)| {
            if k == emb {
                shape[0] = 49408;
                b.resize(shape.iter().product::<usize>() * 2, 0);
            }
            (k, dt, shape, b)
        })
        .collect();
    let file = tmp.join("sd1_full_vocab.safetensors");
    write_raw_tensors(&file, &grown);
    let (sd, m) = StableDiffusion::load_single_file_inferred(&file, None).unwrap();
    assert!(m.builtin_tokenizer && m.describe().contains("built-in CLIP"));
    let ids = sd
        .tokenizer
        .encode_padded("a photo of an astronaut")
        .unwrap();
    assert_eq!(&ids[..3], &[49406, 320, 1125], "<|startoftext|> a photo");
    assert_eq!(ids[76], 49407, "SD 1.x pads with <|endoftext|>");
    let e = sd.encode_prompt("a photo of an astronaut").unwrap();
    assert!(e.len() == 77 * 64 && e.iter().all(|v| v.is_finite()));
    let _ = std::fs::remove_dir_all(&tmp);
}
