//! The tiny random EmbeddingGemma model (tests/fixtures/embeddinggemma-tiny/, made by
//! tools/ref/make_tiny_embeddinggemma.py: transformers' `Gemma3TextModel` with
//! `use_bidirectional_attention`, sliding layers of window ±3 and a full layer, saved by
//! sentence-transformers with mean pooling, two `Dense` projections and Normalize) against
//! transformers / sentence-transformers float32: input ids, last hidden states (≤ 1e-4), one
//! batch equal to one-by-one runs, and the embeddings of padded batches without and with the
//! `query` / `document` prompts (≤ 1e-5).

mod common;

use std::path::PathBuf;

use common::{check_embeddings, check_hidden_states, fixtures, load_embedder};

fn dir() -> PathBuf {
    fixtures().join("embeddinggemma-tiny")
}

#[test]
fn hidden_states_match_transformers_and_batch_equals_one_by_one() {
    let e = load_embedder(&dir());
    assert_eq!((e.dim(), e.max_tokens()), (32, 24));
    assert_eq!(e.prompt("query"), Some("task: search result | query: "));
    check_hidden_states(&dir(), 1e-4);
}

#[test]
fn embeddings_match_sentence_transformers_encode() {
    assert_eq!(check_embeddings(&dir(), &["query", "document"], 1e-5), 32);
}
