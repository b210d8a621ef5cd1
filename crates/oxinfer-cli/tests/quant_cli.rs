//! `--quant`, `oxinfer quantize`, `run --save-quantized` and `oxinfer kl` as processes, on the
//! tiny bf16 checkpoints of `tools/ref/make_tiny_bf16.py`: pre-quantized output gives the same
//! logits as on-load quantization, `kl` reproduces the statistics transformers + numpy compute
//! (`tests/fixtures/quant-tiny/kl_reference.json`), and bad requests fail with one clear line.

mod cli_process;
#[path = "../../oxinfer/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};

use cli_process::{assert_exits_with, assert_fails_with, ok, oxinfer};
use common::{fixtures, scratch_dir};

fn quant_tiny(v: &str) -> PathBuf {
    fixtures().join("quant-tiny").join(v)
}

fn text() -> PathBuf {
    fixtures().join("texts/ppl-en.txt")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

const IDS: &str = "256,84,104,101,32,113,117,105,99,107,32,98,114,111,119,110";

#[test]
fn quantize_then_load_gives_the_on_load_logits() {
    let tmp = scratch_dir("roundtrip");
    for v in ["llama", "gemma3"] {
        let src = quant_tiny(v);
        for q in ["q8", "q4"] {
            let out = tmp.join(format!("{v}-{q}"));
            let (_, err) = ok(oxinfer(&["quantize", s(&src), "--quant", q, "-o", s(&out)]));
            assert!(err.contains("GB/s") && err.contains("wrote"), "{err}");
            for f in ["model.safetensors", "config.json", "tokenizer.json"] {
                assert!(out.join(f).is_file(), "{f} missing");
            }
            let (info, _) = ok(oxinfer(&["info", s(&out)]));
            assert!(info.contains(&format!("{} ×", q.to_uppercase())), "{info}");
            let a = tmp.join(format!("{v}-{q}-onload.npy"));
            let b = tmp.join(format!("{v}-{q}-saved.npy"));
            let c = tmp.join(format!("{v}-{q}-run-saved"));
            let run = |model: &Path, quant: Option<&str>, npy: &Path, extra: &[&str]| {
                let mut args = vec!["run", "-m", s(model), "--tokens", IDS, "-n", "1"];
                args.extend(["--show-tokens", "--dump-logits", s(npy)]);
                if let Some(q) = quant {
                    args.extend(["--quant", q]);
                }
                args.extend(extra);
                ok(oxinfer(&args))
            };
            run(&src, Some(q), &a, &["--save-quantized", s(&c)]);
            run(&out, None, &b, &[]);
            let (la, lb) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
            assert_eq!(
                la, lb,
                "{v} {q}: logits of on-load and pre-quantized differ"
            );
            // run --save-quantized writes the same checkpoint as `quantize`
            assert_eq!(
                std::fs::read(c.join("model.safetensors")).unwrap(),
                std::fs::read(out.join("model.safetensors")).unwrap()
            );
        }
    }
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// The value after `label` on its line of `kl`'s output.
fn stat(out: &str, label: &str) -> f64 {
    let line = out
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no '{label}' in {out}"));
    line[label.len()..]
        .trim_start_matches([' ', '='])
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn kl_matches_transformers_and_numpy() {
    let r: serde_json::Value = serde_json::from_slice(
        &std::fs::read(quant_tiny("kl_reference.json")).expect("kl_reference.json"),
    )
    .unwrap();
    let ctx = r["ctx"].as_u64().unwrap().to_string();
    let chunks = r["chunks"].as_u64().unwrap().to_string();
    let (out, err) = ok(oxinfer(&[
        "kl",
        "-m",
        s(&quant_tiny("llama")),
        "--ref",
        s(&quant_tiny("gemma3")),
        "-f",
        s(&text()),
        "--ctx",
        &ctx,
        "--chunks",
        &chunks,
    ]));
    assert!(
        err.contains(&format!("{} positions scored", r["scored"])),
        "{err}"
    );
    let close = |label: &str, key: &str, rel: f64| {
        let (got, want) = (stat(&out, label), r[key].as_f64().unwrap());
        assert!(
            (got - want).abs() <= rel * want.abs() + 2e-6,
            "{label}: {got} vs reference {want}"
        );
    };
    close("PPL(model)", "ppl_model", 1e-4);
    close("PPL(ref)", "ppl_ref", 1e-4);
    close("Mean KLD", "mean_kl", 1e-3);
    close("Median  KLD", "median_kl", 1e-3);
    close("99.0%   KLD", "p99_kl", 1e-3);
    close("Maximum KLD", "max_kl", 1e-3);
    close("Same top-1", "top1_agree_percent", 1e-6);
}

#[test]
fn kl_of_two_precisions_of_one_model() {
    let m = quant_tiny("llama");
    let args = |q: &str| {
        oxinfer(&[
            "kl",
            "-m",
            s(&m),
            "--quant",
            q,
            "--ref",
            s(&m),
            "-f",
            s(&text()),
            "--ctx",
            "64",
            "--chunks",
            "2",
        ])
    };
    let (q8, _) = ok(args("q8"));
    let (q4, _) = ok(args("q4"));
    let (bf16, _) = ok(args("bf16"));
    // bf16 is the checkpoint's own precision: nothing changes.
    assert_eq!(stat(&bf16, "Mean KLD"), 0.0, "{bf16}");
    assert_eq!(stat(&bf16, "Same top-1"), 100.0, "{bf16}");
    assert_eq!(stat(&bf16, "PPL(model)"), stat(&bf16, "PPL(ref)"));
    let (k8, k4) = (stat(&q8, "Mean KLD"), stat(&q4, "Mean KLD"));
    assert!(0.0 < k8 && k8 < k4, "q8 {k8} vs q4 {k4}");
}

#[test]
fn bad_quant_requests_fail_clearly() {
    let m = quant_tiny("llama");
    assert_exits_with(
        &oxinfer(&["run", "-m", s(&m), "--quant", "q3", "--tokens", "1"]),
        2,
        &["q3"],
    );
    let gguf = quant_tiny("../llama-tiny-a/model.gguf");
    assert_fails_with(
        &oxinfer(&["run", "-m", s(&gguf), "--quant", "q8", "--tokens", "1"]),
        &["model.gguf", "--quant q8", "safetensors"],
    );
    let tmp = scratch_dir("bad");
    assert_fails_with(
        &oxinfer(&[
            "quantize",
            s(&gguf),
            "--quant",
            "q4",
            "-o",
            s(&tmp.join("x")),
        ]),
        &["model.gguf"],
    );
    assert_fails_with(
        &oxinfer(&["quantize", s(&m), "--quant", "q4", "-o", s(&m)]),
        &["checkpoint's own folder"],
    );
    // A reference whose tokenizer lacks a merge tokenizes the text differently.
    let other = tmp.join("other-tokenizer");
    std::fs::create_dir_all(&other).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer_config.json"] {
        std::fs::copy(m.join(f), other.join(f)).unwrap();
    }
    let mut tok: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.join("tokenizer.json")).unwrap()).unwrap();
    let merges = tok["model"]["merges"].as_array_mut().unwrap();
    assert_eq!(merges.pop().unwrap(), serde_json::json!(["i", "n"]));
    std::fs::write(other.join("tokenizer.json"), tok.to_string()).unwrap();
    assert_fails_with(
        &oxinfer(&[
            "kl",
            "-m",
            s(&m),
            "--ref",
            s(&other),
            "-f",
            s(&text()),
            "--ctx",
            "64",
        ]),
        &["tokenize the text differently", "same tokenizer"],
    );
    std::fs::remove_dir_all(&tmp).unwrap();
}
