//! Every pre-tokenizer family and SentencePiece's space prefix against llama.cpp: the test writes
//! metadata-only copies of the GGUF files with one key changed (SmolLM2's vocabulary under other
//! `tokenizer.ggml.pre` values, Gemma 3's with `add_space_prefix` on), exactly as
//! tools/ref/make_tokenizer_refs.py did for tests/fixtures/tokenizer/variants.json.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};

use common::{fixture_json, real_model, scratch_dir};
use oxinfer::gguf::{GgufFile, MetaArray, MetaValue};
use oxinfer::tokenizer::Tokenizer;
use serde_json::Value;

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// GGUF type code and payload of an array.
fn put_array(out: &mut Vec<u8>, a: &MetaArray) {
    macro_rules! items {
        ($code:expr, $v:expr, $f:expr) => {{
            out.extend_from_slice(&($code as u32).to_le_bytes());
            out.extend_from_slice(&($v.len() as u64).to_le_bytes());
            for x in $v {
                $f(out, x);
            }
        }};
    }
    match a {
        MetaArray::U8(v) => items!(0, v, |o: &mut Vec<u8>, x: &u8| o.push(*x)),
        MetaArray::I8(v) => items!(1, v, |o: &mut Vec<u8>, x: &i8| o
            .extend_from_slice(&x.to_le_bytes())),
        MetaArray::U16(v) => items!(2, v, |o: &mut Vec<u8>, x: &u16| o
            .extend_from_slice(&x.to_le_bytes())),
        MetaArray::I16(v) => items!(3, v, |o: &mut Vec<u8>, x: &i16| o
            .extend_from_slice(&x.to_le_bytes())),
        MetaArray::U32(v) => items!(4, v, |o: &mut Vec<u8>, x: &u32| o
            .extend_from_slice(&x.to_le_bytes())),
        MetaArray::I32(v) => items!(5, v, |o: &mut Vec<u8>, x: &i32| o
            .extend_from_slice(&x.to_le_bytes())),
        MetaArray::F32(v) => items!(6, v, |o: &mut Vec<u8>, x: &f32| o
            .extend_from_slice(&x.to_le_bytes())),
        MetaArray::Bool(v) => items!(7, v, |o: &mut Vec<u8>, x: &bool| o.push(u8::from(*x))),
        MetaArray::String(v) => items!(8, v, |o: &mut Vec<u8>, x: &String| put_str(o, x)),
        MetaArray::U64(v) => items!(10, v, |o: &mut Vec<u8>, x: &u64| o
            .extend_from_slice(&x.to_le_bytes())),
        MetaArray::I64(v) => items!(11, v, |o: &mut Vec<u8>, x: &i64| o
            .extend_from_slice(&x.to_le_bytes())),
        MetaArray::F64(v) => items!(12, v, |o: &mut Vec<u8>, x: &f64| o
            .extend_from_slice(&x.to_le_bytes())),
        MetaArray::Array(v) => items!(9, v, put_array),
    }
}

fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    let (code, bytes): (u32, Vec<u8>) = match v {
        MetaValue::U8(x) => (0, vec![*x]),
        MetaValue::I8(x) => (1, x.to_le_bytes().to_vec()),
        MetaValue::U16(x) => (2, x.to_le_bytes().to_vec()),
        MetaValue::I16(x) => (3, x.to_le_bytes().to_vec()),
        MetaValue::U32(x) => (4, x.to_le_bytes().to_vec()),
        MetaValue::I32(x) => (5, x.to_le_bytes().to_vec()),
        MetaValue::F32(x) => (6, x.to_le_bytes().to_vec()),
        MetaValue::Bool(x) => (7, vec![u8::from(*x)]),
        MetaValue::String(s) => {
            let mut b = Vec::new();
            put_str(&mut b, s);
            (8, b)
        }
        MetaValue::Array(a) => {
            let mut b = Vec::new();
            put_array(&mut b, a);
            (9, b)
        }
        MetaValue::U64(x) => (10, x.to_le_bytes().to_vec()),
        MetaValue::I64(x) => (11, x.to_le_bytes().to_vec()),
        MetaValue::F64(x) => (12, x.to_le_bytes().to_vec()),
    };
    out.extend_from_slice(&code.to_le_bytes());
    out.extend_from_slice(&bytes);
}

