//! Chat templates: a model's Jinja template rendered exactly as transformers'
//! `apply_chat_template(messages, tokenize=False)` renders it.
//!
//! transformers compiles templates in a sandboxed Jinja2 environment with `trim_blocks=True`,
//! `lstrip_blocks=True` (trailing newline of the source dropped, Jinja2's default), the
//! `loopcontrols` extension (`{% break %}`, `{% continue %}`), a `{% generation %}` block tag, the
//! globals `raise_exception` and `strftime_now`, and a `tojson` filter that calls Python's
//! `json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=False)`. The context
//! holds `messages`, `tools` (`None` unless given), `documents` (`None`),
//! `add_generation_prompt`, the tokenizer's special tokens (`bos_token`, `eos_token`) and every
//! extra keyword. This module reproduces that with minijinja, its Python-compatibility methods
//! (`.strip()`, `.split()`, `.items()`, ...) and Python's spelling of printed values (`None`,
//! `True`, `['a', 'b']`).

#![warn(missing_docs)]

mod pyfmt;
mod source;
mod strftime;

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind, State};
use serde::{Deserialize, Serialize};

use pyfmt::JsonOptions;

const TEMPLATE_NAME: &str = "chat";
const RAISED: &str = "raise_exception: ";

/// One message of a conversation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The message text (absent or `null` in JSON reads as empty, as OpenAI clients send it
    /// beside tool calls).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub content: String,
    /// An assistant turn's tool calls, as OpenAI and transformers write them: each
    /// `{"type": "function", "function": {"name": ..., "arguments": {...} or "json text"}}`
    /// (plus an `id` where the client gives one). Templates see `message.tool_calls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// A tool turn's id of the call it answers (`message.tool_call_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The tool (or participant) name of the turn (`message.name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Gemma 4's tool results carried by a turn: each `{"name": ..., "response": {...} or
    /// value}` (`message.tool_responses`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_responses: Option<Vec<serde_json::Value>>,
    /// A multimodal turn's content as parts (`{"type": "text", "text": …}`, `{"type":
    /// "image"}`, `{"type": "audio"}`), which templates see as `message.content` instead of
    /// the text.
    #[serde(skip)]
    pub parts: Option<Vec<serde_json::Value>>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

impl ChatMessage {
    /// A message with `role` and `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            ..Default::default()
        }
    }

    /// An assistant turn that calls tools (`calls` as in [`ChatMessage::tool_calls`]), with
    /// `content` beside the calls (often empty).
    pub fn assistant_tool_calls(content: impl Into<String>, calls: Vec<serde_json::Value>) -> Self {
        ChatMessage {
            tool_calls: Some(calls),
            ..ChatMessage::new("assistant", content)
        }
    }

    /// A `tool` turn answering the call `tool_call_id` (when known) with `content`.
    pub fn tool_response(content: impl Into<String>, tool_call_id: Option<String>) -> Self {
        ChatMessage {
            tool_call_id,
            ..ChatMessage::new("tool", content)
        }
    }
}

/// Errors of compiling or rendering a chat template.
#[derive(thiserror::Error, Debug)]
pub enum TemplateError {
    /// The template source is not valid (for minijinja).
    #[error("chat template does not compile: {0}")]
    Syntax(String),
    /// Rendering failed (an unknown filter or method, a type error, ...).
    #[error("chat template failed to render: {0}")]
    Render(String),
    /// The template called `raise_exception(message)`, e.g. on roles that do not alternate.
    #[error("chat template rejected the conversation: {0}")]
    Raised(String),
    /// `extra` is not a JSON object.
    #[error("chat template extra variables must be a JSON object or null, not {0}")]
    Extra(String),
}

/// A compiled chat template.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
fn tojson(value: &Value, ensure_ascii: Option<bool>, kwargs: Kwargs) -> Result<String, Error> {
    let ensure_ascii = match ensure_ascii {
        Some(b) => b,
        None => kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
    };
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_string()),
            None => {
                let n = i64::try_from(v)?;
                Some(" ".repeat(n.max(0) as usize))
            }
        },
    };
    let separators = match kwargs.get::<Option<Vec<String>>>("separators")? {
        Some(v) if v.len() == 2 => Some((v[0].clone(), v[1].clone())),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be an (item, key) pair",
            ))
        }
        None => None,
    };
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    kwargs.assert_all_used()?;
    pyfmt::to_json(
        value,
        &JsonOptions::new(ensure_ascii, indent, separators, sort_keys),
    )
}

/// Jinja2's `string` filter: Python's `str()` (`None`, `True`, `['a', 1]`).
fn string_filter(value: &Value) -> Result<String, Error> {
    let mut s = String::new();
    pyfmt::py_str(value, &mut s)?;
    Ok(s)
}

/// Jinja2's `join(d='', attribute=None)`: items (or their `attribute`) as Python's `str()`,
/// separated by `d`.
fn join_filter(value: &Value, sep: Option<String>, kwargs: Kwargs) -> Result<String, Error> {
    let attribute: Option<String> = kwargs.get("attribute")?;
    let sep = match sep {
        Some(s) => s,
        None => kwargs.get::<Option<String>>("d")?.unwrap_or_default(),
    };
    kwargs.assert_all_used()?;
    if value.is_undefined() || value.is_none() {
        return Ok(String::new());
    }
    let items: Vec<Value> = match value.as_str() {
        Some(s) => s.chars().map(|c| Value::from(c.to_string())).collect(),
        None => value.try_iter()?.collect(),
    };
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&sep);
        }
        let item = match &attribute {
            Some(a) => a.split('.').try_fold(item.clone(), |v, k| v.get_attr(k))?,
            None => item.clone(),
        };
        pyfmt::py_str(&item, &mut out)?;
    }
    Ok(out)
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("{RAISED}{message}"),
    ))
}

