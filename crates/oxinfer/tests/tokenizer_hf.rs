//! `Tokenizer::from_files` on SmolLM2's tokenizer as transformers saves it
//! (tests/fixtures/tokenizer/smollm2-hf/), against transformers' ids for the same corpus
//! (tests/fixtures/tokenizer/smollm2.json, field "transformers"). Needs no model file.

mod common;

use std::path::Path;

use common::{fixture_json, ids};
use oxinfer::tokenizer::{Tokenizer, TokenizerError};

fn smollm2_hf() -> Tokenizer {
    let dir = common::fixtures().join("tokenizer/smollm2-hf");
    let cfg = dir.join("tokenizer_config.json");
    Tokenizer::from_files(&dir.join("tokenizer.json"), Some(cfg.as_path()))
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn smollm2_folder_matches_transformers() {
    let tok = smollm2_hf();
    let fx = fixture_json("tokenizer/smollm2.json");
    let mut cases = fx["cases"].as_array().cloned().unwrap_or_default();
    cases.extend(fx["fuzz"].as_array().cloned().unwrap_or_default());
    let mut failures = Vec::new();
    for case in &cases {
        let text = case["text"].as_str().unwrap_or_default();
        let want = ids(&case["transformers"]);
        let got = tok
            .encode(text, false)
            .unwrap_or_else(|e| panic!("{text:?}: {e}"));
        if got != want {
            failures.push(format!(
                "{text:?}\n    ours         {got:?}\n    transformers {want:?}"
            ));
            continue;
        }
        let decoded = tok.decode(&got);
        assert_eq!(
            Some(decoded.as_str()),
            case["transformers_decode"].as_str(),
            "decode of {text:?}"
        );
        let mut stream = tok.stream_from_start();
        let mut streamed: String = got.iter().map(|&id| stream.push(id)).collect();
        streamed.push_str(&stream.finish());
        assert_eq!(streamed, decoded);
    }
    assert!(
        failures.is_empty(),
        "{} of {} lines differ from transformers:\n  {}",
        failures.len(),
        cases.len(),
        failures.join("\n  ")
    );
    println!(
        "smollm2-hf: {} lines identical to transformers",
        cases.len()
    );
}

#[test]
fn smollm2_folder_metadata() {
    let tok = smollm2_hf();
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.bos_token(), Some("<|im_start|>"));
    assert_eq!(tok.eos_token(), Some("<|im_end|>"));
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_id(), Some(2));
    assert!(!tok.add_bos_default());
    // llama.cpp's end-of-generation set for this vocabulary.
    assert_eq!(tok.eos_ids(), &[0, 2, 4]);
    assert!(tok.is_special(1));
    assert!(!tok.is_special(19556));
    assert_eq!(tok.token_piece(216), Some("Ġ"));
    assert_eq!(tok.token_bytes(216), Some(&b" "[..]));
    assert!(tok
        .chat_template()
        .is_some_and(|t| t.contains("<|im_start|>")));
    assert_eq!(tok.encode("Hi", true).unwrap_or_default().first(), Some(&1));
}

#[test]
fn errors_name_the_file() {
    let missing = Path::new("/nonexistent/tokenizer.json");
    let err = Tokenizer::from_files(missing, None).err();
    assert!(matches!(err, Some(TokenizerError::Io { .. })), "{err:?}");
    assert!(err.is_some_and(|e| e.to_string().contains("/nonexistent/tokenizer.json")));

    let dir = std::env::temp_dir().join(format!("oxinfer-tok-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let bad = dir.join("tokenizer.json");
    std::fs::write(&bad, "{not json").unwrap_or_else(|e| panic!("{e}"));
    let err = Tokenizer::from_files(&bad, None).err();
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        msg.contains("tokenizer.json") && msg.contains("JSON"),
        "{msg}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A vocabulary whose ids are far past its size (the fuzzer's `2363333333`) is refused by
/// name instead of sizing the id table by its largest id (tens of GB).
#[test]
fn sparse_ids_are_refused() {
    let dir = std::env::temp_dir().join(format!("oxinfer-tok-sparse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join("tokenizer.json");
    let json = r#"{"version": "1.0", "added_tokens": [], "model": {"type": "WordLevel",
        "vocab": {"a": 0, "b": 1, "[UNK]": 2363333333}, "unk_token": "[UNK]"},
        "pre_tokenizer": {"type": "Whitespace"}}"#;
    std::fs::write(&path, json).unwrap_or_else(|e| panic!("{e}"));
    let msg = Tokenizer::from_files(&path, None)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        msg.contains("tokenizer.json") && msg.contains("token id 2363333333 for only 3 tokens"),
        "{msg}"
    );
    // Dense ids with a few gaps still load.
    let gaps = json.replace("2363333333", "7");
    std::fs::write(&path, gaps).unwrap_or_else(|e| panic!("{e}"));
    let tok = Tokenizer::from_files(&path, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tok.encode("a b", false).unwrap_or_default(), vec![0, 1]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shareable_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Tokenizer>();
    send_sync::<oxinfer::chat_template::ChatTemplate>();
}
