//! Tiny random Qwen checkpoints against transformers float32 (fixtures made by
//! tools/ref/make_tiny_qwen.py and tools/ref/make_tiny_qwen35.py): prompt logits within the
//! tolerance and identical greedy tokens, from the safetensors folder and its GGUF twin (Qwen2/
//! Qwen3: written by our script; Qwen 3.5: written by llama.cpp's converter), with whole-prompt,
//! chunked and one-token prefill.

mod common;

use common::{
    check_sources, check_two_sequences_batched, fixtures, ids, max_abs_diff, read_npy_f32,
    reference, sources_in,
};
use oxinfer::Model;

/// Checks every prompt of fixture `name` from each of `sources` (relative to the fixture);
/// returns the largest logit difference seen.
fn check(name: &str, sources: &[&str], tol: f32) -> f32 {
    let dir = fixtures().join(name);
    check_sources(&dir, &sources_in(&dir, sources), &[0, 64, 7, 1], tol)
}

#[test]
fn qwen2_tiny_biases_hub_config_sliding_window_off() {
    check("qwen2-tiny", &["", "model.gguf"], 1e-4);
}

/// Sliding window (8) on the layers at and above `max_window_layers` (1) only, derived from the
/// hub-spelling config (no `layer_types`); both prompts are longer than the window.
#[test]
fn qwen2_tiny_sliding_window_above_max_window_layers() {
    check("qwen2-tiny-swa", &[""], 1e-4);
}

#[test]
fn qwen3_tiny_qk_norm_transformers5_config() {
    check("qwen3-tiny", &["", "model.gguf"], 1e-4);
}

/// Qwen 3.5 hybrid: transformers' own chunked and recurrent delta-rule paths differ by ~1e-5
/// here (up to 2e-4 on larger logits), so the honest tolerance is 1e-3.
#[test]
fn qwen35_tiny_gated_deltanet_hybrid() {
    let d = check("qwen35-tiny", &[""], 1e-3);
    println!("qwen35-tiny worst max abs logit diff {d:.3e}");
}

/// Qwen 3.5 MoE, saved the way hub checkpoints are (nested `text_config`, tensors under
/// `model.language_model.`).
#[test]
fn qwen35moe_tiny_nested_hub_layout() {
    let d = check("qwen35moe-tiny", &[""], 1e-3);
    println!("qwen35moe-tiny worst max abs logit diff {d:.3e}");
}

/// Qwen 3.5 dense and MoE GGUF files written by llama.cpp's own converter (tools/ref/
/// llamacpp_convert.py: tiled V heads, `1 + w` norms, `-exp(A_log)`, fused-by-name tensors, MRoPE
/// sections), on which llama.cpp itself reproduces the transformers logits (reference.json
/// `llamacpp_gguf_check`): the engine reads that layout to the same logits as the safetensors.
#[test]
fn qwen35_gguf_from_llamacpp_converter() {
    for name in ["qwen35-tiny-gguf", "qwen35moe-tiny-gguf"] {
        let r = reference(&fixtures().join(name));
        let lc = &r["llamacpp_gguf_check"];
        assert!(
            lc["long_greedy_ids_match"].as_bool() == Some(true),
            "{name}: the fixture's llama.cpp check did not pass: {lc}"
        );
        let d = check(name, &["", "model.gguf"], 1e-3);
        println!("{name} worst max abs logit diff {d:.3e} (safetensors and llama.cpp's GGUF)");
    }
}

/// Qwen 3.5: two sequences in one batched pass keep separate recurrent states (prefill both,
/// then a decode step of both), each matching its own reference.
#[test]
fn qwen35_batched_sequences_keep_their_own_state() {
    let dir = fixtures().join("qwen35-tiny");
    let model = Model::load(&dir).unwrap();
    check_two_sequences_batched(&model, &dir, 1e-3);
}

/// Qwen 3.5: recurrent state cannot rewind part-way, so truncating empties the cache, and the
/// prompt run again from there matches its reference.
#[test]
fn qwen35_truncated_cache_starts_over() {
    let dir = fixtures().join("qwen35-tiny");
    let p = &reference(&dir)["prompts"][0];
    let prompt = ids(&p["ids"]);
    let want = read_npy_f32(&dir.join(p["logits_file"].as_str().unwrap())).1;
    let model = Model::load(&dir).unwrap();
    let lm = model.lm();
    let mut cache = lm.new_cache(256);
    lm.forward(&prompt[..prompt.len() - 1], &mut cache, false)
        .unwrap();
    cache.truncate(3);
    assert_eq!(cache.len(), 0);
    let again = lm.forward(&prompt, &mut cache, true).unwrap();
    assert!(max_abs_diff(&again, &want) <= 1e-3);
}
