//! Stable Diffusion against diffusers 0.42 / transformers 5 float32 on the tiny random pipelines
//! of `tools/ref/make_tiny_sd.py`: `tests/fixtures/tiny_sd1` (SD 1.x style: quick_gelu, conv
//! `proj_in`, epsilon, Euler) and `tiny_sd2` (SD 2.x style: gelu, "!" padding, linear `proj_in`,
//! per-block heads, v-prediction, Euler ancestral with `leading` spacing and recorded noise).
//! Checked: tokenizer ids, text embeddings, every UNet call, the VAE decoder, the whole pipeline's
//! step latents, final latents and image; and the scheduler maths of Euler, Euler ancestral,
//! DDIM, DPM-Solver++ 2M (plain and Karras; linspace, leading and trailing spacings; epsilon
//! and v-prediction) and LCM (epsilon; v-prediction with clipping). A batch of three images
//! of one prompt (diffusers' `num_images_per_prompt`, tiny_sd1's `reference/batch_*`) matches
//! too, and image `i` of a seeded batch is the image of seed + `i` made alone. Image to image
//! with the default schedulers and, on tiny_sd1, with the LCM scheduler (the schedule cut as
//! `StableDiffusionImg2ImgPipeline` does; LCM-distilled UNets are in `sd_lcm_turbo.rs`).

mod common;

use common::{fixtures, ids, max_abs_diff, read_npy_f32, scaled_diff};
use oxinfer::arch::diffusion::config::JsonConfig;
use oxinfer::arch::diffusion::scheduler::ScheduleConfig;
use oxinfer::arch::diffusion::{
    DiffusionError, FeatureMap, GenerateRequest, Scheduler, SchedulerKind, StableDiffusion,
};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::OnceLock;

const TOL: f32 = 1e-4;

/// The fixture pipelines.
const VARIANTS: [&str; 2] = ["tiny_sd1", "tiny_sd2"];

/// One fixture: its folder, references and loaded pipeline.
struct Fixture {
    dir: PathBuf,
    reference: Value,
    pipeline: StableDiffusion,
}

impl Fixture {
    fn npy(&self, name: &str) -> (Vec<usize>, Vec<f32>) {
        read_npy_f32(&self.dir.join("reference").join(format!("{name}.npy")))
    }
}

fn fixture(name: &str) -> &'static Fixture {
    static F: OnceLock<Vec<Fixture>> = OnceLock::new();
    let all = F.get_or_init(|| {
        VARIANTS
            .iter()
            .map(|v| {
                let dir = fixtures().join(v);
                Fixture {
                    reference: common::reference(&dir.join("reference")),
                    pipeline: StableDiffusion::load(&dir).unwrap_or_else(|e| panic!("{v}: {e}")),
                    dir,
                }
            })
            .collect()
    });
    &all[VARIANTS.iter().position(|v| *v == name).expect("variant")]
}

/// The SD1 fixture, for the checks that need only one.
fn sd1() -> &'static Fixture {
    fixture("tiny_sd1")
}

#[test]
fn tokenizer_ids_match_transformers() {
    for v in VARIANTS {
        let f = fixture(v);
        for case in f.reference["tokenizer_cases"].as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            let got = f.pipeline.tokenizer.encode_padded(text).unwrap();
            assert_eq!(got, ids(&case["ids"]), "{v}: text {text:?}");
        }
    }
}

#[test]
fn text_embeddings_match() {
    for v in VARIANTS {
        let f = fixture(v);
        let (shape, want) = f.npy("text_embeddings");
        let r = &f.reference;
        let row = shape[1] * shape[2];
        let texts = [
            r["negative_prompt"].as_str().unwrap(),
            r["prompt"].as_str().unwrap(),
        ];
        for (i, text) in texts.iter().enumerate() {
            let got = f.pipeline.encode_prompt(text).unwrap();
            let d = max_abs_diff(&got, &want[i * row..(i + 1) * row]);
            eprintln!("{v} text embeddings {i}: max abs diff {d:.2e}");
            assert!(d < TOL, "{v} text {i}: max diff {d:e}");
        }
    }
}

