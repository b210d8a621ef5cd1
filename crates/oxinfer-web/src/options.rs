//! Generation options as the JS side writes them: a JSON object with camelCase keys, every key
//! optional. Unknown keys are errors (a misspelt option must not be silently ignored).
//!
//! ```json
//! {"maxTokens": 128, "temperature": 0, "topK": 40, "topP": 0.95, "minP": 0.05,
//!  "repeatPenalty": 1.0, "seed": 7, "stop": ["\n\n"], "ignoreEos": false, "prefillChunk": 512}
//! ```
//!
//! The defaults are the CLI's (`oxinfer run`): 512 tokens, temperature 0.8, top-k 40, top-p
//! 0.95, min-p 0.05, no repetition penalty, a seed from the clock.

use crate::error::{Result, WebError};
use oxinfer::engine::generate::DEFAULT_PREFILL_CHUNK;
use oxinfer::{GenerateOptions, SamplingParams};
use serde::Deserialize;

/// Most tokens generated when `maxTokens` is not given (the CLI's `-n` default).
pub const DEFAULT_MAX_TOKENS: usize = 512;

/// The options of one generation.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GenerateSettings {
    /// Most tokens to generate.
    pub max_tokens: Option<usize>,
    /// Softmax temperature; `0` is greedy.
    pub temperature: Option<f32>,
    /// Top-k (`0`: off).
    pub top_k: Option<usize>,
    /// Top-p (`1`: off).
    pub top_p: Option<f32>,
    /// Min-p (`0`: off).
    pub min_p: Option<f32>,
    /// Repetition penalty over the last 64 tokens (`1`: off).
    pub repeat_penalty: Option<f32>,
    /// Seed of the random draws (default: from the clock).
    pub seed: Option<u64>,
    /// Generation ends when the text contains one of these (which is not returned).
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Most prompt tokens per forward pass (the JS side gets control back between passes).
    pub prefill_chunk: Option<usize>,
}

impl GenerateSettings {
    /// Parses the JSON object; an empty string or `null` is every default.
    ///
    /// # Errors
    /// Not a JSON object of the keys above (the message names the key or value at fault).
    pub fn from_json(json: &str) -> Result<Self> {
        if json.trim().is_empty() || json.trim() == "null" {
            return Ok(Self::default());
        }
        let bad = |e: String| WebError::request(format!("generation options: {e}"));
        let value: serde_json::Value =
            serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
        if !value.is_object() {
            // serde would read an array as the fields in order.
            return Err(bad(format!("expected a JSON object, got {value}")));
        }
        serde_json::from_value(value).map_err(|e| bad(e.to_string()))
    }

    /// The engine's options; the sampling values are checked by the engine when the
    /// generation starts.
    pub fn to_options(&self) -> GenerateOptions {
        let d = SamplingParams::default();
        let sampling = SamplingParams {
            temperature: self.temperature.unwrap_or(d.temperature),
            top_k: self.top_k.unwrap_or(d.top_k),
            top_p: self.top_p.unwrap_or(d.top_p),
            min_p: self.min_p.unwrap_or(d.min_p),
            repeat_penalty: self.repeat_penalty.unwrap_or(d.repeat_penalty),
            seed: self.seed.unwrap_or_else(clock_seed),
            ..d
        };
        GenerateOptions {
            max_tokens: self.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            sampling,
            stop: self.stop.clone(),
            ignore_eos: self.ignore_eos,
            prefill_chunk: self.prefill_chunk.unwrap_or(DEFAULT_PREFILL_CHUNK).max(1),
            ..GenerateOptions::default()
        }
    }
}

/// A seed from the wall clock (nanoseconds), as the CLI draws one.
fn clock_seed() -> u64 {
    use oxinfer::clock::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_the_cli_defaults() {
        for j in ["", " ", "null", "{}"] {
            let o = GenerateSettings::from_json(j).unwrap().to_options();
            assert_eq!(o.max_tokens, DEFAULT_MAX_TOKENS);
            assert_eq!(
                o.sampling.temperature,
                SamplingParams::default().temperature
            );
            assert_eq!(o.prefill_chunk, DEFAULT_PREFILL_CHUNK);
        }
    }

    #[test]
    fn every_key_reaches_the_engine_options() {
        let j = r#"{"maxTokens": 16, "temperature": 0, "topK": 5, "topP": 0.5, "minP": 0.1,
            "repeatPenalty": 1.1, "seed": 7, "stop": ["\n"], "ignoreEos": true,
            "prefillChunk": 64}"#;
        let o = GenerateSettings::from_json(j).unwrap().to_options();
        assert_eq!(o.max_tokens, 16);
        let s = &o.sampling;
        assert_eq!(
            (
                s.temperature,
                s.top_k,
                s.top_p,
                s.min_p,
                s.repeat_penalty,
                s.seed
            ),
            (0.0, 5, 0.5, 0.1, 1.1, 7)
        );
        assert_eq!(o.stop, vec!["\n".to_string()]);
        assert!(o.ignore_eos);
        assert_eq!(o.prefill_chunk, 64);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let e = GenerateSettings::from_json(r#"{"max_tokens": 3}"#).unwrap_err();
        assert!(e.to_string().contains("max_tokens"), "{e}");
        let e = GenerateSettings::from_json(r#"{"topK": -1}"#).unwrap_err();
        assert!(e.to_string().contains("generation options"), "{e}");
        let e = GenerateSettings::from_json("[1]").unwrap_err();
        assert!(e.to_string().contains("generation options"), "{e}");
    }
}
