//! Regular expressions as JSON-schema `pattern`s (the parser, the DFA construction under its
//! budget, and matching): the first part of the input is the pattern, the rest the text.
#![no_main]

#[path = "common.rs"]
mod common;

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use oxinfer::engine::grammar::{Grammar, JsonMatcher};

fuzz_target!(|data: &[u8]| {
    let (pattern, text) = common::split(data);
    let pattern = String::from_utf8_lossy(pattern);
    let schema = serde_json::json!({"type": "string", "pattern": pattern});
    let Ok(grammar) = Grammar::from_schema_with(&schema, common::schema_limits()) else {
        return;
    };
    let mut m = JsonMatcher::new(Arc::new(grammar));
    let _ = m.push(b'"');
    for &b in text {
        if !m.push(b) {
            break;
        }
    }
    let _ = m.is_complete();
});
