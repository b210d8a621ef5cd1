//! One sequence being generated: how far its prompt has run, its sampler, stop rules, grammar
//! constraint and streamed text. It turns the logits of each step into [`SeqEvent`]s.

use super::logprobs::{top_logprobs, TokenLogprob};
use crate::clock::Instant;
use crate::engine::generation_types::{GenerateOptions, StopReason, Timings};
use crate::engine::grammar::{Constraint, Vocabulary};
use crate::engine::sampler::Sampler;
use crate::engine::speculative::Speculation;
use crate::engine::stop::StopMatcher;
use crate::error::{Error, Result};
use crate::plan::media::MediaEmbeds;
use crate::tokenizer::{StreamDecoder, Tokenizer};
use std::sync::Arc;

/// One sequence to generate.
#[derive(Clone, Debug)]
pub struct SeqRequest {
    /// The token ids to continue (for a slot: the whole conversation; the prefix the slot
    /// already holds is reused).
    pub prompt: Vec<u32>,
    /// Sampling, limits, stop rules, grammar and log-probabilities.
    pub opts: GenerateOptions,
}

/// What a sequence reports, in this order: its tokens, possibly a last piece of text, the end.
#[derive(Debug)]
pub enum SeqEvent {
    /// One generated token and the text it releases (empty while a UTF-8 character or a
    /// possible stop string is incomplete). End-of-generation tokens are not reported (unless
    /// `ignore_eos`); they appear in [`Finished::tokens`].
    Token {
        id: u32,
        text: String,
        /// When [`GenerateOptions::logprobs`] asks for it.
        logprob: Option<TokenLogprob>,
    },
    /// Text released at the end: a held-back partial character or stop-string prefix.
    Text(String),
    /// Generation ended; no more events follow for this sequence.
    Finished(Finished),
}

/// The end of one sequence's generation.
#[derive(Clone, Debug)]
pub struct Finished {
    pub reason: StopReason,
    /// Generated token ids (the end-of-generation token, if any, included).
    pub tokens: Vec<u32>,
    /// Length of the request's prompt in tokens.
    pub prompt_tokens: usize,
    /// Prompt tokens reused from the slot's cache instead of run.
    pub cached_tokens: usize,
    /// Prompt (the tokens run, reused ones excluded) and generation timings.
    pub timings: Timings,
    /// `[tokens run, vocab]` logits of the prompt positions run, when
    /// [`GenerateOptions::keep_prompt_logits`] asks for them.
    pub prompt_logits: Option<Vec<f32>>,
}

