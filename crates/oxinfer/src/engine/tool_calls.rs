//! Tool calls in generated text: the `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
//! blocks that Hermes/Qwen-style templates teach models to write, parsed as the text streams
//! so ordinary content is released as soon as it cannot be the start of a call.

use serde_json::Value;

/// Opening tag of a tool call.
pub const OPEN: &str = "<tool_call>";
/// Closing tag of a tool call.
pub const CLOSE: &str = "</tool_call>";

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
    /// Text not yet released: a possible start of [`OPEN`], or a call's body.
    held: String,
    in_call: bool,
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

impl ToolCallParser {
    /// A parser at the start of a reply.
    pub fn new() -> Self {
        Self::default()
    }

    /// Calls parsed so far.
    pub fn call_count(&self) -> usize {
        self.calls
    }

    /// Feeds a piece of generated text.
    pub fn push(&mut self, text: &str) -> Parsed {
        self.held.push_str(text);
        let mut out = Parsed::default();
        loop {
            if self.in_call {
                let Some(end) = self.held.find(CLOSE) else {
                    return out;
                };
                let body = self.held[..end].to_string();
                self.held.drain(..end + CLOSE.len());
                self.in_call = false;
                match parse_call(&body) {
                    Some(c) => {
                        self.calls += 1;
                        out.calls.push(c);
                    }
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
            let keep = (1..OPEN.len())
                .rev()
                .find(|&n| self.held.ends_with(&OPEN[..n]))
                .unwrap_or(0);
            let cut = self.held.len() - keep;
            out.content.push_str(&self.held[..cut]);
            self.held.drain(..cut);
            return out;
        }
    }

    /// Ends the reply: an unterminated call is parsed if its JSON is whole, otherwise released
    /// as text.
    pub fn finish(&mut self) -> Parsed {
        let mut out = Parsed::default();
        let held = std::mem::take(&mut self.held);
        if self.in_call {
            self.in_call = false;
            match parse_call(&held) {
                Some(c) => {
                    self.calls += 1;
                    out.calls.push(c);
                }
                None => out.content = format!("{OPEN}{held}"),
            }
        } else {
            out.content = held;
        }
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
