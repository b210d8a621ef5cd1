//! A generation session: one sequence's KV cache kept across calls, so a multi-turn chat only
//! runs the tokens that differ from what the cache already holds. It is a
//! [`BatchGenerator`] of one slot.

use super::batch::{BatchConfig, BatchGenerator, PrefillBudget, SeqRequest};
use super::generate::{Collector, GenerateOptions, Generation, TokenEvent};
use super::speculative::check_draft_model;
use super::Model;
use crate::error::{Error, Result};

/// One sequence being generated, with its cache.
pub struct Session<'m> {
    model: &'m Model,
    batch: BatchGenerator<'m, ()>,
}

impl<'m> Session<'m> {
    /// A session over `model`, drafting with its draft head if it has one.
    pub(super) fn new(model: &'m Model, ctx: usize) -> Self {
        let cfg = BatchConfig {
            slots: 1,
            ctx,
            // Each call's `prefill_chunk` alone sets how many prompt tokens a pass runs.
            prefill: PrefillBudget::UNLIMITED,
        };
        let mut batch = BatchGenerator::new(model.lm(), model.tokenizer(), &cfg);
        if let Some(head) = model.draft_head() {
            batch = batch.with_draft_head(head);
        }
        Session { model, batch }
    }

    /// Drafts with `draft` for requests whose [`Speculation::draft_max`](super::Speculation::draft_max)
    /// is set (the cache is emptied).
    ///
    /// # Errors
    /// The two vocabularies differ (the first differing token is named).
    pub fn set_draft(&mut self, draft: &'m Model) -> Result<()> {
        check_draft_model(self.model, draft).map_err(|e| Error::Request(e.to_string()))?;
        let cfg = BatchConfig {
            slots: 1,
            ctx: self.capacity(),
            prefill: PrefillBudget::UNLIMITED,
        };
        self.batch = BatchGenerator::new(self.model.lm(), self.model.tokenizer(), &cfg)
            .with_draft(draft.lm());
        Ok(())
    }

    /// Positions the session can hold.
    pub fn capacity(&self) -> usize {
        self.batch.capacity()
    }

    /// Tokens currently cached.
    pub fn cached_tokens(&self) -> &[u32] {
        self.batch.cached_tokens(0)
    }

    /// Forgets everything cached.
    pub fn clear(&mut self) {
        self.batch.reset();
    }

    /// Generates after the full token sequence `tokens` (e.g. a whole rendered conversation):
    /// the longest prefix already in the cache is reused, only the rest is run.
    pub fn generate(
        &mut self,
        tokens: &[u32],
        opts: &GenerateOptions,
        on_token: impl FnMut(&TokenEvent) -> bool,
    ) -> Result<Generation> {
        self.model.check_files()?;
        let req = SeqRequest {
            prompt: tokens.to_vec(),
            opts: opts.clone(),
        };
        self.batch.admit(req, ()).map_err(|r| r.into_parts().0)?;
        let mut collect = Collector::new(on_token);
        while !self.batch.is_idle() {
            self.batch
                .step(|_, ev| collect.on_event(ev))
                .map_err(|f| f.error)?;
        }
        collect.into_generation()
    }
}