/// What a sequence made of one pass's logits.
/// What a pass returned for one sequence.
pub(super) enum PassOut {
    /// Its logit rows, `[n, vocab]` (the last position only unless it asked for all).
    Logits(Vec<f32>),
    /// Only the argmax of its last row ([`Sequence::argmax_is_enough`]).
    Argmax(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Accepted {
    /// Tokens sampled.
    pub sampled: usize,
    /// Of the tokens the pass ran, how many stay in the cache (the rest, rejected draft
    /// tokens, are rolled back).
    pub kept: usize,
}

/// Checks that `req` can run after `kept` positions in a cache of `capacity` positions.
pub(super) fn check(
    req: &SeqRequest,
    kept: usize,
    capacity: usize,
    tokenizer: Option<&Tokenizer>,
) -> Result<()> {
    req.opts.sampling.validate()?;
    let n = kept + req.prompt.len();
    if req.prompt.is_empty() {
        return Err(Error::Request("the prompt is empty".into()));
    }
    if n > capacity {
        return Err(Error::Request(format!(
            "the prompt ({n} tokens) exceeds the context ({capacity} tokens) by {}",
            n - capacity
        )));
    }
    if req.opts.grammar.is_some() && tokenizer.is_none() {
        return Err(Error::Request(
            "a grammar needs the model's tokenizer, and this model has none".into(),
        ));
    }
    Ok(())
}

/// The vocabulary `req`'s grammar works over (`None` without a grammar), built once into
/// `built` (`n_logits`: the width of the logits).
pub(super) fn grammar_vocabulary(
    req: &SeqRequest,
    tokenizer: Option<&Tokenizer>,
    n_logits: usize,
    built: &mut Option<Arc<Vocabulary>>,
) -> Option<Arc<Vocabulary>> {
    let tok = tokenizer.filter(|_| req.opts.grammar.is_some())?;
    Some(
        built
            .get_or_insert_with(|| Arc::new(Vocabulary::new(tok, n_logits)))
            .clone(),
    )
}

/// A sequence in progress.
pub(super) struct Sequence<'m> {
    prompt: Vec<u32>,
    opts: GenerateOptions,
    /// Prompt tokens already in the cache (reused or run).
    pos: usize,
    reused: usize,
    sampler: Sampler,
    /// Prompt and generated tokens (the penalties look at them).
    history: Vec<u32>,
    /// The tokens to run next while decoding: the last one sampled, then the draft (if any).
    pending: Vec<u32>,
    tokenizer: Option<&'m Tokenizer>,
    stream: Option<StreamDecoder<'m>>,
    stops: StopMatcher,
    constraint: Option<Constraint>,
    prompt_logits: Option<Vec<f32>>,
    started: Instant,
    decode_started: Option<Instant>,
    timings: Timings,
    done: bool,
}

impl<'m> Sequence<'m> {
    /// A sequence whose first `reused` prompt tokens are already in its cache; `vocab` is
    /// needed when the request has a grammar.
    pub(super) fn new(
        req: SeqRequest,
        reused: usize,
        tokenizer: Option<&'m Tokenizer>,
        vocab: Option<Arc<Vocabulary>>,
    ) -> Self {
        let SeqRequest { prompt, opts } = req;
        let constraint = opts
            .grammar
            .clone()
            .zip(vocab)
            .map(|(g, v)| Constraint::new(g, v));
        Sequence {
            pos: reused,
            reused,
            sampler: Sampler::new(opts.sampling.clone()),
            history: prompt.clone(),
            pending: vec![0],
            tokenizer,
            stream: tokenizer.map(|t| t.stream()),
            stops: StopMatcher::new(&opts.stop),
            constraint,
            prompt_logits: opts.keep_prompt_logits.then(Vec::new),
            started: Instant::now(),
            decode_started: None,
            timings: Timings {
                prompt_tokens: prompt.len() - reused,
                ..Timings::default()
            },
            done: false,
            prompt,
            opts,
        }
    }

    /// Prompt tokens not yet run.
    pub(super) fn prompt_left(&self) -> usize {
        self.prompt.len() - self.pos
    }

    /// The media of the prompt.
    pub(super) fn media(&self) -> Option<Arc<MediaEmbeds>> {
        self.opts.media.clone()
    }

    /// Most prompt tokens this sequence runs in one pass.
    pub(super) fn chunk_cap(&self) -> usize {
        self.opts.prefill_chunk.max(1)
    }

    /// How many prompt tokens the next pass runs when `n` are wanted: the pass ends outside
    /// the prompt's media groups ([`MediaEmbeds::uncut_chunk`]: fewer, or more when a group
    /// starts here, which then runs whole).
    pub(super) fn prompt_chunk(&self, n: usize) -> usize {
        let m = self.opts.media.as_deref();
        m.map_or(n, |m| m.uncut_chunk(self.pos, n))
            .min(self.prompt_left())
    }

    /// The next `n` tokens to run: prompt tokens while prefilling, else the last sampled one
    /// and the draft ([`Self::decode_len`] tokens).
    pub(super) fn input(&self, n: usize) -> &[u32] {
        if self.pos < self.prompt.len() {
            &self.prompt[self.pos..self.pos + n]
        } else {
            &self.pending[..n]
        }
    }

    /// Tokens a decoding step runs: the last sampled one and the draft.
    pub(super) fn decode_len(&self) -> usize {
        self.pending.len()
    }

    /// Whether the next pass should return the logits of every position it runs.
    pub(super) fn wants_all_logits(&self) -> bool {
        if self.pos < self.prompt.len() {
            self.prompt_logits.is_some()
        } else {
            self.pending.len() > 1
        }
    }

    /// Whether the next pass may return just the argmax of this sequence's last logit row
    /// ([`PassOut::Argmax`]): plain greedy sampling, no grammar, no log-probabilities, no draft
    /// to verify and no prompt logits kept — the token [`Self::accept`] would pick from the
    /// whole row is then that index.
    pub(super) fn argmax_is_enough(&self) -> bool {
        self.sampler.is_plain_greedy()
            && self.constraint.is_none()
            && self.opts.logprobs.is_none()
            && !self.wants_all_logits()
    }

