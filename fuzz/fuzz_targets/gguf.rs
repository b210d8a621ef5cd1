//! GGUF header, metadata and tensor table: parsing arbitrary bytes must return an error or a
//! file whose every tensor view lies inside the bytes; the tokenizer built from its metadata
//! must not panic either.
#![no_main]

use std::path::Path;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use oxinfer::gguf::GgufFile;
use oxinfer::mapped::MappedFile;
use oxinfer::tokenizer::Tokenizer;

fuzz_target!(|data: &[u8]| {
    let map = Arc::new(MappedFile::from_bytes("fuzz.gguf", data.to_vec()));
    let Ok(g) = GgufFile::parse(Path::new("fuzz.gguf"), map) else {
        return;
    };
    for t in g.tensors() {
        if let Some(view) = g.tensor(&t.name) {
            let _ = view.bytes().len();
        }
    }
    let _ = g.architecture();
    if let Ok(tok) = Tokenizer::from_gguf(&g) {
        let ids = tok
            .encode("Hello <|im_end|> world\n", false)
            .unwrap_or_default();
        let _ = tok.decode(&ids);
    }
});
