//! A generation session: one sequence's KV cache kept across calls, so a multi-turn chat only
//! runs the tokens that differ from what the cache already holds.

use super::generate::{generate, GenerateOptions, Generation, TokenEvent};
use super::Model;
use crate::error::Result;
use crate::nn::KvCache;

/// One sequence being generated, with its cache.
pub struct Session<'m> {
    model: &'m Model,
    cache: KvCache,
    /// The tokens whose keys and values the cache holds, in order.
    cached: Vec<u32>,
}

impl<'m> Session<'m> {
    pub(super) fn new(model: &'m Model, ctx: usize) -> Self {
        Session {
            model,
            cache: model.lm().new_cache(ctx),
            cached: Vec::new(),
        }
    }

    /// Positions the session can hold.
    pub fn capacity(&self) -> usize {
        self.cache.capacity()
    }

    /// Tokens currently cached.
    pub fn cached_tokens(&self) -> &[u32] {
        &self.cached
    }

    /// Forgets everything cached.
    pub fn clear(&mut self) {
        self.cache.clear();
        self.cached.clear();
    }

    /// Generates after the full token sequence `tokens` (e.g. a whole rendered conversation):
    /// the longest prefix already in the cache is reused, only the rest is run.
    pub fn generate(
        &mut self,
        tokens: &[u32],
        opts: &GenerateOptions,
        on_token: impl FnMut(&TokenEvent) -> bool,
    ) -> Result<Generation> {
        let mut common = self
            .cached
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count();
        // At least one token must run to produce logits.
        if common == tokens.len() {
            common = common.saturating_sub(1);
        }
        self.cache.truncate(common);
        // A cache that cannot rewind that far (sliding windows, recurrent state) empties itself.
        common = common.min(self.cache.len());
        self.cached.truncate(common);
        let result = generate(
            self.model.lm(),
            self.model.tokenizer(),
            &mut self.cache,
            &tokens[common..],
            opts,
            on_token,
        );
        match &result {
            Ok(g) => {
                self.cached.extend_from_slice(&tokens[common..]);
                self.cached.extend_from_slice(&g.tokens);
                self.cached.truncate(self.cache.len());
            }
            Err(_) => self.clear(),
        }
        result
    }
}