#[test]
fn unet_each_step_matches() {
    for v in VARIANTS {
        let f = fixture(v);
        let (shape, inputs) = f.npy("unet_in");
        let (_, outputs) = f.npy("unet_out");
        let (_, emb) = f.npy("text_embeddings");
        let (batch, c, h, w) = (shape[1], shape[2], shape[3], shape[4]);
        let ts = f.reference["unet_timesteps"].as_array().unwrap();
        let n = c * h * w;
        let ctx = emb.len() / batch;
        let mut worst = 0f32;
        for (s, t) in ts.iter().enumerate().take(shape[0]) {
            for b in 0..batch {
                let o = (s * batch + b) * n;
                let x = FeatureMap::from_chw(&inputs[o..o + n], c, h, w);
                let t = t.as_f64().unwrap() as f32;
                let got = f
                    .pipeline
                    .unet
                    .forward(&x, t, &emb[b * ctx..(b + 1) * ctx])
                    .unwrap()
                    .to_chw();
                let d = scaled_diff(&got, &outputs[o..o + n]);
                worst = worst.max(d);
                assert!(d < TOL, "{v} step {s} batch {b}: scaled max diff {d:e}");
            }
            // The whole batch as one call (classifier-free guidance's shape), each image with
            // its own text.
            let o = s * batch * n..(s + 1) * batch * n;
            let x = FeatureMap::from_nchw(&inputs[o.clone()], batch, c, h, w);
            let t = t.as_f64().unwrap() as f32;
            let got = f.pipeline.unet.forward(&x, t, &emb).unwrap();
            assert_eq!(got.images, batch);
            let d = scaled_diff(&got.to_chw(), &outputs[o]);
            worst = worst.max(d);
            assert!(
                d < TOL,
                "{v} step {s}, one batched call: scaled max diff {d:e}"
            );
        }
        eprintln!("{v} UNet, every call: worst scaled max diff {worst:.2e}");
    }
}

#[test]
fn vae_decode_matches() {
    for v in VARIANTS {
        let f = fixture(v);
        let (shape, z) = f.npy("vae_in");
        let (_, want) = f.npy("vae_out");
        let fm = FeatureMap::from_chw(&z, shape[1], shape[2], shape[3]);
        let got = f.pipeline.vae.decode(&fm).unwrap();
        assert_eq!((got.h, got.w, got.c), (24, 40, 3));
        let d = max_abs_diff(&got.to_chw(), &want);
        eprintln!("{v} VAE decode: max abs diff {d:.2e}");
        assert!(d < TOL, "{v}: max diff {d:e}");
    }
}

/// The request the fixture's reference run made, with its recorded noise.
fn reference_request(f: &Fixture) -> GenerateRequest {
    let r = &f.reference;
    let step_noise = f.dir.join("reference/step_noise.npy");
    GenerateRequest {
        prompt: r["prompt"].as_str().unwrap().into(),
        negative_prompt: r["negative_prompt"].as_str().unwrap().into(),
        steps: r["steps"].as_u64().unwrap() as usize,
        guidance_scale: r["guidance_scale"].as_f64().unwrap() as f32,
        width: r["width"].as_u64().unwrap() as usize,
        height: r["height"].as_u64().unwrap() as usize,
        scheduler: None,
        seed: 0,
        init_noise: Some(f.npy("init_noise").1),
        step_noise: step_noise.is_file().then(|| read_npy_f32(&step_noise).1),
        ..Default::default()
    }
}