    /// How speculation is asked for.
    pub(super) fn speculation(&self) -> Speculation {
        self.opts.speculation
    }

    /// Most draft tokens the next decoding step may verify in a cache holding `cache_len` of
    /// `capacity` positions (0 while prefilling or when not speculating): the draft and the
    /// token before it must fit the cache, and drafting past the token limit is wasted.
    pub(super) fn draft_room(&self, cache_len: usize, capacity: usize) -> usize {
        if self.done || self.pos < self.prompt.len() {
            return 0;
        }
        let left = self.opts.max_tokens.saturating_sub(self.generated().len());
        self.opts
            .speculation
            .max_draft()
            .min(left.saturating_sub(1))
            .min(capacity.saturating_sub(cache_len + 1))
    }

    /// The prompt and every token generated so far (the last one not yet run).
    pub(super) fn history(&self) -> &[u32] {
        &self.history
    }

    /// Sets the draft the next decoding step verifies (ignored when shorter than the
    /// request's `draft_min`).
    pub(super) fn set_draft(&mut self, draft: &[u32]) {
        self.pending.truncate(1);
        if !draft.is_empty() && draft.len() >= self.opts.speculation.draft_min {
            self.pending.extend_from_slice(draft);
        }
    }

    /// Whether generation has ended.
    pub(super) fn is_done(&self) -> bool {
        self.done
    }

    fn generated(&self) -> &[u32] {
        &self.history[self.prompt.len()..]
    }

    /// Takes what a pass that ran `n` of this sequence's tokens (see [`Self::input`]) returned
    /// for it: its logits, or only its last row's argmax when [`Self::argmax_is_enough`], which
    /// is then the token; `cache_len` and `capacity` describe its cache afterwards. Samples the
    /// next token once
    /// the prompt is done (while decoding with a draft: one token per row, each row's draft
    /// token verified, up to the first rejection), streams the tokens through `emit` (which
    /// returns `false` to cancel), and ends the sequence when a stop rule says so.
    pub(super) fn accept(
        &mut self,
        n: usize,
        out: PassOut,
        vocab: usize,
        cache_len: usize,
        capacity: usize,
        emit: &mut dyn FnMut(SeqEvent) -> bool,
    ) -> Accepted {
        if self.pos >= self.prompt.len() {
            return match out {
                PassOut::Logits(logits) => {
                    self.accept_decode(n, logits, vocab, cache_len, capacity, emit)
                }
                // One row ran (no draft: `argmax_is_enough`); its argmax is the token.
                PassOut::Argmax(id) => {
                    if let Some(reason) = self.take(id, None, cache_len, capacity, emit) {
                        self.finish(reason, emit);
                    }
                    Accepted {
                        sampled: 1,
                        kept: n,
                    }
                }
            };
        }
        let ran = Accepted {
            sampled: 0,
            kept: n,
        };
        self.pos += n;
        if let (Some(all), PassOut::Logits(logits)) = (&mut self.prompt_logits, &out) {
            all.extend_from_slice(logits);
        }
        if self.pos < self.prompt.len() {
            return ran;
        }
        self.timings.prompt_time = self.started.elapsed();
        self.decode_started = Some(Instant::now());
        if self.opts.max_tokens == 0 {
            self.finish(StopReason::MaxTokens, emit);
            return ran;
        }
        let stop = match out {
            PassOut::Logits(mut last) => {
                if last.len() > vocab {
                    last.drain(..last.len() - vocab);
                }
                self.sample(&mut last, None, cache_len, capacity, emit).0
            }
            PassOut::Argmax(id) => self.take(id, None, cache_len, capacity, emit),
        };
        if let Some(reason) = stop {
            self.finish(reason, emit);
        }
        Accepted { sampled: 1, ..ran }
    }