/// Writes a GGUF v3 file with the given metadata and no tensors.
fn write_gguf(dst: &Path, meta: &[(String, MetaValue)]) {
    let mut out = Vec::new();
    out.extend_from_slice(b"GGUF");
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&(meta.len() as u64).to_le_bytes());
    for (k, v) in meta {
        put_str(&mut out, k);
        put_value(&mut out, v);
    }
    while out.len() % 32 != 0 {
        out.push(0);
    }
    let mut f = std::fs::File::create(dst).unwrap_or_else(|e| panic!("{}: {e}", dst.display()));
    f.write_all(&out)
        .unwrap_or_else(|e| panic!("{}: {e}", dst.display()));
}

/// Writes a GGUF v3 file holding the metadata of `src` with `key` set to `value`, and no tensors.
fn metadata_copy(src: &GgufFile, dst: &Path, key: &str, value: MetaValue) {
    let mut meta: Vec<(String, MetaValue)> = src
        .metadata()
        .iter()
        .filter(|(k, _)| k.as_str() != key)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    meta.push((key.to_string(), value));
    write_gguf(dst, &meta);
}

fn strings(v: &[&str]) -> MetaValue {
    MetaValue::Array(MetaArray::String(v.iter().map(|s| s.to_string()).collect()))
}

/// A small byte-level BPE vocabulary: the 256 byte characters, a few merges, two specials.
fn tiny_bpe(pre: Option<&str>, model: &str) -> Vec<(String, MetaValue)> {
    let table: Vec<String> = (0..=255u8)
        .map(|b| {
            let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
            let n = (0..b)
                .filter(|&x| {
                    !((b'!'..=b'~').contains(&x) || (0xA1..=0xAC).contains(&x) || x >= 0xAE)
                })
                .count() as u32;
            let c = if printable {
                char::from(b)
            } else {
                char::from_u32(256 + n).unwrap_or('?')
            };
            c.to_string()
        })
        .collect();
    let mut tokens: Vec<String> = vec!["<|im_start|>".into(), "<|im_end|>".into()];
    tokens.extend(table);
    tokens.extend(["he", "ll", "hell", "hello", "Ġhello", "Ġw"].map(String::from));
    let mut types = vec![3i32, 3];
    types.extend(std::iter::repeat_n(1, tokens.len() - 2));
    let mut meta = vec![
        (
            "general.architecture".to_string(),
            MetaValue::String("llama".into()),
        ),
        (
            "tokenizer.ggml.model".to_string(),
            MetaValue::String(model.into()),
        ),
        (
            "tokenizer.ggml.tokens".to_string(),
            MetaValue::Array(MetaArray::String(tokens)),
        ),
        (
            "tokenizer.ggml.token_type".to_string(),
            MetaValue::Array(MetaArray::I32(types)),
        ),
        (
            "tokenizer.ggml.merges".to_string(),
            strings(&["h e", "l l", "he ll", "hell o", "Ġ hello", "Ġ w"]),
        ),
        ("tokenizer.ggml.eos_token_id".to_string(), MetaValue::U32(1)),
    ];
    if let Some(p) = pre {
        meta.push((
            "tokenizer.ggml.pre".to_string(),
            MetaValue::String(p.into()),
        ));
    }
    meta
}

fn scratch(name: &str) -> PathBuf {
    scratch_dir(name).join("vocab.gguf")
}

/// Writes `meta` to `path` as a GGUF file and builds its tokenizer.
fn tokenizer_of(path: &Path, meta: &[(String, MetaValue)]) -> Result<Tokenizer, String> {
    write_gguf(path, meta);
    let g = GgufFile::open(path).unwrap_or_else(|e| panic!("{e}"));
    Tokenizer::from_gguf(&g).map_err(|e| e.to_string())
}

/// The error [`tokenizer_of`] gives for `meta` (empty when it builds one).
fn tokenizer_error(path: &Path, meta: &[(String, MetaValue)]) -> String {
    tokenizer_of(path, meta).err().unwrap_or_default()
}

