//! A loaded model and its one generation slot, driven a step at a time: the browser's worker
//! calls [`ChatEngine::step`] once per forward pass and returns to its event loop in between,
//! so a cancel message is seen after at most one pass and tokens stream as they come.
//!
//! The generation loop is the engine's own ([`BatchGenerator`], a batch of one slot, as the
//! CLI's [`Session`](oxinfer::Session)): sampling, stop strings, EOS and limits behave as in
//! `oxinfer run`, and a conversation's next turn reuses the cached prefix.

use crate::error::{Result, WebError};
use oxinfer::engine::batch::{BatchConfig, BatchGenerator, PrefillBudget, SeqEvent, SeqRequest};
use oxinfer::engine::generate::{prefill, DEFAULT_PREFILL_CHUNK};
use oxinfer::engine::{StopReason, Timings};
use oxinfer::{ChatMessage, GenerateOptions, Model};
use serde::Serialize;

/// The generation slot, borrowing the model it runs.
type Generator<'m> = BatchGenerator<'m, ()>;

self_cell::self_cell!(
    /// A model and the generator that borrows it, in one value.
    struct ModelCell {
        owner: Model,
        #[not_covariant]
        dependent: Generator,
    }
);

/// What one step produced, in order.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum StreamEvent {
    /// A generated token and the text it releases (empty while a UTF-8 character or a
    /// possible stop string is incomplete).
    Token { id: u32, text: String },
    /// Text held back until the end (a partial character or stop-string prefix), released.
    Text { text: String },
    /// The generation ended; nothing follows.
    Done(Summary),
}

/// How a generation ended, with its speed.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// `eos`, `stopString`, `maxTokens`, `contextFull` or `cancelled`.
    pub reason: &'static str,
    /// Every generated id, the end-of-generation token included.
    pub tokens: Vec<u32>,
    /// Prompt tokens of the request.
    pub prompt_tokens: usize,
    /// Prompt tokens reused from the cache (not run again).
    pub cached_tokens: usize,
    /// Prompt tokens run, and their time in milliseconds (the first token's step included).
    pub prefill_tokens: usize,
    pub prefill_ms: f64,
    /// Tokens generated after the first, and their time in milliseconds.
    pub decode_tokens: usize,
    pub decode_ms: f64,
}

impl Summary {
    fn new(
        reason: StopReason,
        tokens: Vec<u32>,
        prompt: usize,
        cached: usize,
        t: &Timings,
    ) -> Self {
        Summary {
            reason: reason_name(reason),
            tokens,
            prompt_tokens: prompt,
            cached_tokens: cached,
            prefill_tokens: t.prompt_tokens,
            prefill_ms: t.prompt_time.as_secs_f64() * 1e3,
            decode_tokens: t.generated_tokens,
            decode_ms: t.generation_time.as_secs_f64() * 1e3,
        }
    }
}

fn reason_name(r: StopReason) -> &'static str {
    match r {
        StopReason::Eos => "eos",
        StopReason::StopString => "stopString",
        StopReason::MaxTokens => "maxTokens",
        StopReason::ContextFull => "contextFull",
        StopReason::Cancelled => "cancelled",
    }
}

/// A model with one generation slot of `ctx` positions.
pub struct ChatEngine {
    cell: ModelCell,
    running: bool,
}

impl ChatEngine {
    /// The engine over `model`, its cache holding at most `ctx` positions (`None`: the model's
    /// context length; the cache grows as it fills).
    pub fn new(model: Model, ctx: Option<usize>) -> Self {
        let ctx = ctx.unwrap_or(model.config().context_length).max(1);
        let cell = ModelCell::new(model, |m| {
            let cfg = BatchConfig {
                slots: 1,
                ctx,
                prefill: PrefillBudget::UNLIMITED,
            };
            BatchGenerator::new(m.lm(), m.tokenizer(), &cfg)
        });
        ChatEngine {
            cell,
            running: false,
        }
    }

    /// The model.
    pub fn model(&self) -> &Model {
        self.cell.borrow_owner()
    }

    /// Positions the cache can hold.
    pub fn capacity(&self) -> usize {
        self.cell.with_dependent(|_, g| g.capacity())
    }

    /// The prompt ids of a conversation: `messages` rendered through the model's chat template
    /// (their text kept from becoming control tokens) with the assistant's turn opened, then
    /// tokenized (BOS per the model's metadata).
    pub fn chat_tokens(&self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        Ok(self.model().chat_tokens(messages)?)
    }

