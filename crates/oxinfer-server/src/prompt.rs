//! Chat messages (with tools, tool calls and tool results) → the prompt text, through the
//! model's own chat template.
//!
//! A template that mentions `tools` (Qwen 2.5/3, Hermes, Llama 3.1, ...) gets the messages and
//! tools as the API gives them (tool-call arguments as objects, as transformers passes them).
//! A template without tool support (SmolLM2's, for one) gets a fallback: the tool list and how
//! to call them are described in the system message, past calls are written as
//! `<tool_call>{"name": ..., "arguments": ...}</tool_call>` in the assistant's turn, and tool
//! results come back in a user turn inside `<tool_response>` tags. Calls are parsed from that
//! same tag syntax ([`oxinfer::engine::tool_calls`]).

use crate::api::{Message, Tool};
use crate::error::ApiError;
use oxinfer::chat_template::ChatTemplate;
use oxinfer::tokenizer::GuardedPrompt;
use oxinfer::Model;
use serde_json::{json, Map, Value};

/// Whether the model's template renders `tools` itself.
pub fn template_supports_tools(model: &Model) -> bool {
    model
        .tokenizer()
        .and_then(|t| t.chat_template())
        .is_some_and(|src| src.contains("tools"))
}

/// The arguments of a past call as a JSON value (the API sends them as JSON text).
fn arguments_value(v: &Value) -> Value {
    match v {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
        other => other.clone(),
    }
}

fn content_of(m: &Message, i: usize) -> Result<String, ApiError> {
    match &m.content {
        None => Ok(String::new()),
        Some(c) => c
            .text()
            .map_err(|e| ApiError::bad_request(e).with_param(format!("messages[{i}].content"))),
    }
}

fn check_roles(msgs: &[Message]) -> Result<(), ApiError> {
    if msgs.is_empty() {
        return Err(ApiError::bad_request("messages must not be empty").with_param("messages"));
    }
    for (i, m) in msgs.iter().enumerate() {
        if !matches!(
            m.role.as_str(),
            "system" | "developer" | "user" | "assistant" | "tool"
        ) {
            return Err(ApiError::bad_request(format!(
                "messages[{i}].role '{}' is not one of system, developer, user, assistant, tool",
                m.role
            ))
            .with_param(format!("messages[{i}].role")));
        }
    }
    Ok(())
}

/// Renders the conversation (with `tools` when given) as prompt text.
pub fn render(model: &Model, msgs: &[Message], tools: Option<&[Tool]>) -> Result<String, ApiError> {
    render_with(
        template(model)?,
        template_supports_tools(model),
        msgs,
        tools,
    )
}

/// [`render`] with every string the request holds kept from becoming a control token when the
/// prompt is tokenized ([`Model::tokenize_prompt`]; issue 24: `<|im_end|>` in a message stays
/// text).
pub fn render_guarded(
    model: &Model,
    msgs: &[Message],
    tools: Option<&[Tool]>,
) -> Result<GuardedPrompt, ApiError> {
    let tpl = template(model)?;
    let tok = model
        .require_tokenizer()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let mut ctx = context(template_supports_tools(model), msgs, tools)?;
    let mut guard = tok.content_guard();
    guard.protect_json(&mut ctx);
    let text = render_context(tpl, &ctx)?;
    Ok(guard.finish(text))
}

fn template(model: &Model) -> Result<&ChatTemplate, ApiError> {
    model.chat_template().ok_or_else(|| {
        // No file path: errors go to clients, who need not know where the model lives.
        ApiError::bad_request("the model has no chat template; use /v1/completions")
    })
}

/// [`render`] through `tpl`; `native_tools` says whether the template renders `tools` itself.
pub fn render_with(
    tpl: &ChatTemplate,
    native_tools: bool,
    msgs: &[Message],
    tools: Option<&[Tool]>,
) -> Result<String, ApiError> {
    render_context(tpl, &context(native_tools, msgs, tools)?)
}