#[test]
fn tiny_written_vocabularies() {
    let path = scratch("tiny");
    // Byte-level BPE with an unknown pre-tokenizer name: GPT-2's expression, a warning.
    let tok = tokenizer_of(&path, &tiny_bpe(Some("no-such-pre"), "gpt2"))
        .unwrap_or_else(|e| panic!("{e}"));
    let ids = tok
        .encode("<|im_start|>hello hello<|im_end|>", false)
        .unwrap_or_default();
    let hello = tok.token_id("hello");
    let space_hello = tok.token_id("Ġhello");
    assert_eq!(
        ids,
        [Some(0), hello, space_hello, Some(1)].map(|x| x.unwrap_or(u32::MAX))
    );
    assert_eq!(tok.decode(&ids), "<|im_start|>hello hello<|im_end|>");
    assert_eq!(tok.eos_ids(), &[1]);
    assert!(tok.is_eog(1) && tok.is_special(0));
    assert_eq!(tok.bos_id(), None);
    assert!(!tok.add_bos_default());
    assert!(
        tok.encode("x", true).is_err(),
        "BOS requested but none defined"
    );
    assert_eq!(tok.encode("", false).unwrap_or_default(), Vec::<u32>::new());

    // An unsupported tokenizer family is a clear error naming the key ("bert" is read since
    // the GGUF embedding models: tests/gguf_bert_tiny.rs).
    let msg = tokenizer_error(&path, &tiny_bpe(None, "rwkv"));
    assert!(
        msg.contains("tokenizer.ggml.model") && msg.contains("rwkv"),
        "{msg}"
    );

    // No merges key: a vocabulary without merges (GGUF writers store no empty array), so
    // every symbol stays one token where the merges would have joined "hello".
    let meta: Vec<_> = tiny_bpe(None, "gpt2")
        .into_iter()
        .filter(|(k, _)| k != "tokenizer.ggml.merges")
        .collect();
    let tok = tokenizer_of(&path, &meta).unwrap_or_else(|e| panic!("{e}"));
    let ids = tok.encode("hello", false).unwrap_or_default();
    let pieces: Vec<_> = ids
        .iter()
        .map(|&i| tok.token_piece(i).unwrap_or("?"))
        .collect();
    assert_eq!(pieces, ["h", "e", "l", "l", "o"]);
    // Merges of the wrong type are still an error naming the key.
    let mut meta = tiny_bpe(None, "gpt2");
    for (k, v) in meta.iter_mut() {
        if k == "tokenizer.ggml.merges" {
            *v = MetaValue::U32(7);
        }
    }
    let msg = tokenizer_error(&path, &meta);
    assert!(msg.contains("tokenizer.ggml.merges"), "{msg}");

    // Token types of the wrong type.
    let mut meta = tiny_bpe(None, "gpt2");
    for (k, v) in meta.iter_mut() {
        if k == "tokenizer.ggml.token_type" {
            *v = strings(&["x"]);
        }
    }
    let msg = tokenizer_error(&path, &meta);
    assert!(msg.contains("tokenizer.ggml.token_type"), "{msg}");
    let _ = std::fs::remove_dir_all(path.parent().unwrap_or(Path::new("/nonexistent")));
}