    /// Starts generating after `prompt` (the whole conversation: the prefix the cache already
    /// holds is not run again).
    ///
    /// # Errors
    /// A generation is already running; an id outside the vocabulary; an empty or too long
    /// prompt; sampling values out of range.
    pub fn start(&mut self, prompt: Vec<u32>, opts: GenerateOptions) -> Result<()> {
        if self.running {
            return Err(WebError::request(
                "a generation is running: step it to its end or cancel it first",
            ));
        }
        self.check_ids(&prompt)?;
        let req = SeqRequest { prompt, opts };
        self.cell
            .with_dependent_mut(|_, g| g.admit(req, ()))
            .map_err(|r| WebError::Engine(r.into_parts().0))?;
        self.running = true;
        Ok(())
    }

    /// Whether a generation is running (more [`step`](Self::step)s to make).
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// Runs one forward pass (a prompt chunk, or one token) and returns what it produced; empty
    /// when nothing is running. The last event of a generation is [`StreamEvent::Done`].
    ///
    /// # Errors
    /// The forward pass failed; the generation is over and the cache emptied.
    pub fn step(&mut self) -> Result<Vec<StreamEvent>> {
        if !self.running {
            return Ok(Vec::new());
        }
        let mut events = Vec::new();
        let ran = self.cell.with_dependent_mut(|_, g| {
            let r = g.step(|_, ev| {
                events.push(match ev {
                    SeqEvent::Token { id, text, .. } => StreamEvent::Token { id, text },
                    SeqEvent::Text(text) => StreamEvent::Text { text },
                    SeqEvent::Finished(f) => StreamEvent::Done(Summary::new(
                        f.reason,
                        f.tokens,
                        f.prompt_tokens,
                        f.cached_tokens,
                        &f.timings,
                    )),
                });
                true
            });
            (r, g.is_idle())
        });
        self.running = !ran.1;
        ran.0.map_err(|f| WebError::Engine(f.error))?;
        Ok(events)
    }

    /// Runs the generation started with [`start`](Self::start) to its end, passing every
    /// event to `on_event` (which returns `false` to cancel); returns the summary.
    pub fn run_to_end(
        &mut self,
        mut on_event: impl FnMut(&StreamEvent) -> bool,
    ) -> Result<Summary> {
        let mut summary = None;
        while self.running {
            for ev in self.step()? {
                if let StreamEvent::Done(s) = &ev {
                    summary = Some(s.clone());
                }
                if !on_event(&ev) {
                    self.cancel();
                }
            }
        }
        summary.ok_or_else(|| WebError::request("the generation was cancelled"))
    }

    /// Stops the running generation, if any (no further events); the cache keeps what it
    /// holds. Returns whether one was running.
    pub fn cancel(&mut self) -> bool {
        self.running = false;
        self.cell
            .with_dependent_mut(|_, g| g.cancel_where(|_| true))
            > 0
    }

    /// Forgets the cached conversation (a new chat starts from an empty cache).
    pub fn reset(&mut self) {
        self.running = false;
        self.cell.with_dependent_mut(|_, g| {
            g.reset();
        });
    }

    /// The logits of the last position after running `ids` from an empty cache (the slot's
    /// cache is left as it is): `vocab` floats, the `--tokens … --dump-logits` of `oxinfer
    /// run` for its last row.
    ///
    /// # Errors
    /// Empty `ids`, an id outside the vocabulary, a failed pass.
    pub fn last_logits(&self, ids: &[u32]) -> Result<Vec<f32>> {
        if ids.is_empty() {
            return Err(WebError::request("logits: no token ids given"));
        }
        self.check_ids(ids)?;
        let lm = self.model().lm();
        let mut cache = lm.new_cache(ids.len());
        Ok(prefill(lm, &mut cache, ids, DEFAULT_PREFILL_CHUNK, false)?)
    }

    /// Checks that every id is inside the vocabulary, naming the first that is not.
    fn check_ids(&self, ids: &[u32]) -> Result<()> {
        let vocab = self.model().config().vocab_size;
        match ids.iter().position(|&i| i as usize >= vocab) {
            Some(k) => Err(WebError::request(format!(
                "token id {} (position {k}) is outside the vocabulary (size {vocab})",
                ids[k]
            ))),
            None => Ok(()),
        }
    }
}