#[test]
fn pipeline_matches_step_by_step() {
    for v in VARIANTS {
        let f = fixture(v);
        let req = reference_request(f);
        let (_, step_latents) = f.npy("step_latents");
        let n = step_latents.len() / req.steps;
        let mut worst = 0f32;
        let out = f
            .pipeline
            .generate(&req, &mut |i, _, lat| {
                worst = worst.max(scaled_diff(lat, &step_latents[i * n..(i + 1) * n]));
            })
            .unwrap();
        eprintln!("{v} pipeline step latents: worst scaled max diff {worst:.2e}");
        assert!(worst < TOL, "{v} step latents: scaled max diff {worst:e}");
        let (_, latents) = f.npy("final_latents");
        let d = scaled_diff(&out.latents, &latents);
        assert!(d < TOL, "{v} final latents: {d:e}");
        let (_, image) = f.npy("image");
        let d = max_abs_diff(&out.image, &image);
        eprintln!("{v} pipeline image: max abs diff {d:.2e}");
        assert!(d < TOL, "{v} image: max diff {d:e}");
        assert_eq!(out.rgb8(0).len(), req.width * req.height * 3);
    }
}

#[test]
fn vae_encoder_matches() {
    for v in VARIANTS {
        let f = fixture(v);
        let (shape, img) = f.npy("img2img_input");
        let enc = f.pipeline.vae_encoder.as_ref().expect("encoder weights");
        let post = enc
            .encode(&FeatureMap::from_chw(&img, 3, shape[2], shape[3]))
            .unwrap();
        let dm = max_abs_diff(&post.mean.to_chw(), &f.npy("vae_enc_mean").1);
        let ds = max_abs_diff(&post.std.to_chw(), &f.npy("vae_enc_std").1);
        eprintln!("{v} VAE encode: mean max abs diff {dm:.2e}, std {ds:.2e}");
        assert!(dm < TOL && ds < TOL, "{v}: mean {dm:e}, std {ds:e}");
    }
}

#[test]
fn img2img_matches() {
    for v in VARIANTS {
        let f = fixture(v);
        let i2i = &f.reference["img2img"];
        let req = GenerateRequest {
            init_image: Some(f.npy("img2img_input").1),
            strength: i2i["strength"].as_f64().unwrap() as f32,
            encode_noise: Some(f.npy("img2img_enc_noise").1),
            init_noise: Some(f.npy("img2img_noise").1),
            step_noise: Some(f.npy("img2img_step_noise").1),
            ..reference_request(f)
        };
        let mut ran = 0;
        let out = f.pipeline.generate(&req, &mut |_, _, _| ran += 1).unwrap();
        assert_eq!(ran, 3, "{v}: strength 0.75 of 4 steps runs 3");
        let d = scaled_diff(&out.latents, &f.npy("img2img_latents").1);
        let di = max_abs_diff(&out.image, &f.npy("img2img_image").1);
        eprintln!("{v} img2img: latents scaled diff {d:.2e}, image max abs diff {di:.2e}");
        assert!(d < TOL && di < TOL, "{v}: latents {d:e}, image {di:e}");
    }
}

/// tiny_sd1 (no `time_cond_proj_dim`, as an LCM-LoRA fused into SD 1.5) with the LCM
/// scheduler: image to image cuts the whole schedule as diffusers'
/// `StableDiffusionImg2ImgPipeline` with an `LCMScheduler` does (strength 0.75 of 4 steps: the
/// last 3, with guidance), not as the LCM image-to-image pipeline.
#[test]
fn img2img_lcm_scheduler_without_guidance_embedding_matches() {
    let f = sd1();
    let i2i = &f.reference["img2img_lcm"];
    let req = GenerateRequest {
        scheduler: Some(SchedulerKind::Lcm),
        init_image: Some(f.npy("img2img_input").1),
        strength: i2i["strength"].as_f64().unwrap() as f32,
        encode_noise: Some(f.npy("img2img_enc_noise").1),
        init_noise: Some(f.npy("img2img_noise").1),
        step_noise: Some(f.npy("img2img_lcm_step_noise").1),
        ..reference_request(f)
    };
    let mut ran = Vec::new();
    let out = f
        .pipeline
        .generate(&req, &mut |i, _, _| ran.push(i))
        .unwrap();
    assert_eq!(ran, [1, 2, 3], "strength 0.75 of 4 steps runs the last 3");
    let d = scaled_diff(&out.latents, &f.npy("img2img_lcm_latents").1);
    let di = max_abs_diff(&out.image, &f.npy("img2img_lcm_image").1);
    eprintln!("img2img, LCM scheduler: latents scaled diff {d:.2e}, image max abs diff {di:.2e}");
    assert!(d < TOL && di < TOL, "latents {d:e}, image {di:e}");
}

