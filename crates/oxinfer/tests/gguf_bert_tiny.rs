//! The tiny BERT and NomicBERT embedding models as GGUF files (tests/fixtures/bert-tiny-gguf/,
//! nomic-bert-tiny-gguf/, written from tests/fixtures/bert-tiny and nomic-bert-tiny by
//! tools/ref/gguf_embedding_convert.py in the layout of llama.cpp's convert_hf_to_gguf.py — for
//! BERT the converter's output equals llama.cpp's own, see docs/embeddings.md) against the
//! safetensors folders' transformers references: WordPiece ids from the GGUF vocabulary
//! (phantom-space spelling) equal transformers' (texts cut at `max_seq_length` compared on their
//! common part: a GGUF carries only the context length), last hidden states with token types
//! (≤ 1e-4), and the mean-pooled, normalized embeddings the GGUF's `pooling_type` asks for
//! (≤ 1e-5).

mod common;

use std::path::{Path, PathBuf};

use common::{fixtures, ids, max_abs_diff, read_npy_f32, reference};
use oxinfer::embed::pooling::normalize;
use oxinfer::embed::{is_embedding_model, EmbedOptions, Embedder, Encoded};

/// The GGUF of fixture `name` and the safetensors folder it was written from.
fn paths(name: &str) -> (PathBuf, PathBuf) {
    (
        fixtures().join(format!("{name}-gguf")).join("model.gguf"),
        fixtures().join(name),
    )
}

/// The reference texts' ids of `st` (as transformers cut them), without token types.
fn reference_inputs(st: &Path) -> Vec<Encoded> {
    reference(st)["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| Encoded {
            ids: ids(&t["ids"]),
            ..Encoded::default()
        })
        .collect()
}

fn check_ids_and_hidden_states(name: &str) {
    let (gguf, st) = paths(name);
    let e = Embedder::load(&gguf).unwrap_or_else(|e| panic!("{e}"));
    assert!(is_embedding_model(&gguf));
    assert_eq!((e.dim(), e.max_tokens()), (32, 64));
    let r = reference(&st);
    let max_seq = r["max_seq_length"].as_u64().unwrap() as usize;
    let opts = EmbedOptions::default();
    for (i, t) in r["texts"].as_array().unwrap().iter().enumerate() {
        let want = ids(&t["ids"]);
        let got = e.encode(i, t["text"].as_str().unwrap(), &opts).unwrap();
        if want.len() < max_seq {
            assert_eq!(got.ids, want, "{}", t["text"]);
        } else {
            let n = max_seq - 1;
            assert_eq!(got.ids[..n], want[..n], "{}", t["text"]);
        }
    }
    let (_, want) = read_npy_f32(&st.join("hidden.npy"));
    let got = e.hidden_states(&reference_inputs(&st)).unwrap();
    let d = max_abs_diff(&got, &want);
    println!("{name} GGUF hidden states: max abs diff {d:.2e}");
    assert!(d <= 1e-4, "hidden states differ by {d}");

    let pair = Encoded {
        ids: ids(&r["pair"]["ids"]),
        type_ids: ids(&r["pair"]["type_ids"]),
        ..Encoded::default()
    };
    let got = e.hidden_states(&[pair]).unwrap();
    let (_, want) = read_npy_f32(&st.join("hidden_pair.npy"));
    let d = max_abs_diff(&got, &want);
    assert!(d <= 1e-4, "pair hidden states differ by {d}");
}

/// The GGUF's embeddings of the reference ids against `want` (`[n, 32]`), normalized here when
/// `normalize_want`.
fn check_embeddings(name: &str, want: &Path, normalize_want: bool) {
    let (gguf, st) = paths(name);
    let e = Embedder::load(&gguf).unwrap_or_else(|e| panic!("{e}"));
    let got = e
        .embed_encoded(&reference_inputs(&st), &EmbedOptions::default())
        .unwrap();
    let (_, rows) = read_npy_f32(want);
    let want: Vec<f32> = rows
        .chunks_exact(32)
        .flat_map(|row| {
            let mut v = row.to_vec();
            if normalize_want {
                normalize(&mut v);
            }
            v
        })
        .collect();
    let d = max_abs_diff(&got.concat(), &want);
    println!("{name} GGUF normalized mean-pooled embeddings: max abs diff {d:.2e}");
    assert!(d <= 1e-5, "embeddings differ by {d}");
}

#[test]
fn bert_ids_and_hidden_states_match_transformers() {
    check_ids_and_hidden_states("bert-tiny");
}

#[test]
fn bert_embeddings_are_the_normalized_mean_pool() {
    // bert-tiny's own layout adds a Dense layer, which a GGUF does not carry: its pooled_mean.
    let want = fixtures().join("bert-tiny").join("pooled_mean.npy");
    check_embeddings("bert-tiny", &want, true);
}

#[test]
fn nomic_bert_ids_and_hidden_states_match_transformers() {
    check_ids_and_hidden_states("nomic-bert-tiny");
}

#[test]
fn nomic_bert_embeddings_match_sentence_transformers() {
    // nomic-bert-tiny's layout is mean pooling + Normalize: its encode output.
    let want = fixtures().join("nomic-bert-tiny").join("embeddings.npy");
    check_embeddings("nomic-bert-tiny", &want, false);
}
