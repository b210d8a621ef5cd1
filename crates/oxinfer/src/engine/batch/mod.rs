//! Batched generation: the one generation loop of the engine. A [`BatchGenerator`] owns a
//! fixed set of slots, each with its KV cache and the tokens that cache holds; sequences are
//! admitted into free slots (the one sharing the longest prefix with the prompt, so a
//! conversation's next turn only runs what is new), and every [`step`](BatchGenerator::step)
//! runs all of them together in one forward pass: decode tokens of the sequences past their
//! prompt plus a bounded chunk of prompt tokens of those still prefilling. Sampling, grammar
//! masks, log-probabilities, stop strings, EOS and token limits are applied per sequence, and
//! each sequence reports [`SeqEvent`]s (text streamed without splitting UTF-8 characters).
//!
//! [`Session`](crate::engine::Session) and [`generate`](crate::engine::generate::generate) are
//! a batch of one; the server feeds its requests into a generator of `--parallel` slots.
//!
//! ```no_run
//! # fn main() -> oxinfer::Result<()> {
//! use oxinfer::engine::batch::{BatchConfig, BatchGenerator, SeqEvent, SeqRequest};
//! let model = oxinfer::Model::load("model.gguf")?;
//! let mut batch = BatchGenerator::new(model.lm(), model.tokenizer(), &BatchConfig::new(2, 1024));
//! for (i, text) in ["Hello", "Bonjour"].into_iter().enumerate() {
//!     let prompt = model.tokenize(text, true)?;
//!     let req = SeqRequest { prompt, opts: Default::default() };
//!     batch.admit(req, i).map_err(|r| r.into_parts().0)?;
//! }
//! while !batch.is_idle() {
//!     batch.step(|i, ev| {
//!         if let SeqEvent::Token { text, .. } = ev {
//!             print!("[{i}] {text}");
//!         }
//!         true
//!     }).map_err(|f| f.error)?;
//! }
//! # Ok(())
//! # }
//! ```

mod logprobs;
mod sequence;
mod step;

pub use logprobs::{top_logprobs, TokenLogprob};
pub use sequence::{Finished, SeqEvent, SeqRequest};
pub use step::{PrefillBudget, StepReport};

use crate::arch::CausalLm;
use crate::clock::Instant;
use crate::engine::grammar::Vocabulary;
use crate::engine::speculative::draft_head::{DraftHead, HeadSlot, HEAD_EXTRA_ROWS};
use crate::engine::speculative::draft_model::{DraftModel, DraftSlot};
use crate::error::{Error, Result};
use crate::nn::KvCache;
use crate::plan::media::MediaEmbeds;
use crate::tokenizer::Tokenizer;
use sequence::Sequence;
use std::sync::Arc;
use step::{run_step, Drafters, Lane};

/// Shape of a [`BatchGenerator`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchConfig {
    /// Sequences generated at once (at least one).
    pub slots: usize,
    /// Positions of each slot's KV cache.
    pub ctx: usize,
    /// Prompt tokens run per step.
    pub prefill: PrefillBudget,
}

impl BatchConfig {
    /// `slots` slots of `ctx` positions, with the default [`PrefillBudget`].
    pub fn new(slots: usize, ctx: usize) -> Self {
        BatchConfig {
            slots,
            ctx,
            prefill: PrefillBudget::default(),
        }
    }
}

/// Why [`BatchGenerator::admit`] did not take a sequence; the tag comes back.
#[derive(Debug)]
pub enum Rejected<T> {
    /// Every slot is busy; the request and tag come back to be queued.
    Busy { req: Box<SeqRequest>, tag: T },
    /// The request cannot run as given (sampling values, empty or too long prompt).
    Invalid { error: Error, tag: T },
}

impl<T> Rejected<T> {
    /// The rejection as an engine error, and the tag.
    pub fn into_parts(self) -> (Error, T) {
        match self {
            Rejected::Busy { tag, .. } => {
                (Error::Request("every generation slot is busy".into()), tag)
            }
            Rejected::Invalid { error, tag } => (error, tag),
        }
    }
}

/// A failed forward pass: the error and the tags of the sequences it ended (their slots were
/// emptied; the other sequences continue).
#[derive(Debug)]
pub struct StepFailed<T> {
    pub error: Error,
    pub failed: Vec<T>,
}

/// One slot: a KV cache kept between sequences and the sequence now using it.
struct Slot<'m, T> {
    cache: KvCache,
    /// The tokens whose keys and values `cache` holds, in order.
    cached: Vec<u32>,
    /// The media whose soft tokens sit among `cached`.
    media: Option<Arc<MediaEmbeds>>,
    active: Option<(Sequence<'m>, T)>,
    last_used: Instant,
    /// The draft model's cache for this slot, when the generator has a draft model.
    draft: Option<DraftSlot>,
    /// The target's last hidden state, when the generator has a draft head.
    head: Option<HeadSlot>,
}

