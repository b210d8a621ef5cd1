//! Whole models on the wgpu backend (installed process-wide, as `--device wgpu` does): the tiny
//! fixtures' logits within 1e-3 of the committed transformers references (whole, chunked and
//! one-token prefill; greedy ids as the reference) and 32 greedy tokens identical to the CPU
//! path; Qwen 3.5's and Gemma 4's vision towers' soft tokens against transformers and the CPU.
//! Every check
//! also asserts that the plans really ran on the device. The real GGUFs are in
//! `real_models.rs`. Without an adapter the tests print a `skipped:` line (under `CI=true`
//! they fail instead).

#[path = "../../oxinfer/tests/common/mod.rs"]
mod common;
mod device;
mod whole;

use common::{check_sources, encode_files, fixtures, ids, max_abs_diff, read_npy_f32, sources_in};
use oxinfer::arch::multimodal::MediaKind;
use oxinfer::backend;
use oxinfer::Model;
use whole::{device_passes, encoder_passes, greedy_matches_cpu, installed, ONE_AT_A_TIME};

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

/// Qwen 3.5's vision tower on the device: its blocks and the merger's norm as one encoder pass
/// per image (the plan the CPU runs); the tiny fixtures' soft tokens (dense and MoE checkpoints,
/// two images each) against transformers (within 1e-4, as on the CPU) and against the CPU path
/// (within 1e-5).
#[test]
fn qwen35_vision_tower_matches_transformers_and_cpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !installed() {
        return;
    }
    for name in ["qwen35-vl-tiny", "qwen35moe-vl-tiny"] {
        tower_matches_transformers_and_cpu(name, ["wide", "logo"]);
    }
}

/// Gemma 4's vision tower on the device: its encoder layers (RMS sandwich norms, per-head q / k
/// / v norms, grouped-query heads, clamped projections, the axial rotation) as one encoder pass
/// per image; the tiny fixture's soft tokens (two images) against transformers (within 1e-4, as
/// on the CPU) and against the CPU path (within 1e-5).
#[test]
fn gemma4_vision_tower_matches_transformers_and_cpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !installed() {
        return;
    }
    tower_matches_transformers_and_cpu("tiny_gemma4_mm", ["scene", "logo"]);
}

/// The vision tower of fixture `name` encodes `images` (`{image}.png` beside the checkpoint) in
/// one device encoder pass each; its soft tokens are within 1e-4 of transformers'
/// (`vision_{image}.npy`) and within 1e-5 of the CPU path's.
fn tower_matches_transformers_and_cpu(name: &str, images: [&str; 2]) {
    let dir = fixtures().join(name);
    let model = Model::load(&dir).expect("load");
    let files = images.map(|i| (i, dir.join(format!("{i}.png"))));
    let before = encoder_passes();
    let dev = encode_files(&model, MediaKind::Image, &files);
    let passes = encoder_passes() - before;
    assert_eq!(passes, 2, "{name}: one device encoder pass per image");
    let cpu = {
        let _cpu = backend::cpu_only();
        encode_files(&model, MediaKind::Image, &files)
    };
    for (((image, _), d), c) in files.iter().zip(&dev).zip(&cpu) {
        let (shape, want) = read_npy_f32(&dir.join(format!("vision_{image}.npy")));
        let (to_ref, to_cpu) = (max_abs_diff(&d.rows, &want), max_abs_diff(&d.rows, &c.rows));
        println!(
            "{name} {image} {shape:?}: soft tokens on the device, max diff {to_ref:.2e} from \
             transformers, {to_cpu:.2e} from the CPU"
        );
        assert!(to_ref <= 1e-4, "{name} {image}: {to_ref} from transformers");
        assert!(to_cpu <= 1e-5, "{name} {image}: {to_cpu} from the CPU");
    }
}