fn strftime_now(format: String) -> String {
    strftime::DateTime::now().format(&format)
}

/// `messages` as templates see them: a turn with [`ChatMessage::parts`] has them as its
/// content.
fn messages_value(messages: &[ChatMessage]) -> Value {
    if messages.iter().all(|m| m.parts.is_none()) {
        return Value::from_serialize(messages);
    }
    let list: Vec<serde_json::Value> = messages
        .iter()
        .map(|m| {
            let mut v = serde_json::to_value(m).unwrap_or_default();
            if let (Some(parts), Some(obj)) = (&m.parts, v.as_object_mut()) {
                obj.insert("content".into(), serde_json::Value::from(parts.clone()));
            }
            v
        })
        .collect();
    Value::from_serialize(&list)
}

/// Maps a render error to [`TemplateError`], finding `raise_exception` messages in the chain.
fn render_error(err: Error) -> TemplateError {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(e) = cur {
        if let Some(mj) = e.downcast_ref::<Error>() {
            if let Some(msg) = mj.detail().and_then(|d| d.strip_prefix(RAISED)) {
                return TemplateError::Raised(msg.to_string());
            }
        }
        cur = e.source();
    }
    TemplateError::Render(format!("{err:#}"))
}

impl ChatTemplate {
    /// Compiles `source` (a Jinja chat template); `bos_token` and `eos_token` are the texts the
    /// template sees as `bos_token` / `eos_token` (undefined when `None`).
    pub fn new(
        source: &str,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(|out, _state: &State, value| {
            let mut s = String::new();
            pyfmt::py_str(value, &mut s)?;
            out.write_str(&s)
                .map_err(|e| Error::new(ErrorKind::WriteFailure, e.to_string()))
        });
        env.add_filter("tojson", tojson);
        env.add_filter("string", string_filter);
        env.add_filter("join", join_filter);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(TEMPLATE_NAME, source::adapt(source))
            .map_err(|e| TemplateError::Syntax(format!("{e:#}")))?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.map(str::to_string),
            eos_token: eos_token.map(str::to_string),
        })
    }

    /// Renders `messages`. `add_generation_prompt` asks the template to open an assistant turn;
    /// `extra` (a JSON object, or null) adds variables such as `enable_thinking` or `tools`,
    /// overriding the defaults.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        extra: &serde_json::Value,
    ) -> Result<String, TemplateError> {
        let mut ctx: Vec<(String, Value)> = vec![
            ("messages".into(), messages_value(messages)),
            ("tools".into(), Value::from(())),
            ("documents".into(), Value::from(())),
            (
                "add_generation_prompt".into(),
                Value::from(add_generation_prompt),
            ),
        ];
        if let Some(b) = &self.bos_token {
            ctx.push(("bos_token".into(), Value::from(b.as_str())));
        }
        if let Some(e) = &self.eos_token {
            ctx.push(("eos_token".into(), Value::from(e.as_str())));
        }
        match extra {
            serde_json::Value::Null => {}
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    let v = Value::from_serialize(v);
                    match ctx.iter_mut().find(|(name, _)| name == k) {
                        Some(slot) => slot.1 = v,
                        None => ctx.push((k.clone(), v)),
                    }
                }
            }
            other => {
                let kind = match other {
                    serde_json::Value::Bool(_) => "a bool",
                    serde_json::Value::Number(_) => "a number",
                    serde_json::Value::String(_) => "a string",
                    _ => "an array",
                };
                return Err(TemplateError::Extra(kind.into()));
            }
        }
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| TemplateError::Render(format!("{e:#}")))?;
        let ctx: Value = ctx.into_iter().collect();
        tmpl.render(ctx).map_err(render_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_flavoured_rendering() {
        let t = ChatTemplate::new(
            "{{ bos_token }}{% for m in messages %}{{ m.role | upper }}:{{ m['content'].strip() }}|{% endfor %}{{ tools }} {{ flag }} {{ [1, 'a'] }} {{ {'k': 1.5} | tojson }}\n",
            Some("<s>"),
            None,
        )
        .map_err(|e| e.to_string());
        let t = match t {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        };
        let out = t
            .render(
                &[ChatMessage::new("user", "  hi  ")],
                false,
                &serde_json::json!({"flag": true}),
            )
            .map_err(|e| e.to_string());
        assert_eq!(
            out.as_deref(),
            Ok("<s>USER:hi|None True [1, 'a'] {\"k\": 1.5}")
        );
    }

    #[test]
    fn raise_exception_is_reported() {
        let t = ChatTemplate::new("{{ raise_exception('roles must alternate') }}", None, None);
        let err = t.and_then(|t| t.render(&[], true, &serde_json::Value::Null));
        match err {
            Err(TemplateError::Raised(m)) => assert_eq!(m, "roles must alternate"),
            other => panic!("unexpected {other:?}"),
        }
    }
}
