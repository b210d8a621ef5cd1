//! Request bodies of the OpenAI API as this server reads them. Unknown fields are ignored;
//! fields are optional where the API makes them optional. Responses are built as JSON values in
//! [`crate::chat`] and [`crate::completions`].

use crate::error::ApiError;
use serde::Deserialize;
use serde_json::Value;

/// Most `stop` strings one request may give.
pub const MAX_STOP: usize = 16;
/// Longest `stop` string, in bytes.
pub const MAX_STOP_BYTES: usize = 256;
/// Largest `top_k` of a constrained request (`response_format` JSON, forced tool calls) at a
/// temperature above 0: masking checks the grammar for up to this many candidates per step.
pub const MAX_CONSTRAINED_TOP_K: usize = 1000;

/// `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub model: Option<String>,
    pub messages: Vec<Message>,
    #[serde(flatten)]
    pub gen: GenFields,
    pub tools: Option<Vec<Tool>>,
    /// `"none"`, `"auto"`, `"required"` or `{"type": "function", "function": {"name": ...}}`.
    pub tool_choice: Option<Value>,
    /// `{"type": "text" | "json_object"}` or `{"type": "json_schema", "json_schema": {...}}`.
    pub response_format: Option<Value>,
    /// Return log-probabilities of the output tokens.
    pub logprobs: Option<bool>,
    /// How many alternatives per token (0-20), with `logprobs`.
    pub top_logprobs: Option<u32>,
}

/// `POST /v1/completions`.
#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub model: Option<String>,
    /// A string, or an array holding one string.
    pub prompt: Value,
    #[serde(flatten)]
    pub gen: GenFields,
    /// Alternatives per token (0-5): the legacy completions `logprobs`.
    pub logprobs: Option<u32>,
    /// Repeat the prompt before the completion.
    pub echo: Option<bool>,
}

/// Generation settings shared by both endpoints.
#[derive(Debug, Default, Deserialize)]
pub struct GenFields {
    pub max_tokens: Option<u64>,
    pub max_completion_tokens: Option<u64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    /// llama.cpp's extension: multiplicative repetition penalty.
    pub repeat_penalty: Option<f32>,
    pub n: Option<u32>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    /// oxinfer's extension: speculative decoding for this request (docs/speculative.md).
    pub speculative: Option<SpeculativeField>,
}

/// `speculative`: `{"lookup": N}` drafts up to N prompt-lookup tokens per step, `{"draft_max":
/// N}` up to N tokens of the server's draft model (`--draft`); 0 turns either off, an absent
/// field keeps the server's default (`--lookup`, `--draft-max`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeculativeField {
    pub lookup: Option<u32>,
    pub draft_max: Option<u32>,
}

/// `stop`: one string or several.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    /// The stop strings.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

impl GenFields {
    /// The stop strings; 400 naming `stop` beyond [`MAX_STOP`] strings or [`MAX_STOP_BYTES`]
    /// bytes per string.
    pub fn stop_strings(&self) -> Result<Vec<String>, ApiError> {
        let stops = self.stop.clone().map(Stop::into_vec).unwrap_or_default();
        let bad = |m: String| Err(ApiError::bad_request(m).with_param("stop"));
        if stops.len() > MAX_STOP {
            return bad(format!(
                "stop has {} strings, more than the {MAX_STOP} allowed",
                stops.len()
            ));
        }
        if let Some(s) = stops.iter().find(|s| s.len() > MAX_STOP_BYTES) {
            return bad(format!(
                "a stop string is {} bytes long, more than the {MAX_STOP_BYTES} allowed",
                s.len()
            ));
        }
        Ok(stops)
    }
}

/// `stream_options`.
#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with the token counts.
    #[serde(default)]
    pub include_usage: bool,
}

/// One chat message.
#[derive(Debug, Deserialize)]
pub struct Message {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
    /// Calls an assistant made (fed back in later turns).
    pub tool_calls: Option<Vec<MessageToolCall>>,
    /// The call a `tool` message answers.
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
}

/// Message content: a string or a list of parts (`text`, and for a model with media towers
/// `image_url`, `input_audio` and `video_url`: see [`crate::media_parts`]).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

/// One content part.
#[derive(Debug, Deserialize)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
    /// `{"url": "data:image/png;base64,..."}` of an `image_url` part.
    pub image_url: Option<Value>,
    /// `{"data": "<base64>", "format": "wav"}` of an `input_audio` part.
    pub input_audio: Option<Value>,
    /// `{"url": "data:image/gif;base64,..."}` of a `video_url` part.
    pub video_url: Option<Value>,
}

impl Content {
    /// Whether a part carries an image or audio clip.
    pub fn has_media(&self) -> bool {
        matches!(self, Content::Parts(p) if p.iter().any(|p| p.kind != "text"))
    }

    /// The text of the content; an error names a part that is not text.
    pub fn text(&self) -> Result<String, String> {
        match self {
            Content::Text(s) => Ok(s.clone()),
            Content::Parts(parts) => {
                let mut out = String::new();
                for p in parts {
                    match (&*p.kind, &p.text) {
                        ("text", Some(t)) => out.push_str(t),
                        (k, _) => {
                            return Err(format!(
                                "content part of type '{k}' is not supported (text only)"
                            ))
                        }
                    }
                }
                Ok(out)
            }
        }
    }
}

/// A tool call inside an assistant message.
#[derive(Debug, Deserialize)]
pub struct MessageToolCall {
    pub id: Option<String>,
    pub function: FunctionCall,
}

/// The function of a tool call: its name and JSON-encoded arguments.
#[derive(Debug, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// JSON text (the API's spelling); an object is accepted too.
    pub arguments: Value,
}

/// One entry of `tools`.
#[derive(Debug, Deserialize, Clone)]
pub struct Tool {
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionDef,
}

/// A function the model may call.
#[derive(Debug, Deserialize, Clone)]
pub struct FunctionDef {
    pub name: String,
    pub description: Option<String>,
    /// JSON schema of the arguments.
    pub parameters: Option<Value>,
}
