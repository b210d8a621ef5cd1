//! Weights in bf16 / Q8 / Q4 on the tiny random bf16 checkpoints of
//! `tools/ref/make_tiny_bf16.py`: the bf16 checkpoints against transformers float32, Q8 / Q4
//! within bounds of bf16, on-load quantization and the pre-quantized checkpoint it saves giving
//! bit-identical logits, the saved files borrowed from the mapping (no copy) with aligned
//! tensors, and damaged files refused with a clear error.

mod common;

use common::{fixtures, ids, max_abs_diff, read_npy_f32, reference};
use oxinfer::quant::{Precision, WriteOptions};
use oxinfer::{LoadOptions, Model};
use oxinfer_kernels::WeightFormat;
use std::path::{Path, PathBuf};

/// Dense variants, then MoE ones whose experts are stacked `[experts, rows, cols]` tensors.
const VARIANTS: [&str; 4] = ["llama", "gemma3", "gemma4moe", "qwen35moe"];

/// The MoE variants.
const MOE: [&str; 2] = ["gemma4moe", "qwen35moe"];

/// Largest logit difference allowed against transformers: Qwen 3.5's Gated DeltaNet runs
/// chunked in transformers and sequentially here (~1e-4 apart, see make_tiny_qwen35.py).
fn transformers_tolerance(variant: &str) -> f32 {
    if variant.starts_with("qwen35") {
        1e-3
    } else {
        1e-4
    }
}

fn dir(variant: &str) -> PathBuf {
    fixtures().join("quant-tiny").join(variant)
}

