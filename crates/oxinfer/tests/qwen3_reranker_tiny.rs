//! The tiny random Qwen3-Reranker (tests/fixtures/qwen3-reranker-tiny/, made by
//! tools/ref/make_tiny_qwen3_reranker.py) against the Qwen3-Reranker model card's transformers
//! computation in float32: the prompt's ids (prefix, formatted pair cut to the limit, suffix),
//! the last position's "yes" − "no" logit of one-pair runs (≤ 1e-4), the scores of the card's
//! left-padded batch (≤ 1e-5), one batch equal to one-pair runs, the error of a too-long pair
//! without truncation, and which folders count as yes/no rerankers.

mod common;

use std::path::PathBuf;

use common::{encode_reference_pairs, fixtures, ids, reference, RefPairs};
use oxinfer::embed::rerank::rank;
use oxinfer::embed::yes_no::is_yes_no_reranker;
use oxinfer::embed::{is_embedding_model, is_reranker_model, CrossEncoder};

fn dir() -> PathBuf {
    fixtures().join("qwen3-reranker-tiny")
}

fn load() -> CrossEncoder {
    CrossEncoder::load(&dir()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn prompt_ids_logits_and_scores_match_the_model_card() {
    let ce = load();
    let r = reference(&dir());
    assert_eq!(ce.max_tokens(), r["max_length"].as_u64().unwrap() as usize);
    let RefPairs {
        query,
        docs,
        entries: refs,
        encoded,
    } = encode_reference_pairs(&ce, &r, "documents");
    for (e, d) in encoded.iter().zip(refs) {
        assert_eq!(e.ids, ids(&d["ids"]), "ids of {:?}", d["document"]);
    }
    assert!(encoded.iter().any(|e| e.ids.len() == ce.max_tokens()));
    let batch = ce.logits(&encoded).unwrap();
    let scores = ce.score(query, &docs, true).unwrap();
    let mut worst = (0f32, 0f32);
    for (i, d) in refs.iter().enumerate() {
        let one = ce.logits(std::slice::from_ref(&encoded[i])).unwrap()[0];
        let want = (d["yes_logit"].as_f64().unwrap() - d["no_logit"].as_f64().unwrap()) as f32;
        assert!((one - want).abs() <= 1e-4, "logit {i}: {one} vs {want}");
        worst.0 = worst.0.max((one - want).abs());
        assert_eq!(
            batch[i], one,
            "pair {i}: the batch differs from a one-pair run"
        );
        let want = d["score"].as_f64().unwrap() as f32;
        assert!(
            (scores[i] - want).abs() <= 1e-5,
            "score {i}: {} vs {want}",
            scores[i]
        );
        worst.1 = worst.1.max((scores[i] - want).abs());
    }
    println!(
        "max yes-no logit diff {:.2e}, max score diff {:.2e}",
        worst.0, worst.1
    );
    let want_scores: Vec<f32> = refs
        .iter()
        .map(|d| d["score"].as_f64().unwrap() as f32)
        .collect();
    let order = |s: &[f32]| -> Vec<usize> { rank(s, None).iter().map(|x| x.index).collect() };
    assert_eq!(order(&scores), order(&want_scores));
}

#[test]
fn too_long_without_truncation_is_an_error() {
    let ce = load();
    let long = "the quick brown fox ".repeat(60);
    let err = ce
        .encode_pair(4, "q", &long, false)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("document 4") && err.contains("truncation is off"),
        "{err}"
    );
    assert_eq!(
        ce.encode_pair(4, "q", &long, true).unwrap().ids.len(),
        ce.max_tokens()
    );
}

#[test]
fn a_qwen3_causal_lm_is_a_reranker_only_when_its_path_says_so() {
    assert!(is_yes_no_reranker(&dir()) && is_reranker_model(&dir()));
    assert!(!is_embedding_model(&dir()));
    let chat = fixtures().join("qwen3-tiny");
    assert!(!is_yes_no_reranker(&chat) && !is_reranker_model(&chat));
    // The cross-encoders are not yes/no rerankers.
    assert!(!is_yes_no_reranker(&fixtures().join("xlmr-cross-encoder")));
}

#[test]
fn a_custom_instruction_matches_the_model_card() {
    // reference_instruction.json: tools/ref/ref_qwen3_reranker_instruction.py, the card's
    // computation with its `instruction` argument set.
    let ce = load();
    let text = std::fs::read_to_string(dir().join("reference_instruction.json")).unwrap();
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    let instruction = r["instruction"].as_str().unwrap();
    let query = r["query"].as_str().unwrap();
    let entries = r["documents"].as_array().unwrap();
    let docs: Vec<&str> = entries
        .iter()
        .map(|d| d["document"].as_str().unwrap())
        .collect();
    let scores = ce
        .score_instructed(Some(instruction), query, &docs, true)
        .unwrap();
    let default = ce.score(query, &docs, true).unwrap();
    for (i, d) in entries.iter().enumerate() {
        let e = ce
            .encode_instructed_pair(i, Some(instruction), query, docs[i], true)
            .unwrap();
        assert_eq!(e.ids, ids(&d["ids"]), "ids of document {i}");
        let one = ce.logits(std::slice::from_ref(&e)).unwrap()[0];
        let want = (d["yes_logit"].as_f64().unwrap() - d["no_logit"].as_f64().unwrap()) as f32;
        assert!((one - want).abs() <= 1e-4, "logit {i}: {one} vs {want}");
        let want = d["score"].as_f64().unwrap() as f32;
        assert!(
            (scores[i] - want).abs() <= 1e-5,
            "score {i}: {} vs {want}",
            scores[i]
        );
        assert!(
            (scores[i] - default[i]).abs() > 1e-3,
            "document {i}: instruction unused"
        );
    }
}

#[test]
fn a_cross_encoder_refuses_an_instruction() {
    let ce = CrossEncoder::load(&fixtures().join("bert-cross-encoder")).unwrap();
    let err = ce
        .score_instructed(Some("find answers"), "q", &["d"], true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("takes no instruction"), "{err}");
}

/// `--quant` for the yes/no reranker: q8 and bf16 weights score close to float32 (measured:
/// q8 4.8e-3, bf16 1.8e-3 at most).
#[test]
fn quantized_weights_stay_close() {
    use oxinfer::quant::Precision;
    common::embed::quantized_reranker_stays_close(
        &dir(),
        "documents",
        &[(Precision::Q8, 2e-2), (Precision::Bf16, 8e-3)],
    );
}