    /// [`Self::accept`] for a decoding step that ran the last sampled token and a draft of
    /// `n − 1` tokens (`logits`: one row per token).
    fn accept_decode(
        &mut self,
        n: usize,
        mut logits: Vec<f32>,
        vocab: usize,
        cache_len: usize,
        capacity: usize,
        emit: &mut dyn FnMut(SeqEvent) -> bool,
    ) -> Accepted {
        let before = cache_len - n;
        let draft = self.pending.split_off(1);
        self.timings.draft.drafted += draft.len();
        let mut kept = n;
        for (i, row) in logits.chunks_exact_mut(vocab).take(n).enumerate() {
            let guess = draft.get(i).copied();
            let (stop, hit) = self.sample(row, guess, before + i + 1, capacity, emit);
            self.timings.draft.accepted += usize::from(hit);
            if let Some(reason) = stop {
                self.finish(reason, emit);
            }
            if stop.is_some() || !hit {
                kept = i + 1;
                break;
            }
        }
        Accepted {
            sampled: kept,
            kept,
        }
    }

    /// Samples the next token from `logits` (verifying `draft` when given), streams it, and
    /// says whether generation ends and whether the token is the accepted draft.
    fn sample(
        &mut self,
        logits: &mut [f32],
        draft: Option<u32>,
        cache_len: usize,
        capacity: usize,
        emit: &mut dyn FnMut(SeqEvent) -> bool,
    ) -> (Option<StopReason>, bool) {
        self.sampler.apply_penalties(logits, &self.history);
        if let Some(c) = &self.constraint {
            let p = self.sampler.params();
            let need = if p.temperature <= 0.0 { 1 } else { p.top_k };
            c.mask(logits, need);
        }
        let logprob = self.opts.logprobs.map(|k| top_logprobs(logits, k));
        // The penalties are already in the logits.
        let (id, hit) = match draft {
            Some(d) => self.sampler.verify_draft(logits, d),
            None => (self.sampler.sample_penalized(logits), false),
        };
        let logprob = logprob.map(|(lse, top)| TokenLogprob {
            logprob: logits[id as usize] - lse,
            top,
        });
        (self.take(id, logprob, cache_len, capacity, emit), hit)
    }

    /// Makes `id` the sampled token (into the history, next to run), advances the grammar past
    /// it, streams it, and says whether generation ends (`cache_len`: positions the cache holds
    /// once `id`'s predecessor ran).
    fn take(
        &mut self,
        id: u32,
        logprob: Option<TokenLogprob>,
        cache_len: usize,
        capacity: usize,
        emit: &mut dyn FnMut(SeqEvent) -> bool,
    ) -> Option<StopReason> {
        self.history.push(id);
        self.pending[0] = id;
        let grammar_done = self.constraint.as_mut().is_some_and(|c| {
            c.advance(id);
            c.is_finished()
        });
        if !self.opts.ignore_eos && self.tokenizer.is_some_and(|t| t.is_eog(id)) {
            return Some(StopReason::Eos);
        }
        let piece = self.stream.as_mut().map(|s| s.push(id)).unwrap_or_default();
        let (text, stopped) = self.stops.push(&piece);
        if !emit(SeqEvent::Token { id, text, logprob }) {
            return Some(StopReason::Cancelled);
        }
        if stopped {
            Some(StopReason::StopString)
        } else if grammar_done {
            Some(StopReason::Eos)
        } else if self.generated().len() >= self.opts.max_tokens {
            Some(StopReason::MaxTokens)
        } else if cache_len >= capacity {
            Some(StopReason::ContextFull)
        } else {
            None
        }
    }

    /// Ends the sequence: releases held text (unless a stop string or the caller ended it)
    /// and reports [`Finished`].
    fn finish(&mut self, reason: StopReason, emit: &mut dyn FnMut(SeqEvent) -> bool) {
        self.done = true;
        if !matches!(reason, StopReason::StopString | StopReason::Cancelled) {
            let tail = self.stream.as_mut().map(|s| s.finish()).unwrap_or_default();
            let (mut text, _) = self.stops.push(&tail);
            text += &self.stops.finish();
            if !text.is_empty() {
                emit(SeqEvent::Text(text));
            }
        }
        self.timings.generated_tokens = self.generated().len();
        self.timings.generation_time = self.decode_started.map(|t| t.elapsed()).unwrap_or_default();
        emit(SeqEvent::Finished(Finished {
            reason,
            tokens: self.generated().to_vec(),
            prompt_tokens: self.prompt.len(),
            cached_tokens: self.reused,
            timings: self.timings,
            prompt_logits: self.prompt_logits.take(),
        }));
    }
}