/// The template variables of a conversation: `messages` and, for a tool-aware template, `tools`.
fn context(
    native_tools: bool,
    msgs: &[Message],
    tools: Option<&[Tool]>,
) -> Result<Value, ApiError> {
    check_roles(msgs)?;
    let messages = match tools {
        Some(t) if !native_tools => fallback_messages(msgs, t)?,
        _ => native_messages(msgs)?,
    };
    let mut extra = Map::new();
    extra.insert("messages".into(), Value::Array(messages));
    if let Some(t) = tools.filter(|_| native_tools) {
        extra.insert(
            "tools".into(),
            Value::Array(t.iter().map(tool_json).collect()),
        );
    }
    Ok(Value::Object(extra))
}

fn render_context(tpl: &ChatTemplate, ctx: &Value) -> Result<String, ApiError> {
    tpl.render(&[], true, ctx)
        .map_err(|e| ApiError::bad_request(e.to_string()).with_param("messages"))
}

/// A tool as the request gave it (fields it left out stay out).
fn tool_json(t: &Tool) -> Value {
    let mut f = Map::new();
    f.insert("name".into(), json!(t.function.name));
    if let Some(d) = &t.function.description {
        f.insert("description".into(), json!(d));
    }
    if let Some(p) = &t.function.parameters {
        f.insert("parameters".into(), p.clone());
    }
    json!({"type": "function", "function": Value::Object(f)})
}

/// Messages as a tool-aware template reads them.
fn native_messages(msgs: &[Message]) -> Result<Vec<Value>, ApiError> {
    let mut out = Vec::with_capacity(msgs.len());
    for (i, m) in msgs.iter().enumerate() {
        let role = if m.role == "developer" {
            "system"
        } else {
            m.role.as_str()
        };
        let mut o = Map::new();
        o.insert("role".into(), json!(role));
        o.insert(
            "content".into(),
            crate::media_parts::template_content(m.content.as_ref(), i)?,
        );
        if let Some(calls) = &m.tool_calls {
            let calls: Vec<Value> = calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function", "function": {
                        "name": c.function.name,
                        "arguments": arguments_value(&c.function.arguments),
                    }})
                })
                .collect();
            o.insert("tool_calls".into(), Value::Array(calls));
        }
        if let Some(id) = &m.tool_call_id {
            o.insert("tool_call_id".into(), json!(id));
        }
        if let Some(n) = &m.name {
            o.insert("name".into(), json!(n));
        }
        out.push(Value::Object(o));
    }
    Ok(out)
}

/// The system-message text that describes `tools` to a model whose template cannot.
pub fn tools_instructions(tools: &[Tool]) -> String {
    let mut s = String::from(
        "You can call functions to help answer. The functions you may call are listed below, \
         one JSON signature per line, between <tools> and </tools>:\n<tools>\n",
    );
    for t in tools {
        let sig = json!({
            "name": t.function.name,
            "description": t.function.description,
            "parameters": t.function.parameters,
        });
        s.push_str(&sig.to_string());
        s.push('\n');
    }
    s.push_str(
        "</tools>\nTo call a function, reply with one JSON object holding its name and its \
         arguments, between <tool_call> and </tool_call>:\n<tool_call>\n\
         {\"name\": \"<function name>\", \"arguments\": {<arguments as JSON>}}\n</tool_call>",
    );
    s
}

