//! Tool calls in generated text, parsed as the text streams so ordinary content is released as
//! soon as it cannot be the start of a call. Three formats, picked from the chat template
//! ([`ToolFormat::detect`]):
//!
//! - Hermes / Qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks among text.
//! - Llama 3.1 / 3.2 JSON: the whole reply is `{"name": ..., "parameters": {...}}` (optionally
//!   after `<|python_tag|>`, several separated by `;`). Llama's built-in tools
//!   (`<|python_tag|>brave_search.call(...)`) are not parsed: they stay content.
//! - Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (Nemo, v3 tokenizers) or
//!   `[TOOL_CALLS]name[ARGS]{...}` repeated (Mistral Small 3.2, Ministral 3).

use serde_json::Value;

/// Opening tag of a tool call.
pub const OPEN: &str = "<tool_call>";
/// Closing tag of a tool call.
pub const CLOSE: &str = "</tool_call>";

/// Llama 3.1's marker before a call's JSON.
pub const PYTHON_TAG: &str = "<|python_tag|>";
/// Mistral's marker before tool calls.
pub const MISTRAL_CALLS: &str = "[TOOL_CALLS]";
/// Mistral (v11+) marker between a call's name and its arguments.
pub const MISTRAL_ARGS: &str = "[ARGS]";

/// How a model writes tool calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>` blocks (also the fallback for templates without tools).
    #[default]
    Hermes,
    /// Llama 3.1 / 3.2 JSON calls.
    Llama3Json,
    /// Mistral `[TOOL_CALLS]`.
    Mistral,
}

impl ToolFormat {
    /// The format a chat template's source teaches.
    pub fn detect(template: &str) -> ToolFormat {
        if template.contains(OPEN) {
            ToolFormat::Hermes
        } else if template.contains(MISTRAL_CALLS) {
            ToolFormat::Mistral
        } else if template.contains("<|start_header_id|>")
            && (template.contains("\"parameters\"") || template.contains(PYTHON_TAG))
        {
            ToolFormat::Llama3Json
        } else {
            ToolFormat::Hermes
        }
    }

    /// A call id the format's template accepts back (Mistral templates require 9
    /// alphanumeric characters); `seed` makes it unique.
    pub fn call_id(self, seed: u64) -> String {
        match self {
            ToolFormat::Mistral => {
                const A: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
                let mut x = seed ^ 0x9E37_79B9_7F4A_7C15;
                (0..9)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        A[(x % A.len() as u64) as usize] as char
                    })
                    .collect()
            }
            _ => format!("call_{seed:016x}"),
        }
    }
}

/// One parsed tool call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// The function's name.
    pub name: String,
    /// Its arguments as JSON text (an object).
    pub arguments: String,
}

/// Parses one call's JSON (`{"name": ..., "arguments": {...}}`; `parameters` is accepted for
/// `arguments`, and arguments given as a JSON string are unwrapped). `None` when it is not one.
pub fn parse_call(json: &str) -> Option<ToolCall> {
    let v: Value = serde_json::from_str(json.trim()).ok()?;
    let name = v.get("name")?.as_str()?.to_string();
    let args = v
        .get("arguments")
        .or_else(|| v.get("parameters"))
        .cloned()
        .unwrap_or(Value::Object(Default::default()));
    let arguments = match args {
        Value::String(s) => {
            let inner: Value = serde_json::from_str(&s).ok()?;
            serde_json::to_string(&inner).ok()?
        }
        other => serde_json::to_string(&other).ok()?,
    };
    Some(ToolCall { name, arguments })
}

/// Splits streamed text into content and tool calls.
#[derive(Clone, Debug, Default)]
pub struct ToolCallParser {
    format: ToolFormat,
    /// Text not yet released: a possible start of a marker, or a call's body.
    held: String,
    /// Inside a call (Hermes: after `<tool_call>`; Mistral: after `[TOOL_CALLS]`; Llama: the
    /// reply is calls).
    in_call: bool,
    /// Llama: whether the start of the reply has been seen.
    decided: bool,
    calls: usize,
}

/// What one piece of text yielded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Ordinary text, safe to show.
    pub content: String,
    /// Calls completed by this piece, in order.
    pub calls: Vec<ToolCall>,
}

/// The first JSON value of `text`: `Ok(Some((value, bytes used)))`, `Ok(None)` when the text
/// ends inside it, `Err` when it is not JSON.
fn first_json(text: &str) -> Result<Option<(Value, usize)>, ()> {
    let mut it = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    match it.next() {
        Some(Ok(v)) => Ok(Some((v, it.byte_offset()))),
        Some(Err(e)) if e.is_eof() => Ok(None),
        None => Ok(None),
        Some(Err(_)) => Err(()),
    }
}

