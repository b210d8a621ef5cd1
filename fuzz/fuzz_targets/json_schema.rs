//! JSON-schema compilation (under `common::schema_limits`) and the byte matcher: the first part
//! of the input is the schema, the rest is text pushed through the matcher.
#![no_main]

#[path = "common.rs"]
mod common;

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use oxinfer::engine::grammar::{Grammar, JsonMatcher};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let (schema, text) = common::split(data);
    let Ok(schema) = serde_json::from_slice::<Value>(schema) else {
        return;
    };
    let Ok(grammar) = Grammar::from_schema_with(&schema, common::schema_limits()) else {
        return;
    };
    let mut m = JsonMatcher::new(Arc::new(grammar));
    for &b in text {
        if !m.push(b) {
            break;
        }
    }
    let _ = m.is_complete();
});
