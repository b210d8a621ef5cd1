//! A chat reply's text turned into what the API returns — `reasoning_content` (a thinking
//! model's trace), `content` and `tool_calls` — whole or as it streams.

use oxinfer::engine::thinking::{Part, ThinkingSplitter};
use oxinfer::engine::tool_calls::{parse_call, ToolCall, ToolCallParser, ToolFormat};

/// How tool calls are read from the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolMode {
    /// No tools: the text is the answer.
    Off,
    /// The model may write calls (in its template's format) among its text.
    Auto,
    /// The output is forced (by a grammar) to be one call's JSON.
    Forced,
}

/// What a piece of the reply yielded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    pub reasoning: String,
    pub content: String,
    pub calls: Vec<ToolCall>,
}

impl Delta {
    fn extend(&mut self, o: Delta) {
        self.reasoning.push_str(&o.reasoning);
        self.content.push_str(&o.content);
        self.calls.extend(o.calls);
    }
}

/// Splits one reply as it streams.
#[derive(Clone, Debug)]
pub struct ReplyParser {
    think: Option<ThinkingSplitter>,
    mode: ToolMode,
    tools: ToolCallParser,
    /// Forced mode: the whole output, parsed at the end.
    forced: String,
}

impl ReplyParser {
    /// A parser for a reply read with `mode` / `format`; `think`: split off a reasoning trace
    /// (`Some(true)`: the prompt already opened it).
    pub fn new(mode: ToolMode, format: ToolFormat, think: Option<bool>) -> Self {
        ReplyParser {
            think: think.map(ThinkingSplitter::new),
            mode,
            tools: ToolCallParser::with_format(format),
            forced: String::new(),
        }
    }

    fn answer(&mut self, text: &str, d: &mut Delta) {
        match self.mode {
            ToolMode::Off => d.content.push_str(text),
            ToolMode::Forced => self.forced.push_str(text),
            ToolMode::Auto => {
                let p = self.tools.push(text);
                d.content.push_str(&p.content);
                d.calls.extend(p.calls);
            }
        }
    }

    /// Feeds a piece of generated text.
    pub fn push(&mut self, text: &str) -> Delta {
        let mut d = Delta::default();
        let segs = match &mut self.think {
            Some(t) => t.push(text),
            None => {
                self.answer(text, &mut d);
                return d;
            }
        };
        for s in segs {
            match s.part {
                Part::Reasoning => d.reasoning.push_str(&s.text),
                Part::Answer => self.answer(&s.text, &mut d),
            }
        }
        d
    }

    /// Ends the reply: flushes what was held back.
    pub fn finish(&mut self) -> Delta {
        let mut d = Delta::default();
        if let Some(t) = &mut self.think {
            for s in t.finish() {
                match s.part {
                    Part::Reasoning => d.reasoning.push_str(&s.text),
                    Part::Answer => self.answer(&s.text, &mut d),
                }
            }
        }
        match self.mode {
            ToolMode::Off => {}
            ToolMode::Auto => {
                let p = self.tools.finish();
                d.content.push_str(&p.content);
                d.calls.extend(p.calls);
            }
            ToolMode::Forced => {
                let text = std::mem::take(&mut self.forced);
                match parse_call(&text) {
                    Some(c) => d.calls.push(c),
                    None => d.content.push_str(&text),
                }
            }
        }
        d
    }

    /// A whole reply at once.
    pub fn whole(mut self, text: &str) -> Delta {
        let mut d = self.push(text);
        d.extend(self.finish());
        if self.mode == ToolMode::Auto {
            d.content = d.content.trim().to_string();
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whole and character-by-character parsing agree, reasoning is split from the answer,
    /// and calls are found in the answer only.
    #[test]
    fn reasoning_content_and_calls() {
        let text = "<think>Need weather.</think>\n\nChecking. <tool_call>{\"name\": \"w\", \"arguments\": {\"c\": 1}}</tool_call>";
        let whole = ReplyParser::new(ToolMode::Auto, ToolFormat::Hermes, Some(false)).whole(text);
        assert_eq!(whole.reasoning, "Need weather.");
        assert_eq!(whole.content, "Checking.");
        assert_eq!(whole.calls.len(), 1);
        let mut p = ReplyParser::new(ToolMode::Auto, ToolFormat::Hermes, Some(false));
        let mut d = Delta::default();
        for c in text.chars() {
            d.extend(p.push(&c.to_string()));
        }
        d.extend(p.finish());
        assert_eq!(d.reasoning, whole.reasoning);
        assert_eq!(d.content.trim(), whole.content);
        assert_eq!(d.calls, whole.calls);
        // A prompt that opened the trace: everything up to </think> is reasoning.
        let d = ReplyParser::new(ToolMode::Off, ToolFormat::Hermes, Some(true))
            .whole("hmm</think>Answer");
        assert_eq!(
            (d.reasoning.as_str(), d.content.as_str()),
            ("hmm", "Answer")
        );
        // Without thinking, tags are content.
        let d =
            ReplyParser::new(ToolMode::Off, ToolFormat::Hermes, None).whole("<think>x</think>y");
        assert_eq!(d.content, "<think>x</think>y");
    }
}
