//! Whole models on the wgpu backend (installed process-wide, as `--device wgpu` does): the tiny
//! fixtures' logits within 1e-3 of the committed transformers references (whole, chunked and
//! one-token prefill; greedy ids as the reference) and 32 greedy tokens identical to the CPU
//! path. Every check also asserts that the plans really ran on the device. The real GGUFs are
//! in `real_models.rs`. Without an adapter the tests print a `skipped:` line (under `CI=true`
//! they fail instead).

#[path = "../../oxinfer/tests/common/mod.rs"]
mod common;
mod device;
mod whole;

use common::{check_sources, fixtures, ids, sources_in};
use oxinfer::Model;
use whole::{device_passes, greedy_matches_cpu, installed, ONE_AT_A_TIME};

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
