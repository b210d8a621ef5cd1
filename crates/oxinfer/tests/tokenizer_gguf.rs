//! GGUF tokenizers against llama.cpp (tests/fixtures/tokenizer/<model>.json, made by
//! tools/ref/make_tokenizer_refs.py and, for the `tokenizer.ggml.model = "gemma4"` vocabularies,
//! tools/ref/make_gemma4_tokenizer_refs.py). The GGUF files are found in the fixture folder or
//! among the real test models (`common::real_model`: fetched on first use when the hub knows
//! them); a file that cannot be had skips its test with one line.

mod common;

use common::{fixture_json, fixtures, ids, real_model};
use oxinfer::gguf::GgufFile;
use oxinfer::tokenizer::Tokenizer;
use serde_json::Value;

fn load_fixture(name: &str) -> Value {
    fixture_json(&format!("tokenizer/{name}"))
}

/// Loads the model named by the fixture, or prints the skip line.
fn open(fixture: &Value) -> Option<Tokenizer> {
    let file = fixture["model"].as_str().unwrap_or_default();
    let committed = fixtures().join("tokenizer").join(file);
    let path = if committed.is_file() {
        committed
    } else {
        real_model(file)?
    };
    let g = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    Some(Tokenizer::from_gguf(&g).unwrap_or_else(|e| panic!("{e}")))
}

