//! Encoding arbitrary text with the fixture tokenizers (tokenizer.json, byte-level BPE GGUF,
//! Gemma 4 GGUF) and decoding it back: no panic, and for the byte-level GGUF vocabulary the
//! decoded bytes are the text's bytes.
#![no_main]

#[path = "common.rs"]
mod common;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use oxinfer::gguf::GgufFile;
use oxinfer::tokenizer::Tokenizer;

struct Toks {
    hf: Tokenizer,
    bpe: Tokenizer,
    gemma4: Tokenizer,
}

fn toks() -> &'static Toks {
    static T: OnceLock<Toks> = OnceLock::new();
    T.get_or_init(|| {
        let fx = common::fixtures();
        let gguf = |rel: &str| {
            Tokenizer::from_gguf(&GgufFile::open(fx.join(rel)).expect("gguf")).expect("tokenizer")
        };
        let dir = fx.join("tokenizer/smollm2-hf");
        let cfg = dir.join("tokenizer_config.json");
        Toks {
            hf: Tokenizer::from_files(&dir.join("tokenizer.json"), Some(cfg.as_path()))
                .expect("tokenizer"),
            bpe: gguf("qwen2-tiny/model.gguf"),
            gemma4: gguf("tokenizer/gemma4-tiny-vocab.gguf"),
        }
    })
}

// Loading the tokenizers takes seconds under the sanitizer: before the first input, so
// that it does not count against -timeout.
fuzz_target!(init: { toks(); }, |data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let t = toks();
    for tok in [&t.hf, &t.gemma4] {
        if let Ok(ids) = tok.encode(&text, false) {
            let _ = tok.decode(&ids);
            let mut stream = tok.stream();
            for &id in &ids {
                let _ = stream.push(id);
            }
            let _ = stream.finish();
        }
    }
    let ids = t.bpe.encode(&text, false).expect("byte-level BPE encodes any text");
    assert_eq!(t.bpe.decode_bytes(&ids), text.as_bytes(), "byte-level round trip");
});
