//! The tiny random cross-encoder (tests/fixtures/bert-cross-encoder/, made by
//! tools/ref/make_tiny_cross_encoder.py) against transformers / sentence-transformers float32:
//! pair ids and token types (with `longest_first` truncation), classifier logits and
//! `CrossEncoder.predict` scores (≤ 1e-5), the `rank` order, one batch equal to one-by-one runs,
//! and the errors of a reranker used as an embedding model and of a too-long pair.

mod common;

use std::path::PathBuf;

use common::{encode_reference_pairs, fixtures, ids, reference, RefPairs};
use oxinfer::embed::rerank::rank;
use oxinfer::embed::{CrossEncoder, Embedder};

fn dir() -> PathBuf {
    fixtures().join("bert-cross-encoder")
}

fn load() -> CrossEncoder {
    CrossEncoder::load(&dir()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn pairs_logits_and_scores_match_sentence_transformers() {
    let ce = load();
    let r = reference(&dir());
    let RefPairs {
        query,
        docs,
        entries: pairs,
        encoded,
    } = encode_reference_pairs(&ce, &r, "pairs");
    for (e, p) in encoded.iter().zip(pairs) {
        assert_eq!(e.ids, ids(&p["ids"]), "ids of {:?}", p["document"]);
        assert_eq!(
            e.type_ids,
            ids(&p["type_ids"]),
            "types of {:?}",
            p["document"]
        );
    }
    let batch = ce.logits(&encoded).unwrap();
    let scores = ce.score(query, &docs, true).unwrap();
    for (i, p) in pairs.iter().enumerate() {
        let one = ce.logits(std::slice::from_ref(&encoded[i])).unwrap()[0];
        let want = p["logit"].as_f64().unwrap() as f32;
        assert!((one - want).abs() <= 1e-5, "logit {i}: {one} vs {want}");
        assert_eq!(
            batch[i], one,
            "pair {i}: the batch differs from a one-pair run"
        );
        let want = p["score"].as_f64().unwrap() as f32;
        assert!(
            (scores[i] - want).abs() <= 1e-5,
            "score {i}: {} vs {want}",
            scores[i]
        );
    }
    let order: Vec<usize> = rank(&scores, None).iter().map(|x| x.index).collect();
    let want: Vec<usize> = r["rank"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(order, want);
    assert_eq!(rank(&scores, Some(2)).len(), 2);
}

#[test]
fn too_long_without_truncation_is_an_error_and_not_an_embedder() {
    let ce = load();
    let long = "capital ".repeat(100);
    let err = ce
        .encode_pair(3, "q", &long, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("document 3") && err.contains("limit"), "{err}");
    let err = Embedder::load(&dir()).unwrap_err().to_string();
    assert!(err.contains("oxinfer rerank"), "{err}");
    assert!(!oxinfer::embed::is_embedding_model(&dir()));
    assert!(oxinfer::embed::is_reranker_model(&dir()));
    assert!(!oxinfer::embed::is_reranker_model(
        &fixtures().join("bert-tiny")
    ));
}

/// `--quant` for rerankers: q8 and bf16 weights score the reference's pairs close to float32
/// (measured: q8 7.7e-4, bf16 1.4e-4 at most).
#[test]
fn quantized_weights_stay_close() {
    use oxinfer::quant::Precision;
    common::embed::quantized_reranker_stays_close(
        &dir(),
        "pairs",
        &[(Precision::Q8, 3e-3), (Precision::Bf16, 1e-3)],
    );
}
