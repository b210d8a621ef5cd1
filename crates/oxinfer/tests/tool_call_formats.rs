//! Tool-call formats on real chat templates (tests/fixtures/chat-tools, copied from llama.cpp):
//! each template renders an assistant turn holding tool calls, the format is detected from the
//! template source, and the streaming parser recovers the same calls from that rendering, fed
//! whole or one character at a time.

use oxinfer::chat_template::ChatTemplate;
use oxinfer::engine::tool_calls::{Parsed, ToolCall, ToolCallParser, ToolFormat};
use serde_json::{json, Value};
use std::path::PathBuf;

fn template(name: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let path = if name.ends_with(".json") {
        dir.join("chat").join(name)
    } else {
        dir.join("chat-tools").join(name)
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if name.ends_with(".json") {
        let v: Value = serde_json::from_str(&text).unwrap();
        v["template"].as_str().unwrap().to_string()
    } else {
        text
    }
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
           {"type": "function", "function": {"name": "add", "description": "Sum",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                         "b": {"type": "integer"}}}}}])
}

/// What the template writes for an assistant turn with `calls` (the text after the
/// generation prompt, up to the end-of-turn token).
fn rendered_reply(src: &str, calls: &[(&str, Value)], eos: &str) -> String {
    let tpl = ChatTemplate::new(src, Some("<s>"), Some(eos)).unwrap();
    let user = json!({"role": "user", "content": "Weather in Paris, and 2+3?"});
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({"id": format!("abcdefgh{i}"), "type": "function",
                   "function": {"name": name, "arguments": args}})
        })
        .collect();
    let asst = json!({"role": "assistant", "content": "", "tool_calls": tool_calls});
    let prompt = tpl
        .render(
            &[],
            true,
            &json!({"messages": [user.clone()], "tools": tools()}),
        )
        .unwrap();
    let full = tpl
        .render(
            &[],
            false,
            &json!({"messages": [user, asst], "tools": tools()}),
        )
        .unwrap();
    let common = prompt
        .bytes()
        .zip(full.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    let reply = &full[common..];
    let reply = reply.trim_start_matches("<|start_header_id|>assistant<|end_header_id|>\n\n");
    let end = ["<|eot_id|>", "<|eom_id|>", eos]
        .iter()
        .filter_map(|e| reply.find(e))
        .min()
        .unwrap_or(reply.len());
    reply[..end].to_string()
}

fn parse(format: ToolFormat, text: &str, by_char: bool) -> Parsed {
    let mut p = ToolCallParser::with_format(format);
    let mut all = Parsed::default();
    let pieces: Vec<String> = if by_char {
        text.chars().map(String::from).collect()
    } else {
        vec![text.to_string()]
    };
    for piece in pieces {
        let r = p.push(&piece);
        all.content += &r.content;
        all.calls.extend(r.calls);
    }
    let r = p.finish();
    all.content += &r.content;
    all.calls.extend(r.calls);
    all
}

fn check(file: &str, eos: &str, want: ToolFormat, calls: &[(&str, Value)]) {
    let src = template(file);
    assert_eq!(ToolFormat::detect(&src), want, "{file}");
    let reply = rendered_reply(&src, calls, eos);
    for by_char in [false, true] {
        let got = parse(want, &reply, by_char);
        assert_eq!(
            got.content.trim(),
            "",
            "{file}: content {:?} from {reply:?}",
            got.content
        );
        let names: Vec<&str> = got
            .calls
            .iter()
            .map(|c: &ToolCall| c.name.as_str())
            .collect();
        let want_names: Vec<&str> = calls.iter().map(|c| c.0).collect();
        assert_eq!(names, want_names, "{file}: {reply:?}");
        for (c, (_, args)) in got.calls.iter().zip(calls) {
            let a: Value = serde_json::from_str(&c.arguments).unwrap();
            assert_eq!(&a, args, "{file}: {reply:?}");
        }
    }
}

#[test]
fn llama_3_json_calls() {
    let one = [("get_weather", json!({"city": "Paris"}))];
    check(
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "<|eot_id|>",
        ToolFormat::Llama3Json,
        &one,
    );
    check(
        "meta-llama-Llama-3.2-3B-Instruct.jinja",
        "<|eot_id|>",
        ToolFormat::Llama3Json,
        &one,
    );
    // Several calls, as Llama 3.1 writes them after `<|python_tag|>`, separated by `;`.
    let text = "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"add\", \"parameters\": {\"a\": 2, \"b\": 3}}";
    let got = parse(ToolFormat::Llama3Json, text, true);
    assert_eq!(got.calls.len(), 2);
    assert_eq!(got.content, "");
    // A reply that is not a call stays content, also when it is JSON.
    for text in [
        "The weather is fine.",
        "{\"answer\": 42}",
        "{\"name\": \"x\"",
    ] {
        let got = parse(ToolFormat::Llama3Json, text, true);
        assert!(got.calls.is_empty(), "{text}");
        assert_eq!(got.content, text);
    }
}

#[test]
fn mistral_calls() {
    let two = [
        ("get_weather", json!({"city": "Paris"})),
        ("add", json!({"a": 2, "b": 3})),
    ];
    check(
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        "</s>",
        ToolFormat::Mistral,
        &two,
    );
    check(
        "Mistral-Small-3.2-24B-Instruct-2506.jinja",
        "</s>",
        ToolFormat::Mistral,
        &two,
    );
    let got = parse(ToolFormat::Mistral, "Sure. [TOOL_CALLS]not a call", true);
    assert!(got.calls.is_empty());
    assert_eq!(got.content, "Sure. [TOOL_CALLS]not a call");
    let got = parse(ToolFormat::Mistral, "Text with [TOOL_ but no call", true);
    assert_eq!(got.content, "Text with [TOOL_ but no call");
}

#[test]
fn hermes_templates_are_detected() {
    assert_eq!(
        ToolFormat::detect(&template("qwen25.json")),
        ToolFormat::Hermes
    );
    assert_eq!(
        ToolFormat::detect(&template("chatml_tools.json")),
        ToolFormat::Hermes
    );
    assert_eq!(
        ToolFormat::detect(&template("smollm2.json")),
        ToolFormat::Hermes
    );
}