/// The batched reference run: tiny_sd1, three images at 64x48, guidance, Euler ancestral, with
/// diffusers' initial noise `[3, 4, 6, 8]` and per-step noise `[4, 3, 4, 6, 8]`.
fn batch_request(f: &Fixture) -> GenerateRequest {
    let b = &f.reference["batch"];
    GenerateRequest {
        batch: b["images"].as_u64().unwrap() as usize,
        width: b["width"].as_u64().unwrap() as usize,
        height: b["height"].as_u64().unwrap() as usize,
        scheduler: Some(SchedulerKind::EulerAncestral),
        init_noise: Some(f.npy("batch_init_noise").1),
        step_noise: Some(f.npy("batch_step_noise").1),
        ..reference_request(f)
    }
}

#[test]
fn batch_matches_diffusers() {
    let f = sd1();
    let req = batch_request(f);
    assert_eq!(req.batch, 3);
    let (_, step_latents) = f.npy("batch_step_latents");
    let n = step_latents.len() / req.steps;
    let mut worst = 0f32;
    let out = f
        .pipeline
        .generate(&req, &mut |i, _, lat| {
            worst = worst.max(scaled_diff(lat, &step_latents[i * n..(i + 1) * n]));
        })
        .unwrap();
    assert_eq!(out.images, 3);
    assert_eq!((out.width, out.height), (64, 48));
    eprintln!("batch of 3: step latents worst scaled max diff {worst:.2e}");
    assert!(worst < TOL, "batch step latents: scaled max diff {worst:e}");
    let d = scaled_diff(&out.latents, &f.npy("batch_final_latents").1);
    let (shape, image) = f.npy("batch_image");
    assert_eq!(shape, [3, 3, 48, 64]);
    let di = max_abs_diff(&out.image, &image);
    eprintln!("batch of 3: final latents scaled diff {d:.2e}, images max abs diff {di:.2e}");
    assert!(d < TOL && di < TOL, "batch: latents {d:e}, images {di:e}");
    let per = 3 * 48 * 64;
    for i in 0..3 {
        assert_eq!(out.image_chw(i), &out.image[i * per..(i + 1) * per]);
        assert_eq!(out.rgb8(i).len(), 48 * 64 * 3);
    }
}

