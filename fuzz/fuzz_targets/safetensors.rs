//! safetensors header: arbitrary bytes as a file must give an error or entries that lie inside
//! the file.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use oxinfer::loader::safetensors::SafetensorsFile;

fuzz_target!(|data: &[u8]| {
    let path = common::write_scratch("fuzz.safetensors", data);
    if let Ok(f) = SafetensorsFile::open(&path) {
        let _ = f.entries().len();
        let _ = f.metadata().len();
    }
});