/// A fresh empty folder under the system temp dir, unique to this test process and `tag`.
fn scratch(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("oxinfer-quant-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn load(path: &Path, quant: Option<Precision>) -> Model {
    Model::load_with(
        path,
        &LoadOptions {
            quant,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn logits(model: &Model, prompt: &[u32]) -> Vec<f32> {
    let lm = model.lm();
    let mut cache = lm.new_cache(prompt.len());
    lm.forward(prompt, &mut cache, true).unwrap()
}

fn prompt(variant: &str) -> Vec<u32> {
    ids(&reference(&dir(variant))["prompt_ids"])
}

/// Mean over positions of KL(p || q) between the softmaxes of two `[n, vocab]` logit sets.
fn mean_kl(p: &[f32], q: &[f32], vocab: usize) -> f64 {
    let logsm = |r: &[f32]| -> Vec<f64> {
        let m = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let s: f64 = r.iter().map(|&v| f64::from(v - m).exp()).sum();
        r.iter().map(|&v| f64::from(v - m) - s.ln()).collect()
    };
    let rows = p.len() / vocab;
    let mut kl = 0.0;
    for (a, b) in p.chunks_exact(vocab).zip(q.chunks_exact(vocab)) {
        let (la, lb) = (logsm(a), logsm(b));
        kl += la
            .iter()
            .zip(&lb)
            .map(|(x, y)| x.exp() * (x - y))
            .sum::<f64>();
    }
    kl / rows as f64
}

#[test]
fn bf16_checkpoints_match_transformers() {
    for v in VARIANTS {
        let d = dir(v);
        let model = load(&d, None);
        let r = reference(&d);
        let text = r["prompt"].as_str().unwrap();
        assert_eq!(
            model.tokenize(text, true).unwrap(),
            prompt(v),
            "{v}: prompt ids"
        );
        let (shape, want) = read_npy_f32(&d.join("logits.npy"));
        let got = logits(&model, &prompt(v));
        assert_eq!(got.len(), shape.iter().product::<usize>());
        let diff = max_abs_diff(&got, &want);
        println!("{v}: bf16 max abs logit diff vs transformers f32 {diff:.2e}");
        assert!(diff <= transformers_tolerance(v), "{v}: {diff}");
    }
}

#[test]
fn q8_and_q4_stay_close_to_bf16() {
    for v in VARIANTS {
        let d = dir(v);
        let p = prompt(v);
        let base = logits(&load(&d, None), &p);
        let vocab = base.len() / p.len();
        let mut kls = Vec::new();
        for (quant, bound) in [(Precision::Q8, 1e-3), (Precision::Q4, 5e-2)] {
            let model = load(&d, Some(quant));
            let r = model.quant_report().expect("converted at load");
            assert!(
                r.converted > 0 && r.bytes_out < r.bytes_in,
                "{v} {quant}: {r:?}"
            );
            let kl = mean_kl(&base, &logits(&model, &p), vocab);
            println!("{v} {quant}: {}; mean KL vs bf16 {kl:.2e}", r.summary());
            assert!(kl < bound, "{v} {quant}: mean KL {kl}");
            kls.push(kl);
        }
        assert!(
            kls[0] < kls[1],
            "{v}: Q8 should be closer to bf16 than Q4: {kls:?}"
        );
    }
}

#[test]
fn prequantized_checkpoint_loads_in_place_with_identical_logits() {
    for v in VARIANTS {
        let d = dir(v);
        let p = prompt(v);
        for quant in Precision::ALL {
            let on_load = load(&d, Some(quant));
            let out = scratch(&format!("{v}-{quant}"));
            let rep = on_load
                .save_quantized(&out, &WriteOptions::default())
                .unwrap();
            assert_eq!(rep.shards, vec![out.join("model.safetensors")]);
            for f in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
                assert!(
                    rep.copied.iter().any(|c| c == f),
                    "{f} not copied: {:?}",
                    rep.copied
                );
            }
            let saved = load(&out, None);
            assert_eq!(saved.precision(), Some(quant));
            assert!(
                saved.quant_report().is_none(),
                "no conversion when loading it"
            );
            let (a, b) = (logits(&on_load, &p), logits(&saved, &p));
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{v} {quant}: logits differ (max {})",
                max_abs_diff(&a, &b)
            );
            // Every tensor is borrowed from the mapped file, 16 KiB-aligned, matrices in the
            // kernels' split format.
            let tensors = saved.weight_tensors().unwrap().unwrap();
            let mut matrices = 0;
            for t in &tensors {
                assert!(t.is_mapped(), "{}: copied, not borrowed", t.name);
                assert_eq!(t.file_offset() % (16 << 10), 0, "{} unaligned", t.name);
                if let Some(o) = t.scales_file_offset() {
                    assert_eq!(o % (16 << 10), 0, "{} scales unaligned", t.name);
                }
                if t.shape.len() == 2 || t.name.contains("experts") {
                    assert_eq!(t.format, quant.format(), "{}", t.name);
                    matrices += 1;
                }
            }
            assert!(matrices >= 5, "{v}: {matrices} matrices");
            // The same precision again is accepted (nothing to do); another is refused.
            load(&out, Some(quant));
            let other = if quant == Precision::Q4 {
                Precision::Q8
            } else {
                Precision::Q4
            };
            let e = Model::load_with(
                &out,
                &LoadOptions {
                    quant: Some(other),
                    ..Default::default()
                },
            )
            .err()
            .expect("re-quantizing a pre-quantized checkpoint is refused")
            .to_string();
            assert!(
                e.contains("pre-quantized") && e.contains(quant.name()),
                "{e}"
            );
            std::fs::remove_dir_all(&out).unwrap();
        }
    }
}

#[test]
fn sharded_prequantized_checkpoint_loads_identically() {
    let d = dir("gemma3");
    let p = prompt("gemma3");
    let on_load = load(&d, Some(Precision::Q4));
    let out = scratch("sharded");
    let opts = WriteOptions {
        max_shard_bytes: 200 << 10,
    };
    let rep = on_load.save_quantized(&out, &opts).unwrap();
    assert!(rep.shards.len() > 2, "{:?}", rep.shards);
    for s in &rep.shards {
        let len = std::fs::metadata(s).unwrap().len();
        // one tensor bigger than the limit may sit alone; these are all small
        assert!(len <= opts.max_shard_bytes, "{}: {len}", s.display());
    }
    assert!(out.join("model.safetensors.index.json").is_file());
    let saved = load(&out, None);
    assert_eq!(logits(&on_load, &p), logits(&saved, &p));
    // Writing over an existing checkpoint is refused.
    let e = on_load.save_quantized(&out, &opts).unwrap_err().to_string();
    assert!(e.contains("already holds a model"), "{e}");
    std::fs::remove_dir_all(&out).unwrap();
}

/// Position of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("needle present")
}

#[test]
fn damaged_prequantized_files_are_refused_with_a_clear_error() {
    let d = dir("llama");
    let model = load(&d, Some(Precision::Q8));
    let out = scratch("damaged");
    model
        .save_quantized(&out, &WriteOptions::default())
        .unwrap();
    let file = out.join("model.safetensors");
    let good = std::fs::read(&file).unwrap();
    let err = |bytes: &[u8]| -> String {
        std::fs::write(&file, bytes).unwrap();
        match Model::load(&out) {
            Ok(_) => panic!("damaged file accepted"),
            Err(e) => e.to_string(),
        }
    };
    // Truncated: the last tensor's data lies past the end.
    let e = err(&good[..good.len() - 1000]);
    assert!(
        e.contains("model.safetensors") && e.contains("truncated"),
        "{e}"
    );
    // Cut inside the header.
    let e = err(&good[..100]);
    assert!(
        e.contains("model.safetensors") && e.contains("header"),
        "{e}"
    );
    // A scale overwritten with NaN (the first block scale of the q_proj of layer 0).
    let hlen = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&good[8..8 + hlen]).unwrap();
    let name = "model.layers.0.self_attn.q_proj.weight.q8s";
    let at = 8 + hlen + header[name]["data_offsets"][0].as_u64().unwrap() as usize;
    let mut bad = good.clone();
    bad[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    let e = err(&bad);
    assert!(e.contains(name) && e.contains("not finite"), "{e}");
    // The scales' dtype changed (same width, so the header stays valid): F32 -> I32.
    let mut bad = good.clone();
    let key = format!("\"{name}\":{{\"dtype\":\"F32\"");
    let i = find(&good[..8 + hlen], key.as_bytes()) + key.len() - 4;
    bad[i..i + 3].copy_from_slice(b"I32");
    let e = err(&bad);
    assert!(e.contains(name) && e.contains("expected F32"), "{e}");
    // A quants tensor without its scales: rename the scales in the header.
    let mut bad = good.clone();
    let i = find(&good[..8 + hlen], format!("\"{name}\"").as_bytes());
    bad[i + name.len()] = b'x'; // ".q8s" -> ".q8x"
    let e = err(&bad);
    assert!(e.contains(name) && e.contains("missing"), "{e}");
    std::fs::write(&file, &good).unwrap();
    Model::load(&out).expect("the undamaged file loads");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn gguf_models_are_not_quantized_again() {
    let gguf = fixtures().join("llama-tiny-a/model.gguf");
    let e = Model::load_with(
        &gguf,
        &LoadOptions {
            quant: Some(Precision::Q8),
            ..Default::default()
        },
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(e.contains("model.gguf") && e.contains("safetensors"), "{e}");
    let m = Model::load(&gguf).unwrap();
    let e = m
        .save_quantized(&scratch("gguf"), &WriteOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("--quant"), "{e}");
    let _ = WeightFormat::Q8;
}

/// The stacked `[experts, rows, cols]` tensors of a model, by name, as loaded.
fn stacked_experts(model: &Model) -> Vec<oxinfer::loader::TensorView> {
    let all = model.weight_tensors().unwrap().unwrap();
    all.into_iter()
        .filter(|t| t.shape.len() == 3 && t.name.contains("experts"))
        .collect()
}

/// Q8 / Q4 quantize stacked expert tensors per row of each expert: every weight is within the
/// format's bound of the bf16 weight (Q8: d/2 with d = max|x|/127 over its block of 32; Q4:
/// |d| with d = max|x|/8 rounded to f16, the clamped case), each expert's rows are borrowed
/// (quants and scales) from the stacked tensor, and the saved checkpoint stores the stacked
/// layout `X.q8` `[E, R, C]` + `X.q8s` `[E, R, C/32]`, read back in place.
#[test]
fn stacked_moe_experts_are_quantized_per_expert_within_the_format_bound() {
    for v in MOE {
        let d = dir(v);
        let bf16 = stacked_experts(&load(&d, None));
        assert!(
            bf16.len() >= 4,
            "{v}: {} stacked expert tensors",
            bf16.len()
        );
        for quant in [Precision::Q8, Precision::Q4] {
            let model = load(&d, Some(quant));
            let q = stacked_experts(&model);
            assert_eq!(q.len(), bf16.len(), "{v} {quant}");
            for (b, t) in bf16.iter().zip(&q) {
                assert_eq!((&b.name, &b.shape), (&t.name, &t.shape));
                assert_eq!(t.format, quant.format(), "{v} {quant} {}", t.name);
                let (x, y) = (b.to_f32().unwrap(), t.to_f32().unwrap());
                let mut worst = 0f32;
                for (xb, yb) in x.chunks_exact(32).zip(y.chunks_exact(32)) {
                    let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                    let bound = match quant {
                        Precision::Q8 => amax / 127.0 / 2.0,
                        _ => amax / 8.0 * (1.0 + 1.0 / 1024.0),
                    } * (1.0 + 1e-5);
                    for (a, b) in xb.iter().zip(yb) {
                        assert!(
                            (a - b).abs() <= bound,
                            "{v} {quant} {}: {a} -> {b} (bound {bound})",
                            t.name
                        );
                        worst = worst.max((a - b).abs() / amax.max(f32::MIN_POSITIVE));
                    }
                }
                println!(
                    "{v} {quant} {}: worst error {worst:.4} of the block max",
                    t.name
                );
                // Each expert's rows: the same values as that slice of the whole tensor.
                let (e_n, r) = (t.shape[0], t.shape[1]);
                let per = r * t.shape[2];
                for e in 0..e_n {
                    let rows = oxinfer::nn::moe::expert_rows(t, e, 0, r).unwrap();
                    assert_eq!(rows.to_f32().unwrap(), y[e * per..(e + 1) * per]);
                }
            }
            // Saved: the stacked layout, borrowed from the file.
            let out = scratch(&format!("stacked-{v}-{quant}"));
            model
                .save_quantized(&out, &WriteOptions::default())
                .unwrap();
            let bytes = std::fs::read(out.join("model.safetensors")).unwrap();
            let hlen = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
            let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + hlen]).unwrap();
            let saved = load(&out, None);
            for t in stacked_experts(&saved) {
                let sfx = quant.name();
                let (qs, sc) = (
                    &header[format!("{}.{sfx}", t.name)],
                    &header[format!("{}.{sfx}s", t.name)],
                );
                let (e_n, r, c) = (t.shape[0], t.shape[1], t.shape[2]);
                let qcols = if quant == Precision::Q8 { c } else { c / 2 };
                assert_eq!(
                    qs["shape"],
                    serde_json::json!([e_n, r, qcols]),
                    "{}",
                    t.name
                );
                assert_eq!(
                    sc["shape"],
                    serde_json::json!([e_n, r, c / 32]),
                    "{}",
                    t.name
                );
                assert!(t.is_mapped(), "{}: copied, not borrowed", t.name);
                let first = oxinfer::nn::moe::expert_rows(&t, e_n - 1, 0, r).unwrap();
                assert!(first.is_mapped(), "{}: expert rows copied", t.name);
            }
            std::fs::remove_dir_all(&out).unwrap();
        }
    }
}
