//! Tiny random Qwen checkpoints against transformers float32 (fixtures made by
//! tools/ref/make_tiny_qwen.py and tools/ref/make_tiny_qwen35.py): prompt logits within the
//! tolerance and identical greedy tokens, from the safetensors folder and its GGUF twin (Qwen2/
//! Qwen3: written by our script; Qwen 3.5: written by llama.cpp's converter), with whole-prompt,
//! chunked and one-token prefill.

mod common;

use common::{check_prompt, fixtures, ids, max_abs_diff, read_npy_f32, reference};
use oxinfer::engine::sampler::argmax;
use oxinfer::Model;
use serde_json::Value;
use std::path::PathBuf;

/// Checks every prompt of fixture `name` from each of `sources` (relative to the fixture);
/// returns the largest logit difference seen.
fn check(name: &str, sources: &[&str], tol: f32) -> f32 {
    let dir = fixtures().join(name);
    let r = reference(&dir);
    let mut worst = 0f32;
    for src in sources {
        let source: PathBuf = if src.is_empty() {
            dir.clone()
        } else {
            dir.join(src)
        };
        let model = Model::load(&source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
        for p in r["prompts"].as_array().expect("prompts") {
            worst = worst.max(check_prompt(&model, &source, &dir, p, &[0, 64, 7, 1], tol));
        }
    }
    worst
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
/// then a decode step of both), each matching its own reference; a rewound cache starts over.
#[test]
fn qwen35_batched_sequences_keep_their_own_state() {
    use oxinfer::arch::SeqBatch;
    let dir = fixtures().join("qwen35-tiny");
    let r = reference(&dir);
    let model = Model::load(&dir).unwrap();
    let lm = model.lm();
    let ps: Vec<&Value> = r["prompts"].as_array().unwrap().iter().collect();
    let (p0, p1) = (ids(&ps[0]["ids"]), ids(&ps[1]["ids"]));
    let w0 = read_npy_f32(&dir.join(ps[0]["logits_file"].as_str().unwrap())).1;
    let w1 = read_npy_f32(&dir.join(ps[1]["logits_file"].as_str().unwrap())).1;
    let vocab = model.config().vocab_size;
    let (mut c0, mut c1) = (lm.new_cache(256), lm.new_cache(256));
    let n0 = p0.len() - 1;
    let out = lm
        .forward_batch(&mut [
            SeqBatch {
                tokens: &p0[..n0],
                cache: &mut c0,
                all_logits: true,
            },
            SeqBatch {
                tokens: &p1,
                cache: &mut c1,
                all_logits: true,
            },
        ])
        .unwrap();
    assert!(max_abs_diff(&out[0], &w0[..n0 * vocab]) <= 1e-3);
    assert!(max_abs_diff(&out[1], &w1) <= 1e-3);
    let next1 = argmax(&out[1][(p1.len() - 1) * vocab..]);
    let step = lm
        .forward_batch(&mut [
            SeqBatch {
                tokens: &p0[n0..],
                cache: &mut c0,
                all_logits: false,
            },
            SeqBatch {
                tokens: &[next1],
                cache: &mut c1,
                all_logits: false,
            },
        ])
        .unwrap();
    assert!(max_abs_diff(&step[0], &w0[n0 * vocab..]) <= 1e-3);
    let mut alone = lm.new_cache(256);
    lm.forward(&p1, &mut alone, false).unwrap();
    let want1 = lm.forward(&[next1], &mut alone, false).unwrap();
    assert!(max_abs_diff(&step[1], &want1) <= 1e-5);
    // Recurrent state cannot rewind part-way: truncating empties the cache.
    c0.truncate(3);
    assert_eq!(c0.len(), 0);
    let again = lm.forward(&p0, &mut c0, true).unwrap();
    assert!(max_abs_diff(&again, &w0) <= 1e-3);
}