/// Messages rewritten for a template without tool support.
fn fallback_messages(msgs: &[Message], tools: &[Tool]) -> Result<Vec<Value>, ApiError> {
    let mut out = Vec::with_capacity(msgs.len() + 1);
    let instructions = tools_instructions(tools);
    let first_system =
        matches!(msgs.first(), Some(m) if m.role == "system" || m.role == "developer");
    if !first_system {
        out.push(json!({"role": "system", "content": instructions}));
    }
    for (i, m) in msgs.iter().enumerate() {
        let text = content_of(m, i)?;
        let (role, content) = match m.role.as_str() {
            "system" | "developer" if i == 0 => ("system", format!("{text}\n\n{instructions}")),
            "system" | "developer" => ("system", text),
            "assistant" => {
                let mut c = text;
                for call in m.tool_calls.iter().flatten() {
                    let body = json!({
                        "name": call.function.name,
                        "arguments": arguments_value(&call.function.arguments),
                    });
                    if !c.is_empty() {
                        c.push('\n');
                    }
                    c.push_str(&format!("<tool_call>\n{body}\n</tool_call>"));
                }
                ("assistant", c)
            }
            "tool" => ("user", format!("<tool_response>\n{text}\n</tool_response>")),
            _ => ("user", text),
        };
        out.push(json!({"role": role, "content": content}));
    }
    Ok(out)
}

/// The JSON schema a forced tool call must follow: `{"name": <one of names>, "arguments":
/// <that function's parameters>}` (with several functions the arguments are any object).
pub fn tool_call_schema(tools: &[&Tool]) -> Value {
    let names: Vec<&str> = tools.iter().map(|t| t.function.name.as_str()).collect();
    let args = match tools {
        [one] => one
            .function
            .parameters
            .clone()
            .unwrap_or(json!({"type": "object"})),
        _ => json!({"type": "object"}),
    };
    json!({
        "type": "object",
        "properties": {"name": {"enum": names}, "arguments": args},
        "required": ["name", "arguments"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request in the API's shape, rendered through the Qwen2.5 template, equals what
    /// transformers' `apply_chat_template(messages, tools=...)` returned for the same
    /// conversation (tests/fixtures/chat/qwen25.json, made by tools/ref/make_chat_refs.py).
    #[test]
    fn api_tools_render_like_transformers() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/chat/qwen25.json"
        );
        let fx: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let tpl = ChatTemplate::new(
            fx["template"].as_str().unwrap(),
            fx["bos_token"].as_str(),
            fx["eos_token"].as_str(),
        )
        .unwrap();
        let mut checked = 0;
        for case in fx["cases"].as_array().unwrap() {
            let Some(tools) = case.pointer("/extra/tools") else {
                continue;
            };
            if case["add_generation_prompt"] != json!(true) {
                continue;
            }
            let msgs: Vec<Message> = serde_json::from_value(case["messages"].clone()).unwrap();
            let tools: Vec<Tool> = serde_json::from_value(tools.clone()).unwrap();
            let got = render_with(&tpl, true, &msgs, Some(&tools)).unwrap();
            assert_eq!(
                got,
                case["expected"].as_str().unwrap(),
                "case {}",
                case["name"]
            );
            checked += 1;
        }
        assert!(checked >= 2, "only {checked} tool cases");
    }

    /// Without template support, the tools and the calls are still in the prompt, and tool
    /// results come back as user turns.
    #[test]
    fn fallback_describes_tools_and_calls() {
        let tpl = ChatTemplate::new(
            "{% for m in messages %}[{{ m.role }}]{{ m.content }}\n{% endfor %}",
            None,
            None,
        )
        .unwrap();
        let msgs: Vec<Message> = serde_json::from_value(json!([
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "21 C"},
        ]))
        .unwrap();
        let tools: Vec<Tool> = serde_json::from_value(json!([{"type": "function",
            "function": {"name": "get_weather", "parameters": {"type": "object"}}}]))
        .unwrap();
        let out = render_with(&tpl, false, &msgs, Some(&tools)).unwrap();
        assert!(out.starts_with("[system]"), "{out}");
        assert!(out.contains("{\"name\":\"get_weather\",\"description\":null,\"parameters\":{\"type\":\"object\"}}"), "{out}");
        let call = "[assistant]<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>";
        assert!(out.contains(call), "{out}");
        assert!(
            out.contains("[user]<tool_response>\n21 C\n</tool_response>"),
            "{out}"
        );
    }
}