/// Generates several sequences at once over one model. `T` is the caller's tag of each
/// sequence (a channel, an index…), handed to the event callback and dropped when the
/// sequence ends.
pub struct BatchGenerator<'m, T> {
    lm: &'m dyn CausalLm,
    tokenizer: Option<&'m Tokenizer>,
    /// Built on the first request with a grammar.
    vocab: Option<Arc<Vocabulary>>,
    prefill: PrefillBudget,
    slots: Vec<Slot<'m, T>>,
    /// Drafts for sequences that ask for draft-model speculation.
    drafter: Option<DraftModel<'m>>,
    /// Drafts from the target's own state (instead of `drafter`).
    head: Option<DraftHead<'m>>,
}

impl<'m, T> BatchGenerator<'m, T> {
    /// A generator over `lm` (`tokenizer`: for text, EOS and grammars; without it only ids
    /// are produced) with `cfg.slots` empty slots.
    pub fn new(lm: &'m dyn CausalLm, tokenizer: Option<&'m Tokenizer>, cfg: &BatchConfig) -> Self {
        let slots = (0..cfg.slots.max(1))
            .map(|_| Slot {
                cache: lm.new_cache(cfg.ctx),
                cached: Vec::new(),
                media: None,
                active: None,
                last_used: Instant::now(),
                draft: None,
                head: None,
            })
            .collect();
        BatchGenerator {
            lm,
            tokenizer,
            vocab: None,
            prefill: cfg.prefill,
            slots,
            drafter: None,
            head: None,
        }
    }

    /// Attaches a draft head that reads the target's own cache and hidden state (a Gemma 4
    /// drafter for `lm`, which must be `head.target`); sequences whose
    /// [`Speculation::draft_max`](crate::engine::Speculation::draft_max) is set then draft with
    /// it. The slots' caches keep `64 + 2` rows beyond each sliding window (the most a request
    /// may draft, plus the drafter's extra key), and the target's passes run on the CPU.
    pub fn with_draft_head(mut self, head: DraftHead<'m>) -> Self {
        for s in &mut self.slots {
            s.cache.keep_rewind(64 + HEAD_EXTRA_ROWS);
            s.head = Some(HeadSlot::default());
        }
        self.head = Some(head);
        self
    }

    /// Attaches a draft model (same vocabulary as the target: check it first with
    /// [`check_vocabularies`](crate::engine::speculative::check_vocabularies)); sequences whose
    /// [`Speculation::draft_max`](crate::engine::Speculation::draft_max) is set then draft with
    /// it. Each slot gets a draft cache of the target's context.
    pub fn with_draft(mut self, draft: &'m dyn CausalLm) -> Self {
        let model = DraftModel::new(draft, self.lm.config().vocab_size);
        let ctx = self.capacity();
        for s in &mut self.slots {
            s.draft = Some(model.new_slot(ctx));
        }
        self.drafter = Some(model);
        self
    }

    /// Number of slots.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Positions each slot can hold.
    pub fn capacity(&self) -> usize {
        self.slots[0].cache.capacity()
    }

    /// Sequences being generated.
    pub fn active(&self) -> usize {
        self.slots.iter().filter(|s| s.active.is_some()).count()
    }

    /// Whether no sequence is being generated.
    pub fn is_idle(&self) -> bool {
        self.active() == 0
    }

    /// Whether a sequence can be admitted now.
    pub fn has_free_slot(&self) -> bool {
        self.active() < self.slots.len()
    }

    /// Bytes the slots' KV caches hold now on the host (keys and values in the caches' types;
    /// cached prefixes of finished sequences included; draft caches not counted).
    pub fn kv_bytes(&self) -> usize {
        self.slots.iter().map(|s| s.cache.bytes_in_use()).sum()
    }

    /// The tokens slot `slot`'s cache holds.
    pub fn cached_tokens(&self, slot: usize) -> &[u32] {
        &self.slots[slot].cached
    }

    /// Starts `req` in the free slot sharing its longest prefix (least recently used on ties),
    /// keeping that prefix in the cache.
    pub fn admit(&mut self, req: SeqRequest, tag: T) -> std::result::Result<(), Rejected<T>> {
        if let Err(error) = sequence::check(&req, 0, self.capacity(), self.tokenizer) {
            return Err(Rejected::Invalid { error, tag });
        }
        let Some(i) = self.pick_slot(&req.prompt) else {
            return Err(Rejected::Busy {
                req: Box::new(req),
                tag,
            });
        };
        let n_logits = self.lm.config().vocab_size;
        let vocab = sequence::grammar_vocabulary(&req, self.tokenizer, n_logits, &mut self.vocab);
        let slot = &mut self.slots[i];
        let mut common = common_prefix(&slot.cached, &req.prompt);
        // Equal placeholder ids hold the same rows only where the same media sit.
        common =
            MediaEmbeds::agreed_prefix(req.opts.media.as_deref(), slot.media.as_deref(), common);
        slot.media = req.opts.media.clone();
        // At least one prompt token must run to produce logits; a media group whose tokens
        // attend to each other both ways runs whole, so a prefix ending inside one stops at it.
        common = common.min(req.prompt.len() - 1);
        if let Some(m) = req.opts.media.as_deref() {
            common = m.uncut_prefix(common);
        }
        slot.cache.truncate(common);
        // A cache that cannot rewind that far (sliding windows, recurrent state) empties itself.
        common = common.min(slot.cache.len());
        slot.cached.truncate(common);
        slot.last_used = Instant::now();
        let seq = Sequence::new(req, common, self.tokenizer, vocab);
        slot.active = Some((seq, tag));
        Ok(())
    }