/// Image `i` of a seeded batch is the image of seed + `i` made alone (batch 1), for
/// text-to-image with every scheduler (Euler ancestral's and LCM's step noise, DPM-Solver++'s
/// history), image-to-image and without guidance: the same noise and maths, equal within float
/// rounding (the UNet's matrix products over 2N images' rows round differently from those over
/// two, by a few 1e-6 here), so the 8-bit pixels differ by at most one level.
#[test]
fn batch_images_are_the_seeded_single_images() {
    let f = sd1();
    let base = GenerateRequest {
        steps: 3,
        width: 48,
        height: 32,
        seed: 40,
        init_noise: None,
        step_noise: None,
        ..reference_request(f)
    };
    let i2i = GenerateRequest {
        init_image: Some(vec![0.25; 3 * 48 * 32]),
        strength: 0.7,
        scheduler: Some(SchedulerKind::Ddim),
        ..base.clone()
    };
    let mut cases: Vec<(String, GenerateRequest)> = [
        SchedulerKind::Euler,
        SchedulerKind::EulerAncestral,
        SchedulerKind::Ddim,
        SchedulerKind::DpmPp2m,
        SchedulerKind::Lcm,
    ]
    .into_iter()
    .map(|k| {
        let req = GenerateRequest {
            scheduler: Some(k),
            ..base.clone()
        };
        (format!("{k:?}"), req)
    })
    .collect();
    cases.push(("image to image".into(), i2i));
    cases.push((
        "no guidance".into(),
        GenerateRequest {
            guidance_scale: 1.0,
            ..base.clone()
        },
    ));
    for (name, req) in cases {
        let batched = GenerateRequest {
            batch: 3,
            ..req.clone()
        };
        let all = f.pipeline.generate(&batched, &mut |_, _, _| {}).unwrap();
        assert_eq!(all.images, 3);
        let per_latents = all.latents.len() / 3;
        for i in 0..3 {
            let alone = GenerateRequest {
                seed: req.seed + i as u64,
                ..req.clone()
            };
            let one = f.pipeline.generate(&alone, &mut |_, _, _| {}).unwrap();
            assert_eq!(one.images, 1);
            let lat = &all.latents[i * per_latents..(i + 1) * per_latents];
            let d = scaled_diff(lat, &one.latents);
            let di = max_abs_diff(all.image_chw(i), &one.image);
            let px = all
                .rgb8(i)
                .iter()
                .zip(one.rgb8(0))
                .map(|(&a, b)| a.abs_diff(b))
                .max()
                .unwrap();
            eprintln!("{name} image {i}: latents scaled diff {d:.2e}, image {di:.2e}, pixels {px}");
            // DDIM from tiny_sd1's Euler config clips its predicted sample to [-1, 1]
            // (diffusers' default), which stops the rounding of x0 = (x - √(1-ᾱ)·ε) / √ᾱ
            // (÷ 0.07 at t = 999) from cancelling in the update: the batched and the lone
            // products' rounding grows about tenfold.
            // (The image-to-image case runs DDIM too, from 3 of its steps: it stays within.)
            let tol = if name == "Ddim" { 10.0 * TOL } else { TOL };
            assert!(
                d < tol && di < tol && px <= 1,
                "{name}: batch image {i} against seed + {i} alone: latents {d:e}, image {di:e}, \
                 pixels {px}"
            );
        }
    }
}

#[test]
fn bad_batches_name_the_argument() {
    let p = &sd1().pipeline;
    let req = GenerateRequest {
        prompt: "x".into(),
        steps: 1,
        width: 64,
        height: 64,
        batch: 0,
        ..Default::default()
    };
    let e = generate_error(p, &req);
    assert!(e.contains("batch = 0"), "{e}");
    // Noise for one image given to a batch of two names the batch's shape.
    let two = GenerateRequest {
        batch: 2,
        init_noise: Some(vec![0.0; 4 * 8 * 8]),
        ..req.clone()
    };
    let e = generate_error(p, &two);
    assert!(
        e.contains("initial noise has 256 values") && e.contains("[2, 4, 8, 8]"),
        "{e}"
    );
    let steps = GenerateRequest {
        batch: 2,
        scheduler: Some(SchedulerKind::EulerAncestral),
        step_noise: Some(vec![0.0; 4 * 8 * 8]),
        ..req
    };
    let e = generate_error(p, &steps);
    assert!(
        e.contains("step noise") && e.contains("[1, 2, 4, 8, 8]"),
        "{e}"
    );
}

