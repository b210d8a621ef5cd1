//! The real SmolLM2 and Gemma 3 GGUFs on the wgpu backend against the CPU: greedy tokens and the
//! perplexity of a 64-token window. The device's quantized products take f32 inputs by default,
//! so the CPU twin is the exact path (`OXINFER_KERNELS=scalar`, chosen here for this test
//! process), which the device must match to f32 summation order; with
//! `OXINFER_WGPU_INT8_INPUTS=1` both round inputs through int8 blocks and the twin is the CPU's
//! default kernels (where last-bit differences move values across rounding boundaries: docs/wgpu.md).
//! A binary of its own, since the CPU's kernel set is chosen once per process.

#[path = "../../oxinfer/tests/common/mod.rs"]
mod common;
mod device;
mod whole;

use common::real_model;
use oxinfer::backend;
use oxinfer_kernels::dispatch::{set_kernel_set, KernelSet};
use std::time::Instant;
use whole::{device_passes, greedy_matches_cpu, installed, ONE_AT_A_TIME};

/// Chooses the CPU kernels the device is compared with (see the module doc) and returns them.
fn cpu_twin() -> KernelSet {
    let want = if oxinfer_wgpu::int8_inputs() {
        KernelSet::Auto
    } else {
        KernelSet::Scalar
    };
    let set = set_kernel_set(want);
    assert_eq!(set, want, "the CPU kernel set was chosen before this test");
    set
}

/// `greedy_n` greedy tokens and the perplexity of one 64-token window of a real GGUF on the
/// device against the CPU twin ([`cpu_twin`]); prints the times. (Sized for lavapipe, where a
/// SmolLM2 decode step takes seconds: docs/wgpu.md.)
fn real_model_matches_cpu(file: &str, ppl_ref: &str, greedy_n: usize) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let twin = cpu_twin();
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
    greedy_matches_cpu(model, &prompt, greedy_n, file);
    let ppl = |on_cpu: bool| {
        let _cpu = on_cpu.then(backend::cpu_only);
        let start = Instant::now();
        let p = oxinfer::engine::perplexity::perplexity(
            model.lm(),
            &case.tokens,
            64,
            case.bos,
            Some(1),
            64,
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
    println!(
        "{file}: perplexity device {dev:.4} ({dev_s:.1} s), CPU ({twin:?} kernels) {cpu:.4} \
         ({cpu_s:.1} s), rel diff {rel:.2e}"
    );
    let bound = if twin == KernelSet::Scalar {
        1e-4
    } else {
        5e-3
    };
    assert!(rel < bound, "{file}: perplexity {dev} vs CPU {cpu}");
}

/// SmolLM2-135M Q4_1: 8 greedy tokens and a 64-token window's perplexity (on lavapipe about
/// 30 s for the perplexity and a few seconds per decode step).
#[test]
fn smollm2_matches_cpu() {
    let file = "SmolLM2-135M-Instruct.Q4_1.gguf";
    real_model_matches_cpu(file, "smollm2/llamacpp_ref.json", 8);
}

/// Gemma 3 270M Q4_K_M: its 262k-row head is uploaded in row parts on lavapipe (128 MiB
/// bindings); about 40 s there.
#[test]
fn gemma3_matches_cpu() {
    real_model_matches_cpu("gemma-3-270m-q4_k_m.gguf", "gemma3/llamacpp_ref.json", 8);
}
