//! What a sequence's generation is asked for and how it ends: options, stop reasons and timings.
//! Shared by [`super::generate`] (one sequence) and [`super::batch`] (the loop it runs through),
//! below both.

use super::grammar::Grammar;
use super::sampler::SamplingParams;
use super::speculative::{DraftStats, Speculation};
use std::sync::Arc;
use std::time::Duration;

/// Default number of prompt tokens run per forward pass.
pub const DEFAULT_PREFILL_CHUNK: usize = 512;

/// What to generate and when to stop.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// How each token is drawn from the logits.
    pub sampling: SamplingParams,
    /// Generation ends when the text contains one of these (which is not returned).
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Most prompt tokens of this sequence per forward pass (in a batch, its
    /// [`PrefillBudget`](super::batch::PrefillBudget) may run fewer).
    pub prefill_chunk: usize,
    /// Return the logits of every prompt position in [`Generation::prompt_logits`](super::Generation::prompt_logits).
    pub keep_prompt_logits: bool,
    /// Report each token's log-probability and this many most likely alternatives
    /// ([`TokenEvent::logprob`](super::TokenEvent::logprob)).
    pub logprobs: Option<usize>,
    /// Constrain the output to documents of this JSON grammar (needs the model's tokenizer).
    pub grammar: Option<Arc<Grammar>>,
    /// Draft tokens ahead and verify them in one pass (output unchanged; see
    /// [`super::speculative`]).
    pub speculation: Speculation,
    /// Soft tokens of the prompt's media inputs (images, audio) at their placeholder
    /// positions ([`crate::engine::media`]).
    pub media: Option<Arc<crate::plan::media::MediaEmbeds>>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            ignore_eos: false,
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
            keep_prompt_logits: false,
            logprobs: None,
            grammar: None,
            speculation: Speculation::default(),
            media: None,
        }
    }
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token.
    Eos,
    /// A stop string appeared.
    StopString,
    /// `max_tokens` were generated.
    MaxTokens,
    /// The context is full.
    ContextFull,
    /// The callback asked to stop.
    Cancelled,
}

impl StopReason {
    /// OpenAI's `finish_reason` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Eos | StopReason::StopString | StopReason::Cancelled => "stop",
            StopReason::MaxTokens | StopReason::ContextFull => "length",
        }
    }
}

/// Timings of a generation, for the stats line.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    pub prompt_tokens: usize,
    pub prompt_time: Duration,
    pub generated_tokens: usize,
    pub generation_time: Duration,
    /// Drafted and accepted tokens, when speculating.
    pub draft: DraftStats,
}

impl Timings {
    /// Prompt tokens per second.
    pub fn prompt_tps(&self) -> f64 {
        self.prompt_tokens as f64 / self.prompt_time.as_secs_f64().max(1e-9)
    }
    /// Generated tokens per second (the first token's step counts as prompt time).
    pub fn generation_tps(&self) -> f64 {
        self.generated_tokens as f64 / self.generation_time.as_secs_f64().max(1e-9)
    }
}
