//! The tiny random BERT sentence-transformers model (tests/fixtures/bert-tiny/, made by
//! tools/ref/make_tiny_bert.py) against transformers / sentence-transformers float32: input ids,
//! last hidden states (≤ 1e-4), every pooling mode and the final Dense + Normalize embeddings
//! (≤ 1e-5), prompts, token types, and one batch of different lengths equal to one-by-one runs.

mod common;

use std::path::PathBuf;

use common::{
    encode_texts, fixtures, ids, load_embedder, max_abs_diff, read_npy_f32, reference,
    reference_texts,
};
use oxinfer::embed::{EmbedOptions, Embedder, Encoded, PoolMode, Pooling};

fn dir() -> PathBuf {
    fixtures().join("bert-tiny")
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
fn ids_and_hidden_states_match_transformers() {
    let e = load();
    assert_eq!((e.dim(), e.max_tokens()), (16, 24));
    let r = reference(&dir());
    let inputs = encoded(&e);
    for (inp, want) in inputs.iter().zip(r["texts"].as_array().unwrap()) {
        assert_eq!(inp.ids, ids(&want["ids"]), "{}", want["text"]);
    }
    let (_, want) = read_npy_f32(&dir().join("hidden.npy"));
    let got = e.hidden_states(&inputs).unwrap();
    let d = max_abs_diff(&got, &want);
    println!(
        "hidden states (one batch of {}): max abs diff {d:.2e}",
        inputs.len()
    );
    assert!(d <= 1e-4, "hidden states differ by {d}");
}

#[test]
fn batch_equals_one_by_one() {
    let e = load();
    let inputs = encoded(&e);
    let all = e.hidden_states(&inputs).unwrap();
    let one: Vec<f32> = inputs
        .iter()
        .flat_map(|i| e.hidden_states(std::slice::from_ref(i)).unwrap())
        .collect();
    assert_eq!(max_abs_diff(&all, &one), 0.0);
}

#[test]
fn every_pooling_mode_matches_sentence_transformers() {
    let e = load();
    let inputs = encoded(&e);
    let hidden = e.hidden_states(&inputs).unwrap();
    for (mode, file) in [
        (PoolMode::Cls, "cls"),
        (PoolMode::Max, "max"),
        (PoolMode::Mean, "mean"),
        (PoolMode::MeanSqrtLen, "mean_sqrt_len_tokens"),
        (PoolMode::WeightedMean, "weightedmean"),
        (PoolMode::LastToken, "lasttoken"),
    ] {
        let pooling = Pooling::new(vec![mode]);
        let mut row = 0;
        let mut got = Vec::new();
        for inp in &inputs {
            let n = inp.ids.len();
            got.extend(pooling.pool(&hidden[row * 32..(row + n) * 32], 32, 0));
            row += n;
        }
        let (_, want) = read_npy_f32(&dir().join(format!("pooled_{file}.npy")));
        let d = max_abs_diff(&got, &want);
        println!("pooling {file}: max abs diff {d:.2e}");
        assert!(d <= 1e-5, "pooling {file} differs by {d}");
    }
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
            batch_size: 3,
            ..EmbedOptions::default()
        };
        let got: Vec<f32> = e.embed(&refs, &opts).unwrap().concat();
        let (shape, want) = read_npy_f32(&dir().join(file));
        assert_eq!(shape, vec![texts.len(), 16]);
        let d = max_abs_diff(&got, &want);
        println!("{file}: max abs diff {d:.2e}");
        assert!(d <= 1e-5, "{file} differs by {d}");
    }
}

#[test]
fn token_types_of_a_pair() {
    let e = load();
    let r = reference(&dir());
    let pair = Encoded {
        ids: ids(&r["pair"]["ids"]),
        type_ids: ids(&r["pair"]["type_ids"]),
        ..Encoded::default()
    };
    assert!(pair.type_ids.contains(&1));
    let got = e.hidden_states(&[pair]).unwrap();
    let (_, want) = read_npy_f32(&dir().join("hidden_pair.npy"));
    let d = max_abs_diff(&got, &want);
    assert!(d <= 1e-4, "pair hidden states differ by {d}");
}

#[test]
fn too_long_without_truncation_is_an_error() {
    let e = load();
    let long = "word ".repeat(40);
    let opts = EmbedOptions {
        truncate: false,
        ..EmbedOptions::default()
    };
    let err = e.embed(&["short", &long], &opts).unwrap_err().to_string();
    assert!(
        err.contains("input 1") && err.contains("limit of 24"),
        "{err}"
    );
    let ok = e.embed(&[&long], &EmbedOptions::default()).unwrap();
    assert_eq!(ok[0].len(), 16);
}
