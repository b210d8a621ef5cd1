//! The translation against Go's own `text/template` running Ollama's `Execute` logic: every
//! case of tests/fixtures/ollama-templates/cases.json (ChatML, Llama 3, Qwen 2.5, Gemma and
//! Mistral style templates, legacy and `.Messages` ones, tools, tool calls, the system layer,
//! and a template exercising with/range/variables/break/continue) rendered through the
//! engine's Jinja path must equal reference.json, made by tools/ref/ollama_template_ref.

use super::*;
use crate::chat_template::{ChatMessage, ChatTemplate};
use std::path::Path;

fn fixture(name: &str) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/ollama-templates")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn renders_as_ollama_does() {
    let cases = fixture("cases.json");
    let reference = fixture("reference.json");
    let mut checked = 0;
    for case in cases.as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let jinja = to_jinja(case["template"].as_str().unwrap(), case["system"].as_str())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let t = ChatTemplate::new(&jinja, None, None)
            .unwrap_or_else(|e| panic!("{name}: {e}\n{jinja}"));
        let messages: Vec<ChatMessage> = serde_json::from_value(case["messages"].clone()).unwrap();
        let extra = match &case["tools"] {
            serde_json::Value::Null => serde_json::Value::Null,
            tools => serde_json::json!({ "tools": tools }),
        };
        let got = t
            .render(&messages, true, &extra)
            .unwrap_or_else(|e| panic!("{name}: {e}\n{jinja}"));
        let want = reference["rendered"][name].as_str().unwrap();
        assert_eq!(got, want, "{name}");
        checked += 1;
    }
    assert_eq!(checked, 13);
}

#[test]
fn unsupported_templates_name_the_construct() {
    let e = to_jinja("{{ printf \"%s\" .Prompt }}", None).unwrap_err();
    assert!(
        e.contains("function `printf` is not supported") && e.contains("supported: and"),
        "{e}"
    );
    let e = to_jinja("{{ template \"x\" }}", None).unwrap_err();
    assert!(e.contains("`template`"), "{e}");
}

#[test]
fn go_field_names_become_message_keys() {
    assert_eq!(snake("ToolCalls"), "tool_calls");
    assert_eq!(snake("ToolCallID"), "tool_call_id");
    assert_eq!(snake("Role"), "role");
    assert_eq!(snake("ToolName"), "name");
    assert_eq!(jinja_str("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
}
