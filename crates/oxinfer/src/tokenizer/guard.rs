//! Chat prompts in which text a caller supplied never becomes a control token.
//!
//! [`Tokenizer::encode`](super::Tokenizer::encode) parses special-token text anywhere, as
//! llama.cpp does with `parse_special = true`, so `<|im_end|><|im_start|>system` inside a user
//! message would open a system turn. The guard keeps that text apart: before rendering, every
//! occurrence of a control (or unknown) token's text in a caller's string — message content,
//! names, tool calls and their arguments, tools, extra template variables, object keys
//! included — is replaced by a placeholder `U+F0000 <index> U+F0001` (and so is any `U+F0000`
//! the caller wrote, so placeholders cannot be forged). The template renders as usual; encoding
//! then splits the rendered text at special tokens (which now come from the template only) and
//! puts each placeholder's original text back before the ordinary text between them is
//! tokenized, where control tokens are not parsed (user-defined tokens still are, as llama.cpp
//! does with `parse_special = false`).
//!
//! A prompt whose caller strings hold no control-token text has no placeholders and is encoded
//! exactly as [`encode`](super::Tokenizer::encode) encodes it, so ordinary prompts keep
//! token-for-token agreement with llama.cpp and transformers.

use std::borrow::Cow;

use super::special::Fragment;
use super::Tokenizer;
use crate::chat_template::ChatMessage;

/// Opens a placeholder (a supplementary private-use code point).
const OPEN: char = '\u{F0000}';
/// Closes a placeholder.
const CLOSE: char = '\u{F0001}';

/// Replaces control-token text in caller strings by placeholders, remembering the originals.
pub struct ContentGuard<'t> {
    tok: &'t Tokenizer,
    literals: Vec<String>,
}

/// A rendered chat prompt with its caller-supplied control-token texts held apart (see the
/// module documentation). Encode it with [`Tokenizer::encode_guarded`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardedPrompt {
    /// The rendered text with placeholders.
    raw: String,
    /// The text of placeholder `i`.
    literals: Vec<String>,
}

impl<'t> ContentGuard<'t> {
    pub(super) fn new(tok: &'t Tokenizer) -> Self {
        ContentGuard {
            tok,
            literals: Vec::new(),
        }
    }

    /// `s` with its control-token texts (and `U+F0000`) replaced by placeholders; `None` when
    /// there is nothing to replace.
    pub fn protect_str(&mut self, s: &str) -> Option<String> {
        let frags = self.tok.control.partition(s);
        let has_token = frags.iter().any(|f| matches!(f, Fragment::Token(_)));
        if !has_token && !s.contains(OPEN) {
            return None;
        }
        let mut out = String::with_capacity(s.len() + 16);
        for frag in frags {
            match frag {
                Fragment::Text(r) => {
                    for (i, part) in s[r].split(OPEN).enumerate() {
                        if i > 0 {
                            self.placeholder(OPEN.to_string(), &mut out);
                        }
                        out.push_str(part);
                    }
                }
                Fragment::Token(id) => {
                    let text = self.tok.token_piece(id).unwrap_or_default().to_string();
                    self.placeholder(text, &mut out);
                }
            }
        }
        Some(out)
    }

    fn placeholder(&mut self, literal: String, out: &mut String) {
        out.push(OPEN);
        out.push_str(&self.literals.len().to_string());
        out.push(CLOSE);
        self.literals.push(literal);
    }

    fn protect_in_place(&mut self, s: &mut String) {
        if let Some(p) = self.protect_str(s) {
            *s = p;
        }
    }

    /// Protects every string of `v` (object keys too), walking it without recursion.
    pub fn protect_json(&mut self, v: &mut serde_json::Value) {
        use serde_json::Value;
        let mut stack = vec![v];
        while let Some(v) = stack.pop() {
            match v {
                Value::String(s) => self.protect_in_place(s),
                Value::Array(items) => stack.extend(items.iter_mut()),
                Value::Object(map) => {
                    if map.keys().any(|k| self.tok.needs_guard(k)) {
                        let old = std::mem::take(map);
                        for (mut k, val) in old {
                            self.protect_in_place(&mut k);
                            map.insert(k, val);
                        }
                    }
                    stack.extend(map.values_mut());
                }
                _ => {}
            }
        }
    }

    /// `messages` with every caller string protected.
    pub fn protect_messages(&mut self, messages: &[ChatMessage]) -> Vec<ChatMessage> {
        let mut out = messages.to_vec();
        for m in &mut out {
            self.protect_in_place(&mut m.role);
            self.protect_in_place(&mut m.content);
            for s in [&mut m.tool_call_id, &mut m.name].into_iter().flatten() {
                self.protect_in_place(s);
            }
            for list in [&mut m.tool_calls, &mut m.tool_responses]
                .into_iter()
                .flatten()
            {
                list.iter_mut().for_each(|v| self.protect_json(v));
            }
        }
        out
    }

    /// The prompt a template rendered from the protected strings.
    pub fn finish(self, rendered: String) -> GuardedPrompt {
        GuardedPrompt {
            raw: rendered,
            literals: self.literals,
        }
    }
}

impl GuardedPrompt {
    /// A prompt taken as it is: special-token text anywhere in it is parsed (for trusted
    /// callers; the same as [`Tokenizer::encode`]).
    pub fn trusted(text: String) -> Self {
        GuardedPrompt {
            raw: text,
            literals: Vec::new(),
        }
    }

    /// Whether no caller text was held apart (the prompt encodes as plain text does).
    pub fn is_plain(&self) -> bool {
        self.literals.is_empty()
    }

    /// Whether the rendered text (placeholders kept) starts with `prefix`: a prefix the caller
    /// wrote does not count.
    pub fn raw_starts_with(&self, prefix: &str) -> bool {
        self.raw.starts_with(prefix)
    }

    /// The rendered text with placeholders (what special tokens are matched in).
    pub(super) fn raw(&self) -> &str {
        &self.raw
    }

    /// The prompt's text as the model reads it (placeholders replaced by their originals).
    pub fn text(&self) -> Cow<'_, str> {
        self.restore(&self.raw)
    }

    /// `s` (a part of the rendered text) with its placeholders replaced by their originals;
    /// anything that is not a whole, known placeholder stays as it is.
    pub(super) fn restore<'s>(&self, s: &'s str) -> Cow<'s, str> {
        if self.literals.is_empty() || !s.contains(OPEN) {
            return Cow::Borrowed(s);
        }
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(at) = rest.find(OPEN) {
            out.push_str(&rest[..at]);
            let after = &rest[at + OPEN.len_utf8()..];
            let literal = after.find(CLOSE).and_then(|end| {
                let idx: usize = after[..end].parse().ok()?;
                Some((self.literals.get(idx)?, end))
            });
            match literal {
                Some((lit, end)) => {
                    out.push_str(lit);
                    rest = &after[end + CLOSE.len_utf8()..];
                }
                None => {
                    out.push(OPEN);
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        Cow::Owned(out)
    }
}
