//! The tiny random Qwen3-Embedding model (tests/fixtures/qwen3-embedding-tiny/, made by
//! tools/ref/make_tiny_qwen3_embedding.py) against the `tokenizers` package and transformers /
//! sentence-transformers float32: byte-level BPE ids of the tokenizer corpus with the
//! post-processor's `<|endoftext|>`, the decoder's final-normed hidden states (≤ 1e-4), last-token
//! pooled + normalized embeddings without and with the instruction prompt (≤ 1e-5; the
//! reference pads on the left, oxinfer does not pad), and one batch equal to one-by-one runs.

mod common;

use std::path::PathBuf;

use common::{
    encode_texts, fixtures, ids, load_embedder, max_abs_diff, read_npy_f32, reference,
    reference_texts,
};
use oxinfer::embed::{EmbedOptions, Embedder, Encoded};

fn dir() -> PathBuf {
    fixtures().join("qwen3-embedding-tiny")
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
fn ids_match_the_tokenizers_package() {
    let e = load();
    let text = std::fs::read_to_string(dir().join("tokenizer_refs.json")).unwrap();
    let refs: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = refs["cases"].as_array().unwrap();
    let strict = EmbedOptions {
        truncate: false,
        ..EmbedOptions::default()
    };
    for (i, c) in cases.iter().enumerate() {
        let t = c["text"].as_str().unwrap();
        assert_eq!(
            e.tokenizer().encode(t, false).unwrap(),
            ids(&c["ids"]),
            "{t:?}"
        );
        let full = ids(&c["with_specials"]);
        match e.encode(i, t, &strict) {
            Ok(got) => assert_eq!(got.ids, full, "{t:?}"),
            Err(err) => assert!(full.len() > e.max_tokens(), "{t:?}: {err}"),
        }
    }
    println!("{} strings identical", cases.len());
}

#[test]
fn hidden_states_match_transformers_and_batch_equals_one_by_one() {
    let e = load();
    assert_eq!((e.dim(), e.max_tokens()), (64, 64));
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
    assert!(e.normalizes());
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
        assert_eq!(shape, vec![texts.len(), 64]);
        let d = max_abs_diff(&got, &want);
        println!("{file}: max abs diff {d:.2e}");
        assert!(d <= 1e-5, "{file} differs by {d}");
    }
}

#[test]
fn too_long_without_truncation_is_an_error() {
    let e = load();
    let long = "word ".repeat(80);
    let opts = EmbedOptions {
        truncate: false,
        ..EmbedOptions::default()
    };
    let err = e.embed(&["short", &long], &opts).unwrap_err().to_string();
    assert!(
        err.contains("input 1") && err.contains("limit of 64"),
        "{err}"
    );
    assert!(oxinfer::embed::is_embedding_model(&dir()));
    // The same decoder without modules.json is a chat model, not an embedder.
    let bare = common::scratch_dir("qwen3-embedding-bare");
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        std::fs::copy(dir().join(f), bare.join(f)).unwrap();
    }
    assert!(!oxinfer::embed::is_embedding_model(&bare));
    let err = Embedder::load(&bare).unwrap_err().to_string();
    assert!(err.contains("modules.json"), "{err}");
}
