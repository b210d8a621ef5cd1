//! The WordPiece tokenizer (BERT uncased, all-MiniLM-L6-v2's tokenizer.json in
//! tests/fixtures/bert-tokenizer/) against transformers' fast tokenizer: ids of the LLM
//! tokenizer corpus plus WordPiece cases, with and without [CLS]/[SEP], pairs with token types,
//! and `longest_first` truncation (refs.json, made by tools/ref/make_bert_tokenizer_refs.py).

mod common;

use common::{fixture_json, fixtures, ids};
use oxinfer::embed::InputTemplate;
use oxinfer::tokenizer::Tokenizer;

fn load() -> (Tokenizer, InputTemplate) {
    let dir = fixtures().join("bert-tokenizer");
    let path = dir.join("tokenizer.json");
    let cfg = dir.join("tokenizer_config.json");
    let tok = Tokenizer::from_files(&path, Some(&cfg)).unwrap_or_else(|e| panic!("{e}"));
    let json = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let template = InputTemplate::from_tokenizer_json(&path, &json, &tok).unwrap();
    (tok, template)
}

#[test]
fn ids_match_transformers() {
    let (tok, template) = load();
    assert!(format!("{tok:?}").contains("WordPiece"), "{tok:?}");
    let refs = fixture_json("bert-tokenizer/refs.json");
    let singles = refs["singles"].as_array().unwrap();
    assert!(singles.len() >= 100);
    let mut failures = Vec::new();
    for case in singles {
        let text = case["text"].as_str().unwrap();
        let got = tok.encode(text, false).unwrap();
        if got != ids(&case["ids"]) {
            failures.push(format!(
                "{text:?}\n  ours {got:?}\n  ref  {:?}",
                ids(&case["ids"])
            ));
            continue;
        }
        let with = template.apply(&got, None, None).unwrap();
        assert_eq!(
            with.ids,
            ids(&case["with_specials"]),
            "{text:?} with specials"
        );
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn pairs_and_truncation_match_transformers() {
    let (tok, template) = load();
    let refs = fixture_json("bert-tokenizer/refs.json");
    let cases = refs["pairs"].as_array().unwrap().iter().map(|c| (c, None));
    let truncated = refs["truncated"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c, c["max_length"].as_u64().map(|n| n as usize)));
    for (case, max_len) in cases.chain(truncated) {
        let a = tok.encode(case["a"].as_str().unwrap(), false).unwrap();
        let b = case["b"].as_str().map(|b| tok.encode(b, false).unwrap());
        let e = template.apply(&a, b.as_deref(), max_len).unwrap();
        assert_eq!(e.ids, ids(&case["ids"]), "{case}");
        assert_eq!(e.type_ids, ids(&case["type_ids"]), "{case}");
    }
}

#[test]
fn decode_joins_continuation_pieces() {
    let (tok, _) = load();
    let ids = tok.encode("unaffable tokenization, ok", false).unwrap();
    assert_eq!(tok.decode(&ids), "unaffable tokenization , ok");
}
