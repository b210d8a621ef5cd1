//! The tiny random ModernBERT model (tests/fixtures/modernbert-tiny/, made by
//! tools/ref/make_tiny_modernbert.py: global + local layers with a window of ±4 tokens, two RoPE
//! θ, GeGLU, bias-free norms, final norm) against transformers / sentence-transformers float32:
//! input ids, last hidden states (≤ 1e-4), one batch equal to one-by-one runs, and mean-pooled +
//! normalized embeddings of padded batches with and without the `search_query: ` prompt (≤ 1e-5).

mod common;

use std::path::PathBuf;

use common::{check_embeddings, check_hidden_states, fixtures, load_embedder};

fn dir() -> PathBuf {
    fixtures().join("modernbert-tiny")
}

#[test]
fn hidden_states_match_transformers_and_batch_equals_one_by_one() {
    let e = load_embedder(&dir());
    assert_eq!((e.dim(), e.max_tokens()), (32, 24));
    check_hidden_states(&dir(), 1e-4);
}

#[test]
fn embeddings_match_sentence_transformers_encode() {
    assert_eq!(check_embeddings(&dir(), &["query"], 1e-5), 32);
}
