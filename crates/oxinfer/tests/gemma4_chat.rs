//! The Gemma 4 chat template rendered byte for byte like transformers'
//! `apply_chat_template(..., tokenize=False)` (tests/fixtures/gemma4-chat, made by
//! tools/ref/make_gemma4_chat_refs.py): system and developer turns, multi-turn history with the
//! thought channel stripped, generation prompt with thinking on and off, tool declarations,
//! non-ASCII text. Then Gemma 4's thinking markers through the trace splitter.

use oxinfer::chat_template::{ChatMessage, ChatTemplate};
use oxinfer::engine::thinking::{prompt_opens_think, ThinkingSplitter};
use serde_json::Value;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gemma4-chat")
}

fn load() -> (ChatTemplate, Value) {
    let fx: Value = serde_json::from_str(
        &std::fs::read_to_string(dir().join("gemma4.json")).expect("gemma4.json"),
    )
    .expect("json");
    let source = std::fs::read_to_string(dir().join("chat_template.jinja")).expect("template");
    let t = ChatTemplate::new(&source, fx["bos_token"].as_str(), fx["eos_token"].as_str())
        .unwrap_or_else(|e| panic!("gemma4 template: {e}"));
    (t, fx)
}

#[test]
fn gemma4_template_matches_transformers() {
    let (template, fx) = load();
    let cases = fx["cases"].as_array().expect("cases");
    assert!(cases.len() >= 10);
    for case in cases {
        let name = case["name"].as_str().unwrap_or("?");
        let messages: Vec<ChatMessage> =
            serde_json::from_value(case["messages"].clone()).expect("messages");
        let gen = case["add_generation_prompt"].as_bool().unwrap_or(false);
        let want = case["expected"].as_str().expect("expected");
        let got = template
            .render(&messages, gen, &case["extra"])
            .unwrap_or_else(|e| panic!("gemma4/{name}: {e}"));
        assert_eq!(got, want, "gemma4/{name}");
    }
    println!("gemma4: {} cases identical to transformers", cases.len());
}

/// With thinking on, the generation prompt leaves the model to open its thought channel; the
/// splitter sends the channel to the trace and the rest to the answer. With thinking off the
/// prompt already closes an empty channel.
#[test]
fn gemma4_thinking_prompt_and_trace() {
    let (template, fx) = load();
    let case = |n: &str| {
        fx["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == n)
            .unwrap()
            .clone()
    };
    let on = case("thinking_on");
    let messages: Vec<ChatMessage> = serde_json::from_value(on["messages"].clone()).unwrap();
    let prompt = template.render(&messages, true, &on["extra"]).unwrap();
    assert!(prompt.ends_with("<|turn>model\n"));
    assert!(!prompt_opens_think(&prompt));
    let off = case("thinking_off")["expected"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(off.ends_with("<|channel>thought\n<channel|>"));
    assert!(!prompt_opens_think(&off));
    let (trace, answer) = ThinkingSplitter::split(
        "<|channel>thought\nThe user wants 2+2.<channel|>4<turn|>",
        prompt_opens_think(&prompt),
    );
    assert_eq!(trace, "The user wants 2+2.");
    assert_eq!(answer, "4<turn|>");
}
