//! Drafting with a draft head that reads the target's own state: a Gemma 4 drafter
//! ([`Gemma4Drafter`], transformers `gemma4_assistant`) drafts from the target's KV cache and
//! its final-normed hidden state at the last cached position. Each generator slot keeps that
//! hidden state from the pass that cached the position (the prompt's last row, or the last
//! accepted row of a verify pass); the target's passes then run on the CPU
//! ([`crate::arch::run_plan_with_hidden`]) so that the rows come back.

use crate::arch::gemma::gemma4::Gemma4;
use crate::arch::gemma::gemma4_assistant::Gemma4Drafter;
use crate::error::Result;
use crate::nn::KvCache;

/// A Gemma 4 drafter and the target it drafts for.
#[derive(Clone, Copy)]
pub struct DraftHead<'m> {
    pub drafter: &'m Gemma4Drafter,
    pub target: &'m Gemma4,
}

/// Extra rows a sliding cache keeps beyond the draft: the drafter reads one key more than the
/// window, and one more so that rolled-back rows never overwrite it.
pub const HEAD_EXTRA_ROWS: usize = 2;

/// What one slot knows for its next draft: the target's final-normed hidden state (`[D]`) at
/// position `pos` (the last cached one when it is current).
#[derive(Default)]
pub struct HeadSlot {
    pub hidden: Vec<f32>,
    pub pos: Option<usize>,
}

impl DraftHead<'_> {
    /// Up to `max` tokens greedily drafted after `context` (its last token not yet run by the
    /// target) from `cache`, the target's cache, which must hold every earlier token. No draft
    /// when the slot's hidden state is not the last cached position's, or when the cache no
    /// longer holds the keys the drafter reads (a ring just rewound past them).
    ///
    /// # Errors
    /// A draft step failed otherwise.
    pub fn draft(
        &self,
        slot: &HeadSlot,
        cache: &mut KvCache,
        context: &[u32],
        max: usize,
    ) -> Result<Vec<u32>> {
        let len = cache.len();
        let (Some(&token), Some(pos)) = (context.last(), slot.pos) else {
            return Ok(Vec::new());
        };
        if max == 0 || len == 0 || pos + 1 != len || context.len() != len + 1 {
            return Ok(Vec::new());
        }
        if !self.drafter.can_step(cache) {
            return Ok(Vec::new());
        }
        let drafted = self
            .drafter
            .draft(self.target, cache, token, &slot.hidden, max)?;
        Ok(drafted.into_iter().map(|(t, _)| t).collect())
    }
}
