//! The whole-plan backend path of every family, run end to end on the CPU: a test backend
//! takes each pass as one [`Backend::run_plan`] call and answers it with the CPU executor
//! ([`oxinfer::plan::cpu`]), so the plumbing a GPU uses (each family's plan, the rows whose
//! logits are wanted, keys appended to the caches by the backend and advanced by the runner,
//! the split of the logits per sequence) is checked against the transformers references here,
//! where no GPU is present. Whole, chunked (7) and one-token prefill; the sliding windows (4 or
//! 5) are far shorter than the prompts, so the rings wrap between chunks.

mod common;

use common::{check_sources, fixtures, sources_in};
use oxinfer::backend::check::Checked;
use oxinfer::backend::{self, Backend, DeviceWeight, Job};
use oxinfer::plan::batch::gather_rows;
use oxinfer::plan::{cpu, Plan, PlanInput, SeqRows};
use oxinfer_kernels::WeightMatrix;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Stack passes answered so far.
static PASSES: AtomicUsize = AtomicUsize::new(0);

/// Takes every weight and every plan pass; nothing else.
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

    fn run_plan(
        &self,
        plan: &Plan,
        input: &PlanInput,
        seqs: &mut [SeqRows<'_>],
        logits: &mut [f32],
    ) -> bool {
        PASSES.fetch_add(1, Ordering::Relaxed);
        let _cpu = backend::cpu_only();
        let h = cpu::hidden(plan, input.ids, input.x.to_vec(), seqs).expect("cpu plan");
        let rows = gather_rows(&h, plan.dim, input.logit_rows);
        logits.copy_from_slice(&cpu::logits(plan, &rows, input.logit_rows.len()));
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
    println!("{name}: {passes} plan passes");
    assert!(passes > 0, "{name}: the plan path never ran");
}

/// One test so that the pass counts per fixture are its own (the backend is process-wide).
/// llama-tiny-a (safetensors and GGUF), qwen2-tiny-swa (sliding layers above
/// max_window_layers), gemma3-tiny-a (GGUF norms stored as 1 + w), gemma3-tiny-b (final
/// soft-cap, untied head, MQA), gemma4-tiny-dense (per-layer embeddings, KV sharing, layer
/// scalars), gemma4-tiny-moe (experts beside the MLP), qwen35-tiny (Gated DeltaNet, gated
/// attention), qwen35moe-tiny-gguf (routed and shared experts).
#[test]
fn families_through_the_stack_match_transformers() {
    // Wrapped in the OXINFER_GPU_CHECK checker, which recomputes every plan run with the CPU
    // executor on copies of the caches: the "device" here is that same executor, so every
    // recorded error must be 0.
    backend::install(Some(Box::new(Checked::new(Box::new(CpuStack)))));
    assert_eq!(
        backend::active().map(|b| b.name()),
        Some("cpu-stack (checked)")
    );
    check("llama-tiny-a", &["", "model.gguf"], 1e-4);
    check("qwen2-tiny-swa", &[""], 1e-4);
    check("gemma3-tiny-a", &["", "model.gguf"], 1e-4);
    check("gemma3-tiny-b", &[""], 1e-4);
    check("gemma4-tiny-dense", &["", "model.gguf"], 1e-4);
    check("gemma4-tiny-moe", &[""], 1e-4);
    check("qwen35-tiny", &[""], 1e-3);
    check("qwen35moe-tiny-gguf", &["model.gguf"], 1e-3);
    let report = oxinfer::backend::check::report().expect("the checker recorded plan runs");
    println!("{report}");
    for kind in [
        "plan logits",
        "plan keys (per layer)",
        "plan values (per layer)",
    ] {
        let line = report.lines().find(|l| l.contains(kind)).expect(kind);
        let worst: f64 = line
            .split_whitespace()
            .find_map(|w| w.parse().ok())
            .expect("error value");
        assert_eq!(worst, 0.0, "{line}");
    }
}
