//! The browser package's engine side, natively (the same Rust the wasm module runs; the JS
//! glue is tested in headless Chromium by crates/oxinfer-cli/tests/web_browser.rs): a GGUF
//! loaded from bytes, generated a step at a time, against transformers' float32 reference of
//! the tiny Llama fixture (tools/ref/make_tiny_llama.py); cancelling, prefix reuse and the
//! errors of bad input.

#[path = "../../oxinfer/tests/common/mod.rs"]
mod common;

use common::{fixtures, ids, max_abs_diff, read_npy_f32, reference};
use oxinfer::Model;
use oxinfer_web::{ChatEngine, GenerateSettings, StreamEvent};

/// The fixture's GGUF (float32 weights), loaded from bytes as the browser does.
fn engine() -> ChatEngine {
    let bytes = std::fs::read(fixtures().join("llama-tiny-a/model.gguf")).unwrap();
    let model = Model::load_gguf_bytes("tiny.gguf", bytes).expect("load from bytes");
    ChatEngine::new(model, Some(256))
}

/// The fixture's prompt `name`: its ids and transformers' greedy continuation.
fn prompt(name: &str) -> (Vec<u32>, Vec<u32>) {
    let r = reference(&fixtures().join("llama-tiny-a"));
    let p = r["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap();
    (ids(&p["ids"]), ids(&p["greedy_ids"]))
}

fn greedy(n: usize) -> oxinfer::GenerateOptions {
    let json = format!(r#"{{"maxTokens": {n}, "temperature": 0, "ignoreEos": true}}"#);
    GenerateSettings::from_json(&json).unwrap().to_options()
}

#[test]
fn last_logits_match_transformers() {
    let (ids, _) = prompt("short");
    let got = engine().last_logits(&ids).unwrap();
    let (shape, want) = read_npy_f32(&fixtures().join("llama-tiny-a/logits_short.npy"));
    let last = &want[(shape[0] - 1) * shape[1]..];
    assert_eq!(got.len(), last.len());
    let d = max_abs_diff(&got, last);
    assert!(d <= 1e-4, "max |diff| {d} vs transformers");
}

#[test]
fn stepped_greedy_ids_match_transformers() {
    let (ids, want) = prompt("short");
    let mut e = engine();
    e.start(ids, greedy(want.len())).unwrap();
    let mut streamed = Vec::new();
    let mut steps = 0;
    let summary = e
        .run_to_end(|ev| {
            steps += 1;
            if let StreamEvent::Token { id, .. } = ev {
                streamed.push(*id);
            }
            true
        })
        .unwrap();
    assert_eq!(summary.tokens, want, "greedy ids vs transformers");
    assert_eq!(streamed, want, "streamed ids");
    assert_eq!(summary.reason, "maxTokens");
    assert!(!e.is_running());
    assert_eq!(e.step().unwrap(), Vec::new(), "nothing runs after the end");
}

#[test]
fn one_step_is_one_forward_pass_and_cancel_stops() {
    let (ids, want) = prompt("short");
    let mut e = engine();
    e.start(ids.clone(), greedy(16)).unwrap();
    // The prompt's pass samples the first token; each later step samples one more.
    for (k, &want_id) in want.iter().take(3).enumerate() {
        let evs = e.step().unwrap();
        assert!(
            matches!(evs.as_slice(), [StreamEvent::Token { id, .. }] if *id == want_id),
            "step {k}: {evs:?}"
        );
    }
    let err = e.start(ids.clone(), greedy(4)).unwrap_err().to_string();
    assert!(err.contains("a generation is running"), "{err}");
    assert!(e.cancel());
    assert!(!e.is_running() && e.step().unwrap().is_empty());
    assert!(!e.cancel(), "nothing left to cancel");

    // The next turn reuses the prompt's cached prefix and continues as from scratch.
    e.start(ids, greedy(4)).unwrap();
    let s = e.run_to_end(|_| true).unwrap();
    assert!(s.cached_tokens > 0, "no prefix reused");
    assert_eq!(s.tokens, want[..4]);
}

#[test]
fn bad_input_is_one_clear_error() {
    let bytes = std::fs::read(fixtures().join("llama-tiny-a/model.gguf")).unwrap();
    let cut = bytes[..bytes.len() / 2].to_vec();
    let err = Model::load_gguf_bytes("cut.gguf", cut)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("cut.gguf"), "{err}");
    let err = Model::load_gguf_bytes("junk.gguf", b"not a model".to_vec())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("junk.gguf") && err.contains("GGUF"), "{err}");

    let mut e = engine();
    let err = e.last_logits(&[1, 999]).unwrap_err().to_string();
    assert!(
        err.contains("999") && err.contains("outside the vocabulary"),
        "{err}"
    );
    let err = e.last_logits(&[]).unwrap_err().to_string();
    assert!(err.contains("no token ids"), "{err}");
    let err = e.start(vec![1, 5000], greedy(2)).unwrap_err().to_string();
    assert!(err.contains("5000"), "{err}");
    let err = e.start(Vec::new(), greedy(2)).unwrap_err().to_string();
    assert!(err.contains("empty"), "{err}");
    let bad = GenerateSettings::from_json(r#"{"temperature": -1}"#).unwrap();
    let err = e
        .start(vec![1, 2], bad.to_options())
        .unwrap_err()
        .to_string();
    assert!(err.contains("temperature"), "{err}");
    assert!(!e.is_running());
    // The fixture has no chat template: chatting is refused with a message.
    let msg = [oxinfer::ChatMessage::new("user", "hi")];
    let err = e.chat_tokens(&msg).unwrap_err().to_string();
    assert!(err.contains("chat template"), "{err}");
}