/// The UNet stored in float16 (diffusers' `fp16` variant) loads and, computing with its f16
/// weights, stays within f16 rounding of diffusers' float32 outputs.
#[test]
fn fp16_unet_variant_is_close() {
    let f = sd1();
    let tmp = common::scratch_dir("sd-fp16");
    for entry in std::fs::read_dir(&f.dir).unwrap() {
        let e = entry.unwrap();
        let to = tmp.join(e.file_name());
        match e.file_name().to_str().unwrap() {
            "unet" => copy_dir(&f.dir.join("reference/unet_fp16"), &to),
            "reference" => {}
            _ if e.file_type().unwrap().is_dir() => copy_dir(&e.path(), &to),
            _ => drop(std::fs::copy(e.path(), to).unwrap()),
        }
    }
    let p = StableDiffusion::load(&tmp).unwrap();
    let (shape, inputs) = f.npy("unet_in");
    let (_, outputs) = f.npy("unet_out");
    let (_, emb) = f.npy("text_embeddings");
    let (c, h, w) = (shape[2], shape[3], shape[4]);
    let n = c * h * w;
    let t = f.reference["unet_timesteps"][0].as_f64().unwrap() as f32;
    let x = FeatureMap::from_chw(&inputs[n..2 * n], c, h, w);
    let got = p
        .unet
        .forward(&x, t, &emb[emb.len() / 2..])
        .unwrap()
        .to_chw();
    let d = scaled_diff(&got, &outputs[n..2 * n]);
    eprintln!("fp16 UNet against the f32 reference: scaled max diff {d:.2e}");
    assert!(d < 1e-2 && d > 1e-6, "scaled diff {d:e}");
    let _ = std::fs::remove_dir_all(&tmp);
}

/// The same pipeline as one original-layout (LDM) checkpoint (made by the fixture script and
/// converted back to diffusers' names by diffusers' own single-file converters there) loads
/// through the key mapping and gives bit-identical results to the diffusers folder.
#[test]
fn single_file_ldm_checkpoint_is_identical() {
    let f = sd1();
    let file = fixtures().join("tiny_sd1_ldm/tiny_sd1.safetensors");
    let single = StableDiffusion::load_single_file(&file, &f.dir).unwrap();
    let req = reference_request(f);
    let a = f.pipeline.generate(&req, &mut |_, _, _| {}).unwrap();
    let b = single.generate(&req, &mut |_, _, _| {}).unwrap();
    assert_eq!(a.latents, b.latents);
    assert_eq!(a.image, b.image);
    let i2i = GenerateRequest {
        init_image: Some(f.npy("img2img_input").1),
        strength: 0.5,
        ..req
    };
    let a = f.pipeline.generate(&i2i, &mut |_, _, _| {}).unwrap();
    let b = single.generate(&i2i, &mut |_, _, _| {}).unwrap();
    assert_eq!(a.image, b.image, "the VAE encoder through the LDM names");
    // A diffusers-layout file is refused as a single-file checkpoint, naming it.
    let unet = f.dir.join("unet/diffusion_pytorch_model.safetensors");
    let e = StableDiffusion::load_single_file(&unet, &f.dir)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("not an LDM checkpoint"), "{e}");
}

