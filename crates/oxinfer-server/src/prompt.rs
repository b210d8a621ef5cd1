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
    check_roles(msgs)?;
    let messages = if tools.is_some() && !template_supports_tools(model) {
        fallback_messages(msgs, tools.unwrap_or_default())?
    } else {
        native_messages(msgs)?
    };
    let mut extra = Map::new();
    extra.insert("messages".into(), Value::Array(messages));
    if let Some(t) = tools.filter(|_| template_supports_tools(model)) {
        let list: Vec<Value> = t
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.function.name,
                    "description": t.function.description,
                    "parameters": t.function.parameters.clone().unwrap_or(json!({"type": "object", "properties": {}})),
                }})
            })
            .collect();
        extra.insert("tools".into(), Value::Array(list));
    }
    model
        .render_chat(&[], true, &Value::Object(extra))
        .map_err(|e| ApiError::bad_request(e.to_string()).with_param("messages"))
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
        o.insert("content".into(), json!(content_of(m, i)?));
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
