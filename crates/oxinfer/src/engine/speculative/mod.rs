//! Speculative decoding: a sequence guesses the next few tokens cheaply (a *draft*) and the
//! target model checks them all in one forward pass of `1 + draft` rows; the accepted prefix
//! is kept, the KV cache is rolled back past the first rejected token. Drafts come from the
//! prompt and output so far ([`lookup`], `--lookup N`) or from a smaller model with the same
//! vocabulary ([`draft_model`], `--draft MODEL`) or from a draft head reading the target's own
//! cache and hidden state ([`draft_head`]: Gemma 4's `gemma4_assistant` drafters).
//!
//! Every draft is a deterministic guess, a point mass q, so the verification rule
//! ([`Sampler::verify_draft`](crate::engine::Sampler::verify_draft): accept with probability
//! min(1, p/q), else draw from the normalized residual max(0, p − q)) leaves the output
//! distributed exactly as plain sampling, and greedy output identical token for token.
//! The one generation loop ([`crate::engine::batch`]) runs it; this module only makes drafts.

pub mod draft_head;
pub mod draft_model;
pub mod lookup;

pub use draft_model::{
    check_draft_model, check_vocabularies, DraftModel, VocabMismatch, VocabSide,
};

/// How a sequence speculates (all zero: it does not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Speculation {
    /// Prompt lookup: draft up to this many tokens copied from the prompt and output so far
    /// after the latest earlier occurrence of the last n-gram (0: off).
    pub lookup: usize,
    /// Draft model: draft up to this many tokens with the generator's draft model, when it
    /// has one (0: off). Lookup is tried first when both are set.
    pub draft_max: usize,
    /// Drafts shorter than this are not verified (the step runs one token).
    pub draft_min: usize,
}

impl Speculation {
    /// Prompt lookup of up to `n` tokens.
    pub fn lookup(n: usize) -> Self {
        Speculation {
            lookup: n,
            ..Speculation::default()
        }
    }

    /// Whether any drafting is asked for.
    pub fn is_on(&self) -> bool {
        self.lookup > 0 || self.draft_max > 0
    }

    /// Most tokens one draft may hold.
    pub fn max_draft(&self) -> usize {
        self.lookup.max(self.draft_max)
    }
}

/// Counts of one sequence's speculation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DraftStats {
    /// Drafted tokens the target checked.
    pub drafted: usize,
    /// Of those, the ones it accepted.
    pub accepted: usize,
}

impl DraftStats {
    /// Accepted / drafted (0 when nothing was drafted).
    pub fn acceptance(&self) -> f64 {
        self.accepted as f64 / self.drafted.max(1) as f64
    }
}
