//! The tiny random XLM-RoBERTa models (tests/fixtures/xlmr-tiny/ and xlmr-cross-encoder/, made by
//! tools/ref/make_tiny_xlmr.py) against the `tokenizers` package and transformers /
//! sentence-transformers float32: Unigram (SentencePiece, precompiled charsmap) ids of the
//! tokenizer corpus (non-Latin scripts, emoji, special-token strings) and of pairs, last hidden
//! states (≤ 1e-4, including a `<pad>` written in the text, which keeps its own position),
//! CLS-pooled, normalized embeddings with and without the `query` prompt (≤ 1e-5), one batch
//! equal to one-by-one runs, and the bge-reranker-style cross-encoder's logits, scores and
//! order.

mod common;

use std::path::PathBuf;

use common::{
    encode_reference_pairs, encode_texts, fixtures, ids, load_embedder, max_abs_diff, read_npy_f32,
    reference, reference_texts, RefPairs,
};
use oxinfer::embed::rerank::rank;
use oxinfer::embed::{CrossEncoder, EmbedOptions, Embedder, Encoded};

fn dir() -> PathBuf {
    fixtures().join("xlmr-tiny")
}

fn load() -> Embedder {
    load_embedder(&dir())
}

fn texts() -> Vec<String> {
    reference_texts(&dir())
}

fn encoded(e: &Embedder) -> Vec<Encoded> {
    encode_texts(e, &texts())
}

#[test]
fn unigram_ids_match_the_tokenizers_package() {
    let e = load();
    let text = std::fs::read_to_string(dir().join("tokenizer_refs.json")).unwrap();
    let refs: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = refs["cases"].as_array().unwrap();
    let strict = EmbedOptions {
        truncate: false,
        ..EmbedOptions::default()
    };
    let mut with_specials = 0;
    for (i, c) in cases.iter().enumerate() {
        let t = c["text"].as_str().unwrap();
        let got = e.tokenizer().encode(t, false).unwrap();
        assert_eq!(got, ids(&c["ids"]), "ids of {t:?}");
        let full = ids(&c["with_specials"]);
        if full.len() <= e.max_tokens() {
            assert_eq!(e.encode(i, t, &strict).unwrap().ids, full, "{t:?}");
            with_specials += 1;
        }
    }
    println!(
        "{} strings identical ({with_specials} also with <s> … </s>)",
        cases.len()
    );
    assert!(with_specials > 40);
    let ce = CrossEncoder::load(&fixtures().join("xlmr-cross-encoder")).unwrap();
    for (i, p) in refs["pairs"].as_array().unwrap().iter().enumerate() {
        let (a, b) = (p["a"].as_str().unwrap(), p["b"].as_str().unwrap());
        let got = ce.encode_pair(i, a, b, false).unwrap();
        assert_eq!(got.ids, ids(&p["ids"]), "pair {a:?} {b:?}");
        assert_eq!(got.type_ids, ids(&p["type_ids"]), "pair {a:?} {b:?}");
    }
}

#[test]
fn ids_and_hidden_states_match_transformers() {
    let e = load();
    assert_eq!((e.dim(), e.max_tokens()), (32, 24));
    let r = reference(&dir());
    let inputs = encoded(&e);
    for (inp, want) in inputs.iter().zip(r["texts"].as_array().unwrap()) {
        assert_eq!(inp.ids, ids(&want["ids"]), "{}", want["text"]);
    }
    // `<pad>` (id 1, the padding_idx) written in a text keeps position 1 and does not advance
    // the positions after it, as transformers numbers them.
    assert!(inputs.iter().any(|i| i.ids[1..].contains(&1)));
    let (_, want) = read_npy_f32(&dir().join("hidden.npy"));
    let got = e.hidden_states(&inputs).unwrap();
    let d = max_abs_diff(&got, &want);
    println!(
        "hidden states (one batch of {}): max abs diff {d:.2e}",
        inputs.len()
    );
    assert!(d <= 1e-4, "hidden states differ by {d}");
    let one: Vec<f32> = inputs
        .iter()
        .flat_map(|i| e.hidden_states(std::slice::from_ref(i)).unwrap())
        .collect();
    assert_eq!(
        max_abs_diff(&got, &one),
        0.0,
        "batch differs from one-by-one"
    );
}

#[test]
fn embeddings_match_sentence_transformers_encode() {
    let e = load();
    let texts = texts();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    for (prompt, file) in [
        (None, "embeddings.npy"),
        (Some("query"), "embeddings_query.npy"),
    ] {
        let opts = EmbedOptions {
            prompt: prompt.map(|p| e.prompt(p).unwrap().to_string()),
            batch_size: 4,
            ..EmbedOptions::default()
        };
        let got: Vec<f32> = e.embed(&refs, &opts).unwrap().concat();
        let (shape, want) = read_npy_f32(&dir().join(file));
        assert_eq!(shape, vec![texts.len(), 32]);
        let d = max_abs_diff(&got, &want);
        println!("{file}: max abs diff {d:.2e}");
        assert!(d <= 1e-5, "{file} differs by {d}");
    }
}

#[test]
fn cross_encoder_matches_sentence_transformers() {
    let dir = fixtures().join("xlmr-cross-encoder");
    let ce = CrossEncoder::load(&dir).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ce.max_tokens(), 40);
    let r = reference(&dir);
    let RefPairs {
        query,
        docs,
        entries: pairs,
        encoded,
    } = encode_reference_pairs(&ce, &r, "pairs");
    for (e, p) in encoded.iter().zip(pairs) {
        assert_eq!(e.ids, ids(&p["ids"]), "ids of {:?}", p["document"]);
        assert_eq!(e.type_ids, ids(&p["type_ids"]));
    }
    let batch = ce.logits(&encoded).unwrap();
    let scores = ce.score(query, &docs, true).unwrap();
    for (i, p) in pairs.iter().enumerate() {
        let one = ce.logits(std::slice::from_ref(&encoded[i])).unwrap()[0];
        let want = p["logit"].as_f64().unwrap() as f32;
        assert!((one - want).abs() <= 1e-5, "logit {i}: {one} vs {want}");
        assert_eq!(batch[i], one, "pair {i}: batch differs from a one-pair run");
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
    assert!(!oxinfer::embed::is_embedding_model(&dir));
    assert!(oxinfer::embed::is_reranker_model(&dir));
}
