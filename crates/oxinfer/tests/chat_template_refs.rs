//! Chat templates rendered byte for byte like transformers' `apply_chat_template(...,
//! tokenize=False)` (tests/fixtures/chat/*.json, made by tools/ref/make_chat_refs.py; the
//! template text is in the fixture, so no model file is needed).

use std::path::PathBuf;

use oxinfer::chat_template::{ChatMessage, ChatTemplate, TemplateError};
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/chat")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn check(name: &str) {
    let fx = fixture(name);
    let template = ChatTemplate::new(
        fx["template"].as_str().unwrap_or_default(),
        fx["bos_token"].as_str(),
        fx["eos_token"].as_str(),
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    let cases = fx["cases"].as_array().cloned().unwrap_or_default();
    assert!(!cases.is_empty(), "{name}: no cases");
    for case in &cases {
        let case_name = format!("{name}/{}", case["name"].as_str().unwrap_or("?"));
        let messages: Vec<ChatMessage> = serde_json::from_value(case["messages"].clone())
            .unwrap_or_else(|e| panic!("{case_name}: {e}"));
        let gen = case["add_generation_prompt"].as_bool().unwrap_or(false);
        let rendered = template.render(&messages, gen, &case["extra"]);
        match (case["expected"].as_str(), case["error"].as_str()) {
            (Some(expected), _) => match rendered {
                Ok(got) => assert_eq!(got, expected, "{case_name}"),
                Err(e) => panic!("{case_name}: {e}"),
            },
            (None, Some(message)) => match rendered {
                Err(TemplateError::Raised(m)) => assert_eq!(m, message, "{case_name}"),
                other => {
                    panic!("{case_name}: expected the template to raise {message:?}, got {other:?}")
                }
            },
            _ => panic!("{case_name}: fixture case has neither expected nor error"),
        }
    }
    println!("{name}: {} cases identical to transformers", cases.len());
}

#[test]
fn smollm2_template() {
    check("smollm2");
}

#[test]
fn gemma3_template() {
    check("gemma3");
}

#[test]
fn python_features_template() {
    check("features");
}

#[test]
fn chatml_tools_template() {
    check("chatml_tools");
}

#[test]
fn qwen25_template() {
    check("qwen25");
}

#[test]
fn qwen3_template() {
    check("qwen3");
}

#[test]
fn qwen35_template() {
    check("qwen35");
}

#[test]
fn r1_distill_qwen_template() {
    check("r1_distill_qwen");
}

#[test]
fn bad_templates_and_extras_are_errors() {
    assert!(matches!(
        ChatTemplate::new("{% for x in %}", None, None),
        Err(TemplateError::Syntax(_))
    ));
    let t = ChatTemplate::new("{{ messages[0].content }}", None, None)
        .unwrap_or_else(|e| panic!("{e}"));
    let m = [ChatMessage::new("user", "hi")];
    assert!(matches!(
        t.render(&m, true, &serde_json::json!([1])),
        Err(TemplateError::Extra(_))
    ));
    assert_eq!(t.render(&m, true, &Value::Null).unwrap_or_default(), "hi");
    let t = ChatTemplate::new("{{ messages | no_such_filter }}", None, None);
    assert!(matches!(
        t.and_then(|t| t.render(&m, true, &Value::Null)),
        Err(TemplateError::Render(_) | TemplateError::Syntax(_))
    ));
}
