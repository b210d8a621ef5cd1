//! Draft-model drafting: a smaller model with the target's vocabulary guesses the next tokens
//! greedily. Each generator slot has a draft cache next to its target cache; before drafting it
//! is rewound to the prefix it shares with the sequence (which drops whatever the target
//! rejected last step) and fed the rest.

use crate::arch::CausalLm;
use crate::engine::generate::prefill;
use crate::engine::sampler::argmax;
use crate::error::Result;
use crate::nn::KvCache;
use crate::tokenizer::Tokenizer;

/// Tokens of the draft's catch-up run per forward pass.
const CATCH_UP_CHUNK: usize = 512;

/// The draft's and the target's vocabularies differ.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum VocabMismatch {
    /// Token `id` is spelled differently (`None`: that vocabulary has no such id).
    #[error(
        "the draft model's vocabulary differs from the target's at token {id}: \
         target {target:?}, draft {draft:?}"
    )]
    Token {
        id: u32,
        target: Option<String>,
        draft: Option<String>,
    },
    /// Only one of the two models has a tokenizer.
    #[error("the {0} model has no tokenizer, so the vocabularies cannot be compared")]
    NoTokenizer(&'static str),
    /// Neither has a tokenizer, and their logits differ in width.
    #[error("the draft model has {draft} token ids, the target {target}")]
    Size { target: usize, draft: usize },
}

/// Checks that `draft` may draft for `target`: [`check_vocabularies`] over their tokenizers and
/// logits' widths.
///
/// # Errors
/// The first differing token, or why the two cannot be compared.
pub fn check_draft_model(
    target: &crate::Model,
    draft: &crate::Model,
) -> std::result::Result<(), VocabMismatch> {
    fn side(m: &crate::Model) -> VocabSide<'_> {
        VocabSide {
            tokenizer: m.tokenizer(),
            n_logits: m.config().vocab_size,
        }
    }
    check_vocabularies(side(target), side(draft))
}

/// One side of a vocabulary comparison: a model's tokenizer (if any) and its logits' width.
#[derive(Clone, Copy)]
pub struct VocabSide<'a> {
    pub tokenizer: Option<&'a Tokenizer>,
    pub n_logits: usize,
}

/// Checks that `draft` spells every token id as `target` does (sizes included: the first id
/// one of them lacks is named). Models without tokenizers (token ids only) need logits of one
/// width.
///
/// # Errors
/// The first differing token, or why the two cannot be compared.
pub fn check_vocabularies(
    target: VocabSide<'_>,
    draft: VocabSide<'_>,
) -> std::result::Result<(), VocabMismatch> {
    let (t, d) = match (target.tokenizer, draft.tokenizer) {
        (Some(t), Some(d)) => (t, d),
        (None, None) if target.n_logits == draft.n_logits => return Ok(()),
        (None, None) => {
            return Err(VocabMismatch::Size {
                target: target.n_logits,
                draft: draft.n_logits,
            })
        }
        (None, Some(_)) => return Err(VocabMismatch::NoTokenizer("target")),
        (Some(_), None) => return Err(VocabMismatch::NoTokenizer("draft")),
    };
    let spell = |tok: &Tokenizer, id: u32| {
        tok.token_bytes(id)
            .map(|b| String::from_utf8_lossy(b).into_owned())
    };
    for id in 0..t.vocab_size().max(d.vocab_size()) as u32 {
        if t.token_bytes(id) != d.token_bytes(id) {
            return Err(VocabMismatch::Token {
                id,
                target: spell(t, id),
                draft: spell(d, id),
            });
        }
    }
    Ok(())
}

/// A draft model and what one generator slot's draft cache holds.
pub struct DraftModel<'m> {
    lm: &'m dyn CausalLm,
    /// Width of the target's logits: draft tokens at or past it end the draft.
    target_vocab: usize,
}

/// One slot's draft cache and the tokens it holds.
pub struct DraftSlot {
    cache: KvCache,
    cached: Vec<u32>,
}

impl<'m> DraftModel<'m> {
    /// Drafts with `lm` for a target whose logits are `target_vocab` wide.
    pub fn new(lm: &'m dyn CausalLm, target_vocab: usize) -> Self {
        DraftModel { lm, target_vocab }
    }

    /// An empty draft cache of `ctx` positions for one slot.
    pub fn new_slot(&self, ctx: usize) -> DraftSlot {
        DraftSlot {
            cache: self.lm.new_cache(ctx),
            cached: Vec::new(),
        }
    }

    /// Up to `max` tokens greedily drafted after `context` (the sequence so far, its last
    /// token not yet run by the target). The slot's cache is rewound to the prefix it shares
    /// with `context` and fed the rest; afterwards it holds `context` and every drafted token
    /// but the last.
    ///
    /// # Errors
    /// A forward pass of the draft failed (the slot's cache is then emptied).
    pub fn draft(&self, slot: &mut DraftSlot, context: &[u32], max: usize) -> Result<Vec<u32>> {
        let capacity = slot.cache.capacity();
        let max = max.min(capacity.saturating_sub(context.len()) + 1);
        if max == 0 || context.is_empty() || context.len() > capacity {
            return Ok(Vec::new());
        }
        let run = self.extend(slot, context, max);
        if run.is_err() {
            slot.cache.clear();
            slot.cached.clear();
        }
        run
    }

    fn extend(&self, slot: &mut DraftSlot, context: &[u32], max: usize) -> Result<Vec<u32>> {
        let shared = slot
            .cached
            .iter()
            .zip(context)
            .take_while(|(a, b)| a == b)
            .count();
        // At least one token runs, to give logits.
        slot.cache.truncate(shared.min(context.len() - 1));
        let kept = slot.cache.len();
        slot.cached.truncate(kept);
        let mut logits = prefill(
            self.lm,
            &mut slot.cache,
            &context[kept..],
            CATCH_UP_CHUNK,
            false,
        )?;
        slot.cached.extend_from_slice(&context[kept..]);
        let mut draft = Vec::with_capacity(max);
        loop {
            let id = argmax(&logits);
            if id as usize >= self.target_vocab {
                break;
            }
            draft.push(id);
            if draft.len() == max {
                break;
            }
            logits = self.lm.forward(&[id], &mut slot.cache, false)?;
            slot.cached.push(id);
        }
        Ok(draft)
    }
}