/// A call from a parsed JSON object (`name` plus `arguments` or `parameters`).
fn call_of(v: &Value) -> Option<ToolCall> {
    v.get("name")?.as_str()?;
    parse_call(&v.to_string())
}

/// The arguments JSON text of a Mistral `[ARGS]` value.
fn args_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => serde_json::from_str::<Value>(s).ok().map(|x| x.to_string()),
        Value::Object(_) => Some(v.to_string()),
        _ => None,
    }
}

/// The length of the longest suffix of `held` that is a proper prefix of `marker`.
fn partial_marker(held: &str, marker: &str) -> usize {
    (1..marker.len())
        .rev()
        .find(|&n| held.ends_with(&marker[..n]))
        .unwrap_or(0)
}

impl ToolCallParser {
    /// A parser of Hermes `<tool_call>` blocks at the start of a reply.
    pub fn new() -> Self {
        Self::default()
    }

    /// A parser of `format` at the start of a reply.
    pub fn with_format(format: ToolFormat) -> Self {
        ToolCallParser {
            format,
            ..Self::default()
        }
    }

    /// Calls parsed so far.
    pub fn call_count(&self) -> usize {
        self.calls
    }

    /// Feeds a piece of generated text.
    pub fn push(&mut self, text: &str) -> Parsed {
        self.held.push_str(text);
        let mut out = Parsed::default();
        match self.format {
            ToolFormat::Hermes => self.hermes(&mut out),
            ToolFormat::Llama3Json => self.llama(&mut out, false),
            ToolFormat::Mistral => self.mistral(&mut out, false),
        }
        self.calls += out.calls.len();
        out
    }

    fn hermes(&mut self, out: &mut Parsed) {
        loop {
            if self.in_call {
                let Some(end) = self.held.find(CLOSE) else {
                    return;
                };
                let body = self.held[..end].to_string();
                self.held.drain(..end + CLOSE.len());
                self.in_call = false;
                match parse_call(&body) {
                    Some(c) => out.calls.push(c),
                    // Not a call after all: show it as written.
                    None => out.content.push_str(&format!("{OPEN}{body}{CLOSE}")),
                }
                continue;
            }
            if let Some(at) = self.held.find(OPEN) {
                out.content.push_str(&self.held[..at]);
                self.held.drain(..at + OPEN.len());
                self.in_call = true;
                continue;
            }
            // Hold back a suffix that may begin the opening tag.
            let cut = self.held.len() - partial_marker(&self.held, OPEN);
            out.content.push_str(&self.held[..cut]);
            self.held.drain(..cut);
            return;
        }
    }