#[test]
fn tiny_sentencepiece_vocabulary() {
    let path = scratch("spm");
    let mut tokens: Vec<String> = [
        "<unk>",
        "<s>",
        "</s>",
        "<start_of_turn>",
        "▁",
        "a",
        "b",
        "▁a",
        "ab",
        "▁ab",
    ]
    .map(String::from)
    .to_vec();
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    let mut types = vec![2i32, 3, 3, 3, 1, 1, 1, 1, 1, 1];
    types.extend(std::iter::repeat_n(6, 256));
    let mut scores = vec![0.0f32; tokens.len()];
    scores[7] = -0.5; // "▁a" merges before "ab" (-1.0)
    scores[8] = -1.0;
    scores[9] = -2.0;
    let meta = vec![
        (
            "general.architecture".to_string(),
            MetaValue::String("llama".into()),
        ),
        (
            "tokenizer.ggml.model".to_string(),
            MetaValue::String("llama".into()),
        ),
        (
            "tokenizer.ggml.tokens".to_string(),
            MetaValue::Array(MetaArray::String(tokens)),
        ),
        (
            "tokenizer.ggml.token_type".to_string(),
            MetaValue::Array(MetaArray::I32(types)),
        ),
        (
            "tokenizer.ggml.scores".to_string(),
            MetaValue::Array(MetaArray::F32(scores)),
        ),
        (
            "tokenizer.ggml.add_space_prefix".to_string(),
            MetaValue::Bool(true),
        ),
    ];
    let tok = tokenizer_of(&path, &meta).unwrap_or_else(|e| panic!("{e}"));
    // llama.cpp's SentencePiece defaults: BOS 1, EOS 2, add_bos.
    assert_eq!(
        (tok.bos_id(), tok.eos_id(), tok.add_bos_default()),
        (Some(1), Some(2), true)
    );
    // A space is put before the text and after each special token; "é" has no piece: bytes.
    let ids = tok
        .encode("ab<start_of_turn>ab é", true)
        .unwrap_or_default();
    assert_eq!(ids, vec![1, 9, 3, 9, 4, 10 + 0xC3, 10 + 0xA9]);
    assert_eq!(tok.decode(&ids), "<s> ab<start_of_turn> ab é");
    assert_eq!(tok.decode(&ids[1..]), "ab<start_of_turn> ab é");
    let mut s = tok.stream();
    let streamed: String = ids[1..].iter().map(|&i| s.push(i)).collect();
    assert_eq!(streamed + &s.finish(), " ab<start_of_turn> ab é");
    let _ = std::fs::remove_dir_all(path.parent().unwrap_or(Path::new("/nonexistent")));
}

#[test]
fn variants_match_llama_cpp() {
    let fx = fixture_json("tokenizer/variants.json");
    let texts: Vec<String> = serde_json::from_value(fx["texts"].clone()).unwrap_or_default();
    let dir = scratch_dir("variants");
    let mut report = Vec::new();
    let mut models = std::collections::HashMap::new();
    for (n, variant) in fx["variants"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let file = variant["model"].as_str().unwrap_or_default();
        // A model that cannot be had is skipped with one line (per file, not per variant).
        let Some(src) = models
            .entry(file.to_string())
            .or_insert_with(|| real_model(file))
            .clone()
        else {
            continue;
        };
        let key = variant["key"].as_str().unwrap_or_default();
        let value = match &variant["value"] {
            Value::Bool(b) => MetaValue::Bool(*b),
            v => MetaValue::String(v.as_str().unwrap_or_default().to_string()),
        };
        let label = format!("{file} with {key} = {}", variant["value"]);
        let g = GgufFile::open(&src).unwrap_or_else(|e| panic!("{e}"));
        let dst = dir.join(format!("variant-{n}.gguf"));
        metadata_copy(&g, &dst, key, value);
        let tok = Tokenizer::from_gguf(&GgufFile::open(&dst).unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let want = variant["llama_cpp"].as_array().cloned().unwrap_or_default();
        let mut bad = 0;
        for (t, w) in texts.iter().zip(&want) {
            let w: Vec<u32> = serde_json::from_value(w.clone()).unwrap_or_default();
            let got = tok
                .encode(t, false)
                .unwrap_or_else(|e| panic!("{label}: {e}"));
            if got != w {
                bad += 1;
                if bad <= 5 {
                    report.push(format!(
                        "{label}: {t:?}\n    ours      {got:?}\n    llama.cpp {w:?}"
                    ));
                }
            }
            // From the start, streaming concatenates to decode (which drops a SentencePiece
            // prefix space); continuing a prompt, it keeps every piece as is.
            let decoded = tok.decode(&got);
            let mut from_start = tok.stream_from_start();
            let mut text: String = got.iter().map(|&id| from_start.push(id)).collect();
            text.push_str(&from_start.finish());
            assert_eq!(text, decoded, "{label}: {t:?}");
            let raw: Vec<u8> = got
                .iter()
                .flat_map(|&id| tok.token_bytes(id).unwrap_or_default().to_vec())
                .collect();
            let mut cont = tok.stream();
            let mut text: String = got.iter().map(|&id| cont.push(id)).collect();
            text.push_str(&cont.finish());
            assert_eq!(text, String::from_utf8_lossy(&raw), "{label}: {t:?}");
        }
        if bad > 0 {
            report.push(format!("{label}: {bad} of {} texts differ", texts.len()));
        } else {
            println!("{label}: {} texts identical to llama.cpp", texts.len());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(report.is_empty(), "{}", report.join("\n"));
}
