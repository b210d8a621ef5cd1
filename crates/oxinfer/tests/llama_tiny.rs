//! Tiny random Llama checkpoints against transformers float32 (fixtures made by
//! tools/ref/make_tiny_llama.py): prompt logits within 1e-4 and identical greedy tokens, from
//! both the safetensors folder and its GGUF twin, with chunked prefill and one-token steps.

mod common;

use common::{check_sources, check_two_sequences_batched, fixtures, sources_in};
use oxinfer::Model;

const TOL: f32 = 1e-4;

fn check_variant(name: &str) {
    let dir = fixtures().join(name);
    check_sources(
        &dir,
        &sources_in(&dir, &["", "model.gguf"]),
        &[0, 7, 1],
        TOL,
    );
}

#[test]
fn llama_tiny_a_tied_gqa_transformers5_config() {
    check_variant("llama-tiny-a");
}

#[test]
fn llama_tiny_b_untied_llama3_rope_hub_config_sharded() {
    check_variant("llama-tiny-b");
}

/// Two sequences in one batched pass (prefill of both prompts, then a decode step of both)
/// give each sequence's own reference logits.
#[test]
fn batched_sequences_match_their_references() {
    let dir = fixtures().join("llama-tiny-a");
    let model = Model::load(dir.join("model.gguf")).unwrap();
    check_two_sequences_batched(&model, &dir, TOL);
}
