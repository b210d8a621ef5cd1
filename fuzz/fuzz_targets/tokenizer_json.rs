//! tokenizer.json (+ tokenizer_config.json) loading: arbitrary JSON must load or give an error;
//! a loaded tokenizer must encode and decode without panicking.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use oxinfer::tokenizer::Tokenizer;

fuzz_target!(|data: &[u8]| {
    let (tok_json, cfg_json) = common::split(data);
    let tok_path = common::write_scratch("tokenizer.json", tok_json);
    let cfg_path = common::write_scratch("tokenizer_config.json", cfg_json);
    let cfg = (!cfg_json.is_empty()).then_some(cfg_path.as_path());
    if let Ok(tok) = Tokenizer::from_files(&tok_path, cfg) {
        if let Ok(ids) = tok.encode("Hello world <s> 123 ünï", false) {
            let _ = tok.decode(&ids);
        }
        let _ = tok.decode(&[0, 1, 2, u32::MAX]);
    }
});
