//! Generation of one sequence, the way the CLI and library callers use it: options, stop
//! reasons, streamed token events, timings and the collected [`Generation`]. [`generate`]
//! (and [`Session::generate`](super::Session::generate)) run it as a batch of one through
//! [`super::batch`], the loop the server's batches use too.

use super::batch::{self, Finished, SeqEvent, SeqRequest, TokenLogprob};
pub use super::generation_types::{GenerateOptions, StopReason, Timings, DEFAULT_PREFILL_CHUNK};
use crate::arch::CausalLm;
use crate::error::{Error, Result};
use crate::nn::KvCache;
use crate::tokenizer::Tokenizer;

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
