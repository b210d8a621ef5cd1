//! The tiny BERT embedding model as a GGUF file (tests/fixtures/bert-tiny-gguf/model.gguf,
//! written from tests/fixtures/bert-tiny by tools/ref/gguf_embedding_convert.py in the layout of
//! llama.cpp's convert_hf_to_gguf.py — the converter's output equals llama.cpp's own, see
//! docs/embeddings.md) against the safetensors folder's transformers references: WordPiece ids
//! from the GGUF vocabulary (phantom-space spelling) equal transformers' (texts cut at
//! `max_seq_length` compared on their common part: a GGUF carries only the context length),
//! last hidden states with token types (≤ 1e-4), and the mean-pooled, normalized embeddings the
//! GGUF's `bert.pooling_type` asks for (≤ 1e-5).

mod common;

use std::path::PathBuf;

use common::{fixtures, ids, max_abs_diff, read_npy_f32, reference};
use oxinfer::embed::pooling::normalize;
use oxinfer::embed::{is_embedding_model, EmbedOptions, Embedder, Encoded};

fn gguf() -> PathBuf {
    fixtures().join("bert-tiny-gguf").join("model.gguf")
}

fn st() -> PathBuf {
    fixtures().join("bert-tiny")
}

fn load() -> Embedder {
    Embedder::load(&gguf()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn ids_and_hidden_states_match_transformers() {
    let e = load();
    assert!(is_embedding_model(&gguf()));
    assert_eq!((e.dim(), e.max_tokens()), (32, 64));
    let r = reference(&st());
    let max_seq = r["max_seq_length"].as_u64().unwrap() as usize;
    let opts = EmbedOptions::default();
    let mut inputs = Vec::new();
    for (i, t) in r["texts"].as_array().unwrap().iter().enumerate() {
        let want = ids(&t["ids"]);
        let got = e.encode(i, t["text"].as_str().unwrap(), &opts).unwrap();
        if want.len() < max_seq {
            assert_eq!(got.ids, want, "{}", t["text"]);
        } else {
            let n = max_seq - 1;
            assert_eq!(got.ids[..n], want[..n], "{}", t["text"]);
        }
        inputs.push(Encoded {
            ids: want,
            type_ids: Vec::new(),
        });
    }
    let (_, want) = read_npy_f32(&st().join("hidden.npy"));
    let got = e.hidden_states(&inputs).unwrap();
    let d = max_abs_diff(&got, &want);
    println!("hidden states: max abs diff {d:.2e}");
    assert!(d <= 1e-4, "hidden states differ by {d}");

    let pair = Encoded {
        ids: ids(&r["pair"]["ids"]),
        type_ids: ids(&r["pair"]["type_ids"]),
    };
    let got = e.hidden_states(&[pair]).unwrap();
    let (_, want) = read_npy_f32(&st().join("hidden_pair.npy"));
    let d = max_abs_diff(&got, &want);
    assert!(d <= 1e-4, "pair hidden states differ by {d}");
}

#[test]
fn embeddings_are_the_normalized_mean_pool() {
    let e = load();
    let r = reference(&st());
    let inputs: Vec<Encoded> = r["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| Encoded {
            ids: ids(&t["ids"]),
            type_ids: Vec::new(),
        })
        .collect();
    let got = e.embed_encoded(&inputs, &EmbedOptions::default()).unwrap();
    let (_, pooled) = read_npy_f32(&st().join("pooled_mean.npy"));
    let want: Vec<f32> = pooled
        .chunks_exact(32)
        .flat_map(|row| {
            let mut v = row.to_vec();
            normalize(&mut v);
            v
        })
        .collect();
    let d = max_abs_diff(&got.concat(), &want);
    println!("normalized mean-pooled embeddings: max abs diff {d:.2e}");
    assert!(d <= 1e-5, "embeddings differ by {d}");
}
