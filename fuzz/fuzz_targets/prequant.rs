//! Pre-quantized checkpoints (`__metadata__` precision, `X.q8`/`X.q8s`/`X.q4`/`X.q4s` pairs):
//! a fuzzed `model.safetensors` beside a real config must load into a model or give an error,
//! never panic.
#![no_main]

#[path = "common.rs"]
mod common;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use oxinfer::Model;

fuzz_target!(|data: &[u8]| {
    static CONFIG: OnceLock<()> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let cfg = std::fs::read(common::fixtures().join("quant-tiny/llama/config.json"))
            .expect("config fixture");
        common::write_scratch("config.json", &cfg);
    });
    common::write_scratch("model.safetensors", data);
    if let Ok(model) = Model::load(common::scratch()) {
        let _ = model.info();
    }
});
