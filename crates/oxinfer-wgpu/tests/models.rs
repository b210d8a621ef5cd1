//! Whole models on the wgpu backend (installed process-wide, as `--device wgpu` does): the tiny
//! fixtures' logits within 1e-3 of the committed transformers references (whole, chunked and
//! one-token prefill; greedy ids as the reference), 32 greedy tokens identical to the CPU
//! path, and on the real SmolLM2 and Gemma 3 GGUFs greedy tokens and perplexity against the
//! CPU. Every check also asserts that the plans really ran on the device. Without an adapter
//! the tests print a `skipped:` line (under `CI=true` they fail instead).

#[path = "../../oxinfer/tests/common/mod.rs"]
mod common;
mod device;

use common::{check_sources, fixtures, greedy, ids, real_model, sources_in};
use oxinfer::backend;
use oxinfer::Model;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// Serializes the tests: `cpu_only` (the CPU twins) is process-wide.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Installs the backend on adapter 0 once; false (after the skip line) without one.
fn installed() -> bool {
    static DONE: OnceLock<bool> = OnceLock::new();
    *DONE.get_or_init(|| match device::backend() {
        Some(b) => {
            backend::install(Some(Box::new(b)));
            true
        }
        None => false,
    })
}

/// Plan passes the installed backend ran so far (from its stats).
fn device_passes() -> u64 {
    let stats = backend::active()
        .and_then(|b| b.stats())
        .unwrap_or_default();
    stats
        .lines()
        .filter(|l| l.trim_start().starts_with("run_plan"))
        .filter_map(|l| l.split_whitespace().find_map(|w| w.parse::<u64>().ok()))
        .sum()
}

/// `n` greedy tokens after `prompt` on the device and on the CPU; asserts they are the same
/// and that the device ran passes.
fn greedy_matches_cpu(model: &Model, prompt: &[u32], n: usize, what: &str) {
    let before = device_passes();
    let start = Instant::now();
    let dev = greedy(model, prompt, n);
    let dev_s = start.elapsed().as_secs_f64();
    let passes = device_passes() - before;
    let start = Instant::now();
    let cpu = {
        let _cpu = backend::cpu_only();
        greedy(model, prompt, n)
    };
    println!(
        "{what}: {n} greedy tokens, device {dev_s:.1} s ({passes} passes), CPU {:.1} s",
        start.elapsed().as_secs_f64()
    );
    assert!(
        passes > n as u64 / 2,
        "{what}: the plan did not run on the device"
    );
    assert_eq!(dev, cpu, "{what}: greedy tokens differ from the CPU path");
}

/// The tiny checkpoints the kernels run whole (the rest are declined by op and run on the
/// CPU: per-layer embeddings, value norms, Gated DeltaNet, experts).
const TINY: [(&str, &[&str]); 6] = [
    ("llama-tiny-a", &["", "model.gguf"]),
    ("qwen2-tiny", &[""]),
    ("qwen2-tiny-swa", &[""]),
    ("qwen3-tiny", &[""]),
    ("gemma3-tiny-a", &["", "model.gguf"]),
    ("gemma3-tiny-b", &[""]),
];

#[test]
fn tiny_fixtures_match_transformers_and_cpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !installed() {
        return;
    }
    for (name, sources) in TINY {
        let dir = fixtures().join(name);
        let before = device_passes();
        let worst = check_sources(&dir, &sources_in(&dir, sources), &[0, 7, 1], 1e-3);
        let passes = device_passes() - before;
        println!("{name}: worst logit diff {worst:.2e} over {passes} device passes");
        assert!(passes > 0, "{name}: the plan never ran on the device");
        let r = common::reference(&dir);
        let prompt = ids(&r["prompts"][0]["ids"]);
        for source in sources_in(&dir, sources) {
            let model = Model::load(&source).expect("load");
            greedy_matches_cpu(&model, &prompt, 32, &format!("{}", source.display()));
        }
    }
}

/// Greedy tokens and perplexity (2 windows of 128 tokens) of a real GGUF on the device against
/// the CPU; prints the times.
fn real_model_matches_cpu(file: &str, ppl_ref: &str) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !installed() {
        return;
    }
    let Some(path) = real_model(file) else {
        return;
    };
    let case = common::perplexity_case(&path, ppl_ref);
    let model = &case.model;
    let prompt = model
        .tokenize("The capital of France is", model.adds_bos())
        .expect("tokenize");
    greedy_matches_cpu(model, &prompt, 32, file);
    let ppl = |on_cpu: bool| {
        let _cpu = on_cpu.then(backend::cpu_only);
        let start = Instant::now();
        let p = oxinfer::engine::perplexity::perplexity(
            model.lm(),
            &case.tokens,
            128,
            case.bos,
            Some(2),
            128,
            |_, _, _| {},
        )
        .expect("perplexity");
        (p.ppl, start.elapsed().as_secs_f64())
    };
    let before = device_passes();
    let (dev, dev_s) = ppl(false);
    assert!(
        device_passes() > before,
        "{file}: perplexity did not run on the device"
    );
    let (cpu, cpu_s) = ppl(true);
    let rel = (dev - cpu).abs() / cpu;
    println!("{file}: perplexity device {dev:.4} ({dev_s:.1} s), CPU {cpu:.4} ({cpu_s:.1} s), rel diff {rel:.2e}");
    assert!(rel < 5e-3, "{file}: perplexity {dev} vs CPU {cpu}");
}

#[test]
fn smollm2_matches_cpu() {
    real_model_matches_cpu(
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "smollm2/llamacpp_ref.json",
    );
}

#[test]
fn gemma3_matches_cpu() {
    real_model_matches_cpu("gemma-3-270m-q4_k_m.gguf", "gemma3/llamacpp_ref.json");
}
