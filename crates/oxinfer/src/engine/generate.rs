//! Generation of one sequence, the way the CLI and library callers use it: options, stop
//! reasons, streamed token events, timings and the collected [`Generation`]. [`generate`]
//! (and [`Session::generate`](super::Session::generate)) run it as a batch of one through
//! [`super::batch`], the loop the server's batches use too.

use super::batch::{self, Finished, SeqEvent, SeqRequest, TokenLogprob};
use super::grammar::Grammar;
use super::sampler::SamplingParams;
use crate::arch::CausalLm;
use crate::error::{Error, Result};
use crate::nn::KvCache;
use crate::tokenizer::Tokenizer;
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
    /// Return the logits of every prompt position in [`Generation::prompt_logits`].
    pub keep_prompt_logits: bool,
    /// Report each token's log-probability and this many most likely alternatives
    /// ([`TokenEvent::logprob`]).
    pub logprobs: Option<usize>,
    /// Constrain the output to documents of this JSON grammar (needs the model's tokenizer).
    pub grammar: Option<Arc<Grammar>>,
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

/// One generated token as streamed to the caller.
#[derive(Clone, Debug)]
pub struct TokenEvent<'a> {
    /// The token id.
    pub id: u32,
    /// Text released by this token (may be empty while a UTF-8 character or a possible stop
    /// string is incomplete).
    pub text: &'a str,
    /// The token's log-probability, when [`GenerateOptions::logprobs`] asks for it.
    pub logprob: Option<&'a TokenLogprob>,
}

/// Timings of a generation, for the stats line.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    pub prompt_tokens: usize,
    pub prompt_time: Duration,
    pub generated_tokens: usize,
    pub generation_time: Duration,
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

/// Result of a generation.
#[derive(Clone, Debug)]
pub struct Generation {
    /// Generated token ids (the EOS token, if any, is included).
    pub tokens: Vec<u32>,
    /// Generated text, without stop strings and end-of-generation tokens.
    pub text: String,
    pub stop_reason: StopReason,
    pub timings: Timings,
    /// `[n_prompt, vocab]` logits of the prompt positions, when asked for.
    pub prompt_logits: Option<Vec<f32>>,
}

/// Runs `tokens` through the model in chunks of `chunk`. Returns the logits of every position
/// (`[tokens.len(), vocab]`) when `all`, else of the last position only.
pub fn prefill(
    lm: &dyn CausalLm,
    cache: &mut KvCache,
    tokens: &[u32],
    chunk: usize,
    all: bool,
) -> Result<Vec<f32>> {
    let mut logits = Vec::new();
    for piece in tokens.chunks(chunk.max(1)) {
        let l = lm.forward(piece, cache, all)?;
        if all {
            logits.extend_from_slice(&l);
        } else {
            logits = l;
        }
    }
    Ok(logits)
}

/// Generates after `prompt` (token ids) continuing from whatever `cache` holds: the prompt is
/// appended at position `cache.len()`. `on_token` is called for every generated token; it
/// returns `false` to stop. Without a tokenizer, no text is produced (ids only).
pub fn generate(
    lm: &dyn CausalLm,
    tokenizer: Option<&Tokenizer>,
    cache: &mut KvCache,
    prompt: &[u32],
    opts: &GenerateOptions,
    on_token: impl FnMut(&TokenEvent) -> bool,
) -> Result<Generation> {
    let req = SeqRequest {
        prompt: prompt.to_vec(),
        opts: opts.clone(),
    };
    let mut collect = Collector::new(on_token);
    batch::generate_in_cache(lm, tokenizer, cache, req, |ev| collect.on_event(ev))?;
    collect.into_generation()
}

/// Turns one sequence's [`SeqEvent`]s into [`TokenEvent`] callbacks and a [`Generation`].
pub(super) struct Collector<F> {
    on_token: F,
    text: String,
    /// Text released at the end, passed on with the last token's id once it is known.
    tail: String,
    finished: Option<Finished>,
}

impl<F: FnMut(&TokenEvent) -> bool> Collector<F> {
    pub(super) fn new(on_token: F) -> Self {
        Collector {
            on_token,
            text: String::new(),
            tail: String::new(),
            finished: None,
        }
    }

    /// Takes one event; `false` asks the generator to cancel.
    pub(super) fn on_event(&mut self, ev: SeqEvent) -> bool {
        match ev {
            SeqEvent::Token { id, text, logprob } => {
                self.text.push_str(&text);
                (self.on_token)(&TokenEvent {
                    id,
                    text: &text,
                    logprob: logprob.as_ref(),
                })
            }
            SeqEvent::Text(t) => {
                self.tail = t;
                true
            }
            SeqEvent::Finished(f) => {
                if !self.tail.is_empty() {
                    self.text.push_str(&self.tail);
                    (self.on_token)(&TokenEvent {
                        id: *f.tokens.last().unwrap_or(&0),
                        text: &self.tail,
                        logprob: None,
                    });
                }
                self.finished = Some(f);
                true
            }
        }
    }

    /// The generation, once [`SeqEvent::Finished`] arrived.
    pub(super) fn into_generation(self) -> Result<Generation> {
        let f = self
            .finished
            .ok_or_else(|| Error::Request("the generation ended without finishing".into()))?;
        Ok(Generation {
            tokens: f.tokens,
            text: self.text,
            stop_reason: f.reason,
            timings: f.timings,
            prompt_logits: f.prompt_logits,
        })
    }
}
