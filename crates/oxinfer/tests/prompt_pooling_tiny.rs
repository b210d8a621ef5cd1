//! Pooling that leaves the prompt out (`include_prompt: false` in `1_Pooling/config.json`):
//! tests/fixtures/bert-prompt-pooling (made by tools/ref/make_tiny_prompt_pooling.py: the tiny
//! random BERT, all six pooling modes at once, two prompts, one of 8 tokens) against
//! sentence-transformers' `encode` in padded batches of 3, without and with each prompt.

mod common;

use std::path::PathBuf;

use common::{check_embeddings, copy_to_scratch, fixtures, load_embedder};
use oxinfer::embed::EmbedOptions;

fn dir() -> PathBuf {
    fixtures().join("bert-prompt-pooling")
}

#[test]
fn embeddings_match_sentence_transformers_without_the_prompt_tokens() {
    assert_eq!(
        check_embeddings(&dir(), &["query", "passage"], 1e-5),
        6 * 32
    );
}

#[test]
fn prompt_length_counts_cls_and_the_prompt_but_not_sep() {
    let e = load_embedder(&dir());
    let prompt = e.prompt("passage").unwrap().to_string();
    let opts = EmbedOptions {
        prompt: Some(prompt.clone()),
        ..EmbedOptions::default()
    };
    let with = e.encode(0, "Hello world", &opts).unwrap();
    let alone = e.encode(0, "", &opts).unwrap();
    // The prompt alone is [CLS] prompt [SEP]: every token but [SEP] is the prompt's.
    assert_eq!(alone.prompt_len, alone.ids.len() - 1);
    assert_eq!(with.ids[..with.prompt_len], alone.ids[..alone.prompt_len]);
    assert_eq!(
        e.encode(0, "Hello world", &EmbedOptions::default())
            .unwrap()
            .prompt_len,
        0
    );
}

#[test]
fn including_the_prompt_gives_other_embeddings() {
    // The control: with include_prompt true the prompted embeddings move away from the
    // references, so the test above does check the masking.
    let copy = copy_to_scratch(&dir(), "prompt-pooling-included");
    let pooling = copy.join("1_Pooling/config.json");
    let text = std::fs::read_to_string(&pooling).unwrap();
    std::fs::write(
        &pooling,
        text.replace("\"include_prompt\": false", "\"include_prompt\": true"),
    )
    .unwrap();
    let e = load_embedder(&copy);
    let texts = common::reference_texts(&dir());
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let opts = EmbedOptions {
        prompt: Some(e.prompt("query").unwrap().to_string()),
        ..EmbedOptions::default()
    };
    let got: Vec<f32> = e.embed(&refs, &opts).unwrap().concat();
    let (_, want) = common::read_npy_f32(&dir().join("embeddings_query.npy"));
    assert!(common::max_abs_diff(&got, &want) > 1e-2);
}