    /// The free slot whose cached tokens share the longest prefix with `prompt` (least
    /// recently used on ties), or `None` when all are busy.
    fn pick_slot(&self, prompt: &[u32]) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.active.is_none())
            .max_by_key(|(_, s)| {
                (
                    common_prefix(&s.cached, prompt),
                    std::cmp::Reverse(s.last_used),
                )
            })
            .map(|(i, _)| i)
    }

    /// Drops the sequences whose tag matches `cancel` (no events); their slots keep what
    /// their caches hold. Returns how many were dropped.
    pub fn cancel_where(&mut self, mut cancel: impl FnMut(&T) -> bool) -> usize {
        let mut n = 0;
        for s in &mut self.slots {
            if s.active.as_ref().is_some_and(|(_, tag)| cancel(tag)) {
                s.active = None;
                n += 1;
            }
        }
        n
    }

    /// Drops every sequence (returning their tags) and empties every slot's cache.
    pub fn reset(&mut self) -> Vec<T> {
        let mut tags = Vec::new();
        for s in &mut self.slots {
            if let Some((_, tag)) = s.active.take() {
                tags.push(tag);
            }
            s.cache.clear();
            s.cached.clear();
            if let Some(h) = &mut s.head {
                h.pos = None;
            }
        }
        tags
    }

    /// Runs one forward pass over every active sequence. `on_event(tag, event)` receives their
    /// events; it returns `false` to cancel that sequence (which then finishes with
    /// [`StopReason::Cancelled`](crate::engine::StopReason::Cancelled)). Finished sequences
    /// leave their slots (their tags are dropped).
    pub fn step(
        &mut self,
        mut on_event: impl FnMut(&mut T, SeqEvent) -> bool,
    ) -> std::result::Result<StepReport, StepFailed<T>> {
        let mut lanes = Vec::new();
        let mut tags = Vec::new();
        let mut slot_of = Vec::new();
        for (k, s) in self.slots.iter_mut().enumerate() {
            if let Some((seq, tag)) = &mut s.active {
                lanes.push(Lane {
                    cache: &mut s.cache,
                    cached: &mut s.cached,
                    seq,
                    draft: s.draft.as_mut(),
                    head: s.head.as_mut(),
                });
                tags.push(tag);
                slot_of.push(k);
            }
        }
        if lanes.is_empty() {
            return Ok(StepReport::default());
        }
        let drafters = Drafters {
            model: self.drafter.as_ref(),
            head: self.head.as_ref(),
        };
        let ran = run_step(self.lm, drafters, &mut lanes, self.prefill, &mut |i, ev| {
            on_event(&mut *tags[i], ev)
        });
        drop(lanes);
        match ran {
            Ok((report, ran)) => {
                for i in ran {
                    self.slots[slot_of[i]].last_used = Instant::now();
                }
                for s in &mut self.slots {
                    if s.active.as_ref().is_some_and(|(seq, _)| seq.is_done()) {
                        s.active = None;
                    }
                }
                Ok(report)
            }
            Err((error, failed)) => {
                let mut tags = Vec::with_capacity(failed.len());
                for i in failed {
                    let s = &mut self.slots[slot_of[i]];
                    tags.extend(s.active.take().map(|(_, tag)| tag));
                    s.cache.clear();
                    s.cached.clear();
                }
                Err(StepFailed {
                    error,
                    failed: tags,
                })
            }
        }
    }
}

/// How many leading tokens `a` and `b` share.
fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Generates one sequence in the caller's `cache`, after whatever it holds (no prefix reuse):
/// a batch of one whose slot is borrowed. `on_event` returns `false` to cancel.
pub fn generate_in_cache(
    lm: &dyn CausalLm,
    tokenizer: Option<&Tokenizer>,
    cache: &mut KvCache,
    req: SeqRequest,
    mut on_event: impl FnMut(SeqEvent) -> bool,
) -> Result<()> {
    sequence::check(&req, cache.len(), cache.capacity(), tokenizer)?;
    let n_logits = lm.config().vocab_size;
    let vocab = sequence::grammar_vocabulary(&req, tokenizer, n_logits, &mut None);
    let mut seq = Sequence::new(req, 0, tokenizer, vocab);
    let mut appended = Vec::new();
    while !seq.is_done() {
        let mut lanes = [Lane {
            cache: &mut *cache,
            cached: &mut appended,
            seq: &mut seq,
            draft: None,
            head: None,
        }];
        run_step(
            lm,
            Drafters::default(),
            &mut lanes,
            PrefillBudget::UNLIMITED,
            &mut |_, ev| on_event(ev),
        )
        .map_err(|(e, _)| e)?;
    }
    Ok(())
}
