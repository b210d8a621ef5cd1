//! Tiny random Gemma 3 checkpoints against transformers float32 (fixtures made by
//! tools/ref/make_tiny_gemma3.py): prompt logits within 1e-4 and identical greedy tokens, from
//! the safetensors folder and (variant a) its GGUF twin, with whole, chunked (7) and one-token
//! prefill; prompts of 12 and 110 tokens cross the sliding window (5 and 4).

mod common;

use common::{check_sources, check_two_sequences_batched, fixtures, ids, reference};
use oxinfer::Model;
use std::path::{Path, PathBuf};

const TOL: f32 = 1e-4;

fn check(dir: &Path, sources: &[PathBuf]) {
    check_sources(dir, sources, &[0, 7, 1], TOL);
}

/// transformers-5 config spelling (per-layer-type `rope_parameters`), 5 sliding + 1 global
/// layers, GQA 4/2, window 5, tied head; the GGUF twin stores norms as `1 + w`.
#[test]
fn gemma3_tiny_a_safetensors_and_gguf() {
    let dir = fixtures().join("gemma3-tiny-a");
    check(&dir, &[dir.clone(), dir.join("model.gguf")]);
}

/// Older hub spelling (`rope_theta`, `rope_local_base_freq`, linear `rope_scaling` on the
/// global layers), explicit `layer_types`, MQA, query_pre_attn_scalar ≠ head_dim, attention and
/// final logit soft-capping, untied head, window 4.
#[test]
fn gemma3_tiny_b_hub_config_softcaps_untied() {
    let dir = fixtures().join("gemma3-tiny-b");
    check(&dir, std::slice::from_ref(&dir));
}

/// Two sequences of different lengths in one batched pass (prefill, then a decode step of
/// both) give their own reference logits.
#[test]
fn gemma3_batched_sequences_match_their_references() {
    let dir = fixtures().join("gemma3-tiny-a");
    let model = Model::load(&dir).unwrap();
    check_two_sequences_batched(&model, &dir, TOL);
}

/// Sliding layers keep exactly their window (a ring buffer), token by token and after a
/// prompt of many windows prefilled in one chunk; global layers keep every position.
#[test]
fn gemma3_sliding_layers_keep_only_their_window() {
    let dir = fixtures().join("gemma3-tiny-a");
    let r = reference(&dir);
    let model = Model::load(&dir).unwrap();
    let lm = model.lm();
    let cfg = model.config();
    let (w, row) = (cfg.sliding_window.unwrap(), cfg.n_kv_heads * cfg.head_dim);
    let prompt = ids(&r["prompts"][1]["ids"]);
    assert!(
        prompt.len() > 3 * w,
        "the long prompt spans several windows"
    );
    for whole in [false, true] {
        let mut cache = lm.new_cache(256);
        if whole {
            lm.forward(&prompt, &mut cache, false).unwrap();
        } else {
            for &id in &prompt {
                lm.forward(&[id], &mut cache, false).unwrap();
            }
        }
        let rows: Vec<usize> = cache.layers.iter().map(|l| l.k.len() / row).collect();
        // llama.cpp's pattern: layer 5 is the global one.
        assert_eq!(rows[5], prompt.len(), "{rows:?}");
        for (i, &n) in rows.iter().enumerate().filter(|&(i, _)| i != 5) {
            assert_eq!(n, w, "layer {i} keeps {n} rows: {rows:?}");
            assert_eq!(cache.layers[i].v.len(), w * row);
            assert_eq!(cache.layers[i].start + n, prompt.len());
        }
    }
}