#[test]
fn schedulers_match_diffusers() {
    let f = sd1();
    let all = f.reference["schedulers"].as_object().unwrap();
    for (name, case) in all {
        let cfg = JsonConfig::from_value(&f.dir, case["config"].clone());
        let sc = ScheduleConfig::parse(&cfg).unwrap();
        let class = case["config"]["_class_name"].as_str();
        let kind = match name.split('_').next().unwrap() {
            "euler" if name.starts_with("euler_a") => SchedulerKind::EulerAncestral,
            "euler" => SchedulerKind::Euler,
            "ddim" => SchedulerKind::Ddim,
            "dpmpp2m" => SchedulerKind::DpmPp2m,
            "lcm" => SchedulerKind::Lcm,
            other => panic!("{other} {class:?}"),
        };
        let steps = case["steps"].as_u64().unwrap() as usize;
        let mut s = Scheduler::new(kind, sc, steps).unwrap();
        let want_t: Vec<f32> = case["timesteps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(s.timesteps, want_t, "{name}: timesteps");
        if let Some(sig) = case["sigmas"].as_array() {
            let want: Vec<f32> = sig.iter().map(|v| v.as_f64().unwrap() as f32).collect();
            assert!(
                max_abs_diff(&s.sigmas, &want) < 1e-5,
                "{name}: sigmas {:?} vs {want:?}",
                s.sigmas
            );
        }
        let init = case["init_noise_sigma"].as_f64().unwrap() as f32;
        assert!(
            (s.init_noise_sigma() - init).abs() < 1e-5,
            "{name}: init_noise_sigma"
        );
        let (shape, samples) = f.npy(&format!("sched_{name}_sample"));
        let (_, model) = f.npy(&format!("sched_{name}_model"));
        let (_, noise) = f.npy(&format!("sched_{name}_noise"));
        let (_, sp) = f.npy(&format!("sched_{name}_scaled_prev"));
        let n: usize = shape[1..].iter().product();
        let mut sample = samples[..n].to_vec();
        for i in 0..steps {
            let r = i * n..(i + 1) * n;
            let mut scaled = sample.clone();
            s.scale_model_input(&mut scaled, i);
            let (ws, wp) = (
                &sp[2 * i * n..(2 * i + 1) * n],
                &sp[(2 * i + 1) * n..(2 * i + 2) * n],
            );
            assert!(
                scaled_diff(&scaled, ws) < 1e-5,
                "{name} step {i}: scaled input"
            );
            let prev = s
                .step(&model[r.clone()], i, &sample, Some(&noise[r]))
                .unwrap();
            let d = scaled_diff(&prev, wp);
            assert!(d < 1e-5, "{name} step {i}: prev sample scaled diff {d:e}");
            sample = prev;
        }
    }
}

#[test]
fn bad_requests_and_folders_are_clear_errors() {
    let p = &sd1().pipeline;
    let req = GenerateRequest {
        prompt: "x".into(),
        negative_prompt: String::new(),
        steps: 1,
        guidance_scale: 1.0,
        width: 60,
        height: 64,
        scheduler: None,
        seed: 1,
        ..Default::default()
    };
    let e = generate_error(p, &req);
    assert!(
        e.contains("width = 60") && e.contains("multiple of 8"),
        "{e}"
    );
    let bad_noise = GenerateRequest {
        width: 64,
        init_noise: Some(vec![0.0; 3]),
        ..req.clone()
    };
    let e = generate_error(p, &bad_noise);
    assert!(e.contains("initial noise has 3 values"), "{e}");
    let zero_steps = GenerateRequest {
        width: 64,
        steps: 0,
        ..req
    };
    let e = generate_error(p, &zero_steps);
    assert!(e.contains("steps = 0"), "{e}");

    // A folder missing a component names it.
    let tmp = common::scratch_dir("sd-missing");
    for entry in std::fs::read_dir(&sd1().dir).unwrap() {
        let e = entry.unwrap();
        if e.file_name() != "vae" && e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &tmp.join(e.file_name()));
        } else if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), tmp.join(e.file_name())).unwrap();
        }
    }
    let e = StableDiffusion::load(&tmp).err().unwrap();
    assert!(matches!(e, DiffusionError::Missing { .. }), "{e}");
    assert!(e.to_string().contains("'vae'"), "{e}");
    // A UNet config whose channels do not fit the weights names the tensor.
    copy_dir(&sd1().dir.join("vae"), &tmp.join("vae"));
    let cfg_path = tmp.join("unet/config.json");
    let text = std::fs::read_to_string(&cfg_path).unwrap();
    std::fs::write(
        &cfg_path,
        text.replace("\"cross_attention_dim\": 32", "\"cross_attention_dim\": 48"),
    )
    .unwrap();
    let e = StableDiffusion::load(&tmp).err().unwrap().to_string();
    assert!(
        e.contains("attn2.to_k.weight") && e.contains("expected [16, 48]"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// The error line `p.generate(req)` ends with (the request must be refused).
fn generate_error(p: &StableDiffusion, req: &GenerateRequest) -> String {
    match p.generate(req, &mut |_, _, _| {}) {
        Ok(_) => panic!("the request was accepted"),
        Err(e) => e.to_string(),
    }
}
