//! Model families, each composed from the blocks in [`crate::nn`].

pub mod llama;

use crate::config::{Arch, ModelConfig};
use crate::error::{LoadError, Result};
use crate::loader::{Naming, TensorStore};
use crate::nn::KvCache;

/// A decoder-only language model.
pub trait CausalLm: Send + Sync {
    /// The model's configuration.
    fn config(&self) -> &ModelConfig;

    /// An empty KV cache for one sequence of at most `capacity` positions.
    fn new_cache(&self, capacity: usize) -> KvCache;

    /// Runs `tokens` at positions `cache.len() ..`, appending them to the cache. Returns the
    /// logits `[n, vocab]`: of every position when `all_logits`, else of the last one (`n = 1`).
    fn forward(&self, tokens: &[u32], cache: &mut KvCache, all_logits: bool) -> Result<Vec<f32>>;
}

/// Builds the model named by `cfg.arch` from `store`.
pub fn load(
    cfg: &ModelConfig,
    store: &dyn TensorStore,
    naming: Naming,
) -> Result<Box<dyn CausalLm>, LoadError> {
    Ok(match cfg.arch {
        Arch::Llama => Box::new(llama::Llama::load(cfg, store, naming)?),
    })
}
