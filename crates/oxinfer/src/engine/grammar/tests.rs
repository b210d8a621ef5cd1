//! The matcher against serde_json (the reference parser): documents serde_json writes are
//! accepted byte by byte, random walks through what the matcher allows always end in text
//! serde_json parses and that holds the schema's shape, and texts serde_json rejects are never
//! complete documents.

use super::*;
use crate::engine::sampler::Rng;
use serde_json::{json, Value};

fn matcher(schema: &Value) -> JsonMatcher {
    JsonMatcher::new(Arc::new(Grammar::from_schema(schema).unwrap()))
}

fn complete(m: &JsonMatcher, text: &str) -> bool {
    let mut m = m.clone();
    m.push_bytes(text.as_bytes()) && m.is_complete()
}

/// Picks random accepted bytes (from a pool of JSON-ish bytes) until the document completes.
fn random_walk(m: &JsonMatcher, rng: &mut Rng, limit: usize) -> Option<String> {
    let pool: &[u8] = b"{}[],:\" \n0123456789-.eE+truefalsnmabcxyzAgkindcatdogp\\/u";
    let mut m = m.clone();
    let mut out = Vec::new();
    for _ in 0..limit {
        if m.is_complete() && rng.next_f64() < 0.3 {
            return Some(String::from_utf8(out).unwrap());
        }
        let ok: Vec<u8> = pool.iter().copied().filter(|&b| m.accepts(&[b])).collect();
        if ok.is_empty() {
            return m.is_complete().then(|| String::from_utf8(out).unwrap());
        }
        let b = ok[(rng.next_u64() % ok.len() as u64) as usize];
        assert!(m.push(b));
        out.push(b);
    }
    None
}

fn schema_people() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 6},
            "age": {"type": "integer"},
            "kind": {"enum": ["cat", "dog", 3, null]},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
            "ok": {"type": ["boolean", "null"]},
            "score": {"type": "number"}
        },
        "required": ["name", "age", "kind"]
    })
}

#[test]
fn serde_json_documents_are_accepted() {
    let m = matcher(&schema_people());
    for doc in [
        json!({"name": "Ann", "age": 7, "kind": "cat"}),
        json!({"age": -12, "kind": 3, "name": "", "tags": ["a", "b"], "ok": null, "score": 1.5e-3}),
        json!({"kind": null, "name": "é\"\\x", "age": 0, "ok": true}),
    ] {
        for text in [
            serde_json::to_string(&doc).unwrap(),
            serde_json::to_string_pretty(&doc).unwrap(),
        ] {
            assert!(complete(&m, &text), "rejected {text}");
        }
    }
    let any = JsonMatcher::new(Arc::new(Grammar::any_object()));
    let doc = json!({"a": [1, 2.5, -0.0, true, null, {"b": "c\u{1F600}"}], "d": {}});
    assert!(complete(&any, &serde_json::to_string_pretty(&doc).unwrap()));
}

#[test]
fn invalid_texts_are_never_complete() {
    let m = matcher(&schema_people());
    for text in [
        r#"{"name": "Ann", "age": 7}"#,                  // missing required
        r#"{"name": "Ann", "age": 7.5, "kind": "cat"}"#, // not an integer
        r#"{"name": "Annabelle", "age": 7, "kind": "cat"}"#, // too long
        r#"{"name": "A", "age": 7, "kind": "cow"}"#,     // not in enum
        r#"{"name": "A", "age": 7, "kind": "cat", "x": 1}"#, // closed object
        r#"{"name": "A", "name": "B", "age": 7, "kind": "cat"}"#, // duplicate key
        r#"{"name": "A", "age": 07, "kind": "cat"}"#,    // leading zero
        r#"{"name": "A", "age": 7, "kind": "cat",}"#,    // trailing comma
        r#"{"name": "A", "age": 7, "kind": "cat", "tags": [1]}"#, // wrong item type
    ] {
        assert!(!complete(&m, text), "accepted {text}");
    }
    let any = JsonMatcher::new(Arc::new(Grammar::any_object()));
    for text in [
        "[1]",
        "{\"a\":}",
        "{\"a\" 1}",
        "{'a': 1}",
        "{\"a\": tru}",
        "{\"a\": 1} x",
    ] {
        assert!(serde_json::from_str::<Value>(text).is_err() || !text.starts_with('{'));
        assert!(!complete(&any, text), "accepted {text}");
    }
}

#[test]
fn random_walks_parse_and_hold_the_shape() {
    let mut rng = Rng::new(42);
    let m = matcher(&schema_people());
    let mut done = 0;
    for _ in 0..300 {
        let Some(text) = random_walk(&m, &mut rng, 400) else {
            continue;
        };
        done += 1;
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let o = v.as_object().unwrap();
        assert!(o["name"].as_str().unwrap().chars().count() <= 6, "{text}");
        assert!(o["age"].is_i64() || o["age"].is_u64(), "{text}");
        assert!(["\"cat\"", "\"dog\"", "3", "null"].contains(&o["kind"].to_string().as_str()));
        if let Some(t) = o.get("tags") {
            let t = t.as_array().unwrap();
            assert!(t.len() <= 2 && t.iter().all(Value::is_string), "{text}");
        }
        assert!(o
            .keys()
            .all(|k| schema_people()["properties"].get(k).is_some()));
    }
    assert!(done > 50, "only {done} walks completed");
    let any = JsonMatcher::new(Arc::new(Grammar::any_object()));
    for _ in 0..200 {
        if let Some(text) = random_walk(&any, &mut rng, 300) {
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert!(v.is_object());
        }
    }
}