/// FNV-1a 64 over (u32 little-endian length, bytes) of every token's piece.
fn pieces_digest(tok: &Tokenizer) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for id in 0..tok.vocab_size() as u32 {
        let p = tok.token_bytes(id).unwrap_or_default();
        for &b in (p.len() as u32).to_le_bytes().iter().chain(p) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// Checks every case of `fixture_name` against llama.cpp (ids, decode, streaming) and, for each
/// key in `also` (another reference's ids per case), that those ids are ours too.
fn check_model(fixture_name: &str) {
    check_model_also(fixture_name, &[]);
}

fn check_model_also(fixture_name: &str, also: &[&str]) {
    let fx = load_fixture(fixture_name);
    let Some(tok) = open(&fx) else {
        return;
    };
    let lc = &fx["llama_cpp"];
    assert!(lc.is_object(), "{fixture_name} has no llama.cpp reference");

    // Vocabulary facts.
    assert_eq!(tok.vocab_size() as u64, lc["n_vocab"].as_u64().unwrap_or(0));
    assert_eq!(tok.bos_id().map(u64::from), lc["bos_id"].as_u64());
    assert_eq!(tok.eos_id().map(u64::from), lc["eos_id"].as_u64());
    assert_eq!(Some(tok.add_bos_default()), lc["add_bos"].as_bool());
    assert_eq!(
        tok.eos_ids(),
        ids(&lc["eog_ids"]).as_slice(),
        "end-of-generation ids"
    );
    assert_eq!(
        tok.encode("Hello world", tok.add_bos_default())
            .unwrap_or_default(),
        ids(&lc["with_bos"])
    );
    assert_eq!(
        Some(pieces_digest(&tok).as_str()),
        lc["pieces_fnv1a64"].as_str(),
        "token pieces differ from llama.cpp's token_to_piece"
    );
    if let Some(sample) = lc["pieces_sample"].as_object() {
        for (id, bytes) in sample {
            let id: u32 = id.parse().unwrap_or(u32::MAX);
            let want: Vec<u8> = ids(bytes).into_iter().map(|b| b as u8).collect();
            assert_eq!(
                tok.token_bytes(id),
                Some(want.as_slice()),
                "piece of token {id}"
            );
        }
    }

    // The hand-written corpus, then the seeded random strings.
    let mut cases = fx["cases"].as_array().cloned().unwrap_or_default();
    cases.extend(fx["fuzz"].as_array().cloned().unwrap_or_default());
    cases.extend(fx["upstream"].as_array().cloned().unwrap_or_default());
    let mut failures = Vec::new();
    let mut round_trips = 0;
    for case in &cases {
        let text = case["text"].as_str().unwrap_or_default();
        let want = ids(&case["llama_cpp"]);
        let got = tok
            .encode(text, false)
            .unwrap_or_else(|e| panic!("{text:?}: {e}"));
        if got != want {
            failures.push(format!(
                "{text:?}\n    ours      {got:?}\n    llama.cpp {want:?}"
            ));
            continue;
        }
        for key in also.iter().copied().chain(Some("upstream")) {
            if !case[key].is_null() {
                assert_eq!(got, ids(&case[key]), "{text:?}: ids differ from {key}");
            }
        }
        // Decoding matches llama.cpp's pieces, and round-trips where llama.cpp's does.
        let decoded = tok.decode(&got);
        if let Some(lc_text) = case["llama_cpp_decode"].as_str() {
            assert_eq!(decoded, lc_text, "decode of {text:?}");
            if lc_text == text {
                round_trips += 1;
            }
        }
        // Streaming: complete UTF-8 only, concatenating to the full decode.
        let mut stream = tok.stream_from_start();
        let mut streamed = String::new();
        for &id in &got {
            let piece = stream.push(id);
            if !decoded.contains('\u{FFFD}') {
                assert!(
                    !piece.contains('\u{FFFD}'),
                    "{text:?}: broken character in stream"
                );
            }
            streamed.push_str(&piece);
        }
        streamed.push_str(&stream.finish());
        assert_eq!(streamed, decoded, "stream of {text:?}");
    }
    assert!(
        failures.is_empty(),
        "{fixture_name}: {} of {} corpus lines differ from llama.cpp:\n  {}",
        failures.len(),
        cases.len(),
        failures.join("\n  ")
    );
    println!(
        "{fixture_name}: {} corpus and fuzz lines identical to llama.cpp, {round_trips} round-trip",
        cases.len()
    );
}

#[test]
fn smollm2_matches_llama_cpp() {
    check_model("smollm2.json");
}

#[test]
fn gemma3_matches_llama_cpp() {
    check_model("gemma3.json");
}

/// The real Gemma 4 vocabulary (`tokenizer.ggml.model = "gemma4"`, llama.cpp's vocab-only test
/// GGUF): llama.cpp, transformers' GemmaTokenizer on the same vocabulary and merges, and the ids
/// llama.cpp's own test file records for its test strings.
#[test]
fn gemma4_matches_llama_cpp_and_transformers() {
    check_model_also("gemma4.json", &["transformers"]);
}

/// A small Gemma-4-shaped tokenizer.json trained with `tokenizers`, converted by llama.cpp's
/// converter (the GGUF is committed): llama.cpp and `tokenizers` on every case.
#[test]
fn gemma4_tiny_matches_llama_cpp_and_tokenizers() {
    check_model_also("gemma4-tiny.json", &["tokenizers"]);
}

#[test]
fn gemma3_streams_byte_fallback_and_emoji() {
    let fx = load_fixture("gemma3.json");
    let Some(tok) = open(&fx) else {
        return;
    };
    // A byte-fallback sequence (U+10FFFF has no piece) and a ZWJ emoji, token by token.
    for text in ["\u{10FFFF}x", "👨‍👩‍👧‍👦 family", "日本語"] {
        let ids = tok.encode(text, false).unwrap_or_default();
        let mut s = tok.stream();
        let mut out = String::new();
        for &id in &ids {
            let piece = s.push(id);
            assert!(!piece.contains('\u{FFFD}'), "{text:?}");
            out.push_str(&piece);
        }
        assert!(!s.has_pending());
        out.push_str(&s.finish());
        assert_eq!(out, text);
    }
}

#[test]
fn chat_prompt_specials_are_single_tokens() {
    let fx = load_fixture("smollm2.json");
    let Some(tok) = open(&fx) else {
        return;
    };
    let ids = tok
        .encode("<|im_start|>user\nHi<|im_end|>\n", false)
        .unwrap_or_default();
    assert_eq!(ids.first(), tok.token_id("<|im_start|>").as_ref());
    assert!(ids.contains(&2), "{ids:?}");
    assert!(tok.is_special(1) && tok.is_eog(2) && !tok.is_eog(1));
    assert_eq!(tok.bos_token(), Some("<|im_start|>"));
    assert_eq!(tok.eos_token(), Some("<|im_end|>"));
    assert!(tok
        .chat_template()
        .is_some_and(|t| t.contains("<|im_start|>")));
}