    /// Llama 3 JSON calls; `end`: the reply is over (an incomplete call becomes content).
    fn llama(&mut self, out: &mut Parsed, end: bool) {
        if !self.decided {
            let t = self.held.trim_start();
            if t.is_empty() && !end {
                return;
            }
            if t.starts_with('{') || t.starts_with(PYTHON_TAG) {
                self.in_call = true;
            } else if !end && !t.is_empty() && PYTHON_TAG.starts_with(t) {
                return;
            }
            self.decided = true;
        }
        if !self.in_call {
            out.content.push_str(&std::mem::take(&mut self.held));
            return;
        }
        loop {
            // Separators between calls: whitespace, `;`, the python tag.
            let mut skip = 0;
            loop {
                let rest = &self.held[skip..];
                let t = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ';');
                skip += rest.len() - t.len();
                match t.strip_prefix(PYTHON_TAG) {
                    Some(_) => skip += PYTHON_TAG.len(),
                    None => break,
                }
            }
            let rest = &self.held[skip..];
            if rest.is_empty() {
                if end {
                    self.held.clear();
                }
                return;
            }
            match first_json(rest) {
                Ok(Some((v, used))) => {
                    if let Some(c) = call_of(&v) {
                        out.calls.push(c);
                        self.held.drain(..skip + used);
                        continue;
                    }
                }
                Ok(None) if !end => return,
                _ => {}
            }
            // Not a call: the rest of the reply is content.
            self.in_call = false;
            out.content.push_str(&std::mem::take(&mut self.held));
            return;
        }
    }

    /// Mistral `[TOOL_CALLS]`; `end`: the reply is over.
    fn mistral(&mut self, out: &mut Parsed, end: bool) {
        loop {
            if !self.in_call {
                if let Some(at) = self.held.find(MISTRAL_CALLS) {
                    out.content.push_str(&self.held[..at]);
                    self.held.drain(..at + MISTRAL_CALLS.len());
                    self.in_call = true;
                    continue;
                }
                let keep = if end {
                    0
                } else {
                    partial_marker(&self.held, MISTRAL_CALLS)
                };
                let cut = self.held.len() - keep;
                out.content.push_str(&self.held[..cut]);
                self.held.drain(..cut);
                return;
            }
            let t = self.held.trim_start();
            let skip = self.held.len() - t.len();
            if t.is_empty() {
                if end {
                    self.in_call = false;
                    self.held.clear();
                }
                return;
            }
            let parsed: Result<Option<(Vec<ToolCall>, usize)>, ()> = if t.starts_with('[') {
                match first_json(t) {
                    Ok(Some((Value::Array(items), used))) => items
                        .iter()
                        .map(call_of)
                        .collect::<Option<Vec<_>>>()
                        .map(|c| Some((c, used)))
                        .ok_or(()),
                    Ok(Some(_)) => Err(()),
                    Ok(None) => Ok(None),
                    Err(()) => Err(()),
                }
            } else if let Some(a) = t.find(MISTRAL_ARGS) {
                // Mistral Small 3.2 renders `name[CALL_ID]id[ARGS]`.
                let name = t[..a].split("[CALL_ID]").next().unwrap_or("").trim();
                let valid_name = !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
                    && t[..a]
                        .split("[CALL_ID]")
                        .nth(1)
                        .is_none_or(|id| id.chars().all(char::is_alphanumeric));
                match first_json(&t[a + MISTRAL_ARGS.len()..]) {
                    Ok(Some((v, used))) if valid_name => match args_text(&v) {
                        Some(arguments) => Ok(Some((
                            vec![ToolCall {
                                name: name.to_string(),
                                arguments,
                            }],
                            a + MISTRAL_ARGS.len() + used,
                        ))),
                        None => Err(()),
                    },
                    Ok(None) if valid_name => Ok(None),
                    _ => Err(()),
                }
            } else if t.len() > 256 {
                Err(())
            } else {
                Ok(None)
            };
            match parsed {
                Ok(Some((calls, used))) => {
                    out.calls.extend(calls);
                    self.held.drain(..skip + used);
                    self.in_call = false;
                }
                Ok(None) if !end => return,
                _ => {
                    // Not a call: show it as written.
                    self.in_call = false;
                    out.content.push_str(MISTRAL_CALLS);
                    out.content.push_str(&std::mem::take(&mut self.held));
                    return;
                }
            }
        }
    }

    /// Ends the reply: an unterminated call is parsed if its JSON is whole, otherwise released
    /// as text.
    pub fn finish(&mut self) -> Parsed {
        let mut out = Parsed::default();
        match self.format {
            ToolFormat::Hermes => {
                let held = std::mem::take(&mut self.held);
                if self.in_call {
                    self.in_call = false;
                    match parse_call(&held) {
                        Some(c) => out.calls.push(c),
                        None => out.content = format!("{OPEN}{held}"),
                    }
                } else {
                    out.content = held;
                }
            }
            ToolFormat::Llama3Json => self.llama(&mut out, true),
            ToolFormat::Mistral => self.mistral(&mut out, true),
        }
        self.calls += out.calls.len();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeding the same text whole or one character at a time gives the same content and calls,
    /// and the arguments are the JSON the text holds (compared through serde_json).
    #[test]
    fn streamed_and_whole_agree() {
        let text = "Sure. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call> <tool_ x";
        let run = |pieces: Vec<String>| {
            let mut p = ToolCallParser::new();
            let mut all = Parsed::default();
            for piece in pieces {
                let r = p.push(&piece);
                all.content += &r.content;
                all.calls.extend(r.calls);
            }
            let r = p.finish();
            all.content += &r.content;
            all.calls.extend(r.calls);
            all
        };
        let whole = run(vec![text.to_string()]);
        let chars = run(text.chars().map(String::from).collect());
        assert_eq!(whole, chars);
        assert_eq!(whole.content, "Sure. \n <tool_ x");
        assert_eq!(whole.calls.len(), 2);
        assert_eq!(whole.calls[0].name, "get_weather");
        let args: Value = serde_json::from_str(&whole.calls[0].arguments).unwrap();
        assert_eq!(args, serde_json::json!({"city": "Paris"}));
        let args: Value = serde_json::from_str(&whole.calls[1].arguments).unwrap();
        assert_eq!(args, serde_json::json!({"x": 1}));
    }

    #[test]
    fn broken_call_is_kept_as_text() {
        let mut p = ToolCallParser::new();
        let r = p.push("<tool_call>not json</tool_call>ok");
        assert!(r.calls.is_empty());
        assert_eq!(r.content, "<tool_call>not json</tool_call>ok");
    }
}
