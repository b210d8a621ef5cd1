//! The tiny random NomicBERT model (tests/fixtures/nomic-bert-tiny/, made by
//! tools/ref/make_tiny_nomic_bert.py; nomic-embed-text's architecture and tensor names: fused
//! `Wqkv`, rotary positions, gated SiLU MLP) against transformers / sentence-transformers
//! float32: input ids, last hidden states (≤ 1e-4) with token types, mean-pooled + normalized
//! embeddings with and without the `search_query: ` prompt (≤ 1e-5), and one batch equal to
//! one-by-one runs.

mod common;

use std::path::PathBuf;

use common::{
    fixtures, ids, load_embedder, max_abs_diff, read_npy_f32, reference, reference_texts,
};
use oxinfer::embed::{EmbedOptions, Embedder, Encoded};

fn dir() -> PathBuf {
    fixtures().join("nomic-bert-tiny")
}

fn load() -> Embedder {
    load_embedder(&dir())
}

fn texts() -> Vec<String> {
    reference_texts(&dir())
}

#[test]
fn hidden_states_match_transformers_and_batch_equals_one_by_one() {
    let e = load();
    assert_eq!((e.dim(), e.max_tokens()), (32, 24));
    let r = reference(&dir());
    let opts = EmbedOptions::default();
    let inputs: Vec<Encoded> = texts()
        .iter()
        .enumerate()
        .map(|(i, t)| e.encode(i, t, &opts).unwrap())
        .collect();
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
    let one: Vec<f32> = inputs
        .iter()
        .flat_map(|i| e.hidden_states(std::slice::from_ref(i)).unwrap())
        .collect();
    assert_eq!(
        max_abs_diff(&got, &one),
        0.0,
        "batch differs from one-by-one"
    );

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
        assert_eq!(shape, vec![texts.len(), 32]);
        let d = max_abs_diff(&got, &want);
        println!("{file}: max abs diff {d:.2e}");
        assert!(d <= 1e-5, "{file} differs by {d}");
    }
}
