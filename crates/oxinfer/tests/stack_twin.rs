//! The decoder-stack path of every family that has one, run end to end on the CPU: a test
//! backend takes each pass as one [`Backend::decoder_stack`] op and answers it with the CPU twin
//! [`stack_cpu`], so the plumbing a GPU uses (the stack descriptions of Llama/Qwen and Gemma 3,
//! RoPE tables per layer kind, post-norms, final soft-cap, cached keys read in position order
//! from ring-buffer sliding layers, new keys appended through the `KvStore`) is checked against
//! the transformers references here, where no GPU is present. Whole, chunked (7) and
//! one-token prefill; the sliding windows (4 or 5) are far shorter than the prompts, so the
//! rings wrap between chunks.

mod common;

use common::{check_sources, fixtures, sources_in};
use oxinfer::backend::stack::{stack_cpu, StackDesc, StackInput, StackOutput};
use oxinfer::backend::{self, Backend, DeviceWeight, Job};
use oxinfer_kernels::WeightMatrix;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Stack passes answered so far.
static PASSES: AtomicUsize = AtomicUsize::new(0);

/// Takes every weight and every stack pass; nothing else.
struct CpuStack;

impl Backend for CpuStack {
    fn name(&self) -> &str {
        "cpu-stack"
    }

    fn wants(&self, _n_out: usize, _n_in: usize, _t: usize) -> bool {
        true
    }

    fn upload(&self, _w: &WeightMatrix) -> Option<DeviceWeight> {
        Some(Box::new(()))
    }

    fn matmul(&self, _x: &[f32], _t: usize, _n_in: usize, _jobs: &mut [Job]) -> bool {
        false
    }

    fn decoder_stack(&self, d: &StackDesc, i: &StackInput, out: &mut StackOutput) -> bool {
        PASSES.fetch_add(1, Ordering::Relaxed);
        stack_cpu(d, i, out);
        true
    }
}

/// Every prompt of fixture `name` (sources relative to its folder) through the stack path,
/// within `tol` of transformers, whole, in chunks of 7 and token by token.
fn check(name: &str, sources: &[&str], tol: f32) {
    let dir = fixtures().join(name);
    let before = PASSES.load(Ordering::Relaxed);
    check_sources(&dir, &sources_in(&dir, sources), &[0, 7, 1], tol);
    let passes = PASSES.load(Ordering::Relaxed) - before;
    println!("{name}: {passes} stack passes");
    assert!(passes > 0, "{name}: the stack path never ran");
}

/// One test so that the pass counts per fixture are its own (the backend is process-wide).
/// llama-tiny-a (safetensors and GGUF), qwen2-tiny-swa (sliding layers above
/// max_window_layers), gemma3-tiny-a (GGUF norms stored as 1 + w), gemma3-tiny-b (final
/// soft-cap, untied head, MQA).
#[test]
fn families_through_the_stack_match_transformers() {
    backend::install(Some(Box::new(CpuStack)));
    assert_eq!(backend::active().map(|b| b.name()), Some("cpu-stack"));
    check("llama-tiny-a", &["", "model.gguf"], 1e-4);
    check("qwen2-tiny-swa", &[""], 1e-4);
    check("gemma3-tiny-a", &["", "model.gguf"], 1e-4);
    check("gemma3-tiny-b", &[""], 1e-4);
}
