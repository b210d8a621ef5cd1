//! Real chat templates (SmolLM2, Qwen 3, Gemma 3, ChatML with tools, from the fixtures) rendered
//! with hostile messages decoded from the input (JSON: a message list, or else the raw text as
//! one user message), guarded and tokenized: no panic, and the prompt holds no more control
//! tokens than the same template writes around an empty message.
#![no_main]

#[path = "common.rs"]
mod common;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use oxinfer::chat_template::{ChatMessage, ChatTemplate};
use oxinfer::tokenizer::Tokenizer;
use serde_json::Value;

struct Setup {
    tok: Tokenizer,
    templates: Vec<ChatTemplate>,
}

fn setup() -> &'static Setup {
    static S: OnceLock<Setup> = OnceLock::new();
    S.get_or_init(|| {
        let fx = common::fixtures();
        let dir = fx.join("tokenizer/smollm2-hf");
        let cfg = dir.join("tokenizer_config.json");
        let tok = Tokenizer::from_files(&dir.join("tokenizer.json"), Some(cfg.as_path()))
            .expect("tokenizer");
        let templates = ["smollm2", "qwen3", "gemma3", "chatml_tools"]
            .iter()
            .map(|name| {
                let text = std::fs::read_to_string(fx.join(format!("chat/{name}.json")))
                    .expect("chat fixture");
                let v: Value = serde_json::from_str(&text).expect("json");
                ChatTemplate::new(
                    v["template"].as_str().expect("template"),
                    v["bos_token"].as_str(),
                    v["eos_token"].as_str(),
                )
                .expect("compiles")
            })
            .collect();
        Setup { tok, templates }
    })
}

// Loading the tokenizers takes seconds under the sanitizer: before the first input, so
// that it does not count against -timeout.
fuzz_target!(init: { setup(); }, |data: &[u8]| {
    let s = setup();
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let messages: Vec<ChatMessage> = serde_json::from_str(&text)
        .unwrap_or_else(|_| vec![ChatMessage::new("user", text.to_string())]);
    let extra = serde_json::json!({"tools": serde_json::from_str::<Value>(&text).ok()});
    let tpl = &s.templates[pick as usize % s.templates.len()];
    let mut guard = s.tok.content_guard();
    let msgs = guard.protect_messages(&messages);
    let mut extra = extra;
    guard.protect_json(&mut extra);
    let Ok(rendered) = tpl.render(&msgs, pick & 0x80 != 0, &extra) else {
        return;
    };
    let prompt = guard.finish(rendered);
    let ids = s.tok.encode_guarded(&prompt, false).expect("encodes");
    let _ = prompt.text();
    // Every control token in the ids comes from the template text: re-encoding the text
    // without the caller strings can only have as many or more special ids in total.
    let control = ids.iter().filter(|&&i| s.tok.is_special(i)).count();
    let unguarded = s.tok.encode(&prompt.text(), false).expect("encodes");
    let control_unguarded = unguarded.iter().filter(|&&i| s.tok.is_special(i)).count();
    assert!(control <= control_unguarded);
});
