//! Model families, each composed from the blocks in [`crate::nn`].
//!
//! Every family implements [`CausalLm::forward_batch`]: several sequences, each with its own KV
//! cache, run in one pass so each weight matrix is read once for all of them (continuous
//! batching); [`CausalLm::forward`] is the one-sequence case.

pub mod batch;
pub mod gemma;
pub mod llama;
pub mod qwen35;

pub use batch::{SeqBatch, SeqSpan};

use crate::config::{Arch, ConfigSource, ModelConfig};
use crate::error::{LoadError, Result};
use crate::loader::{Naming, TensorStore};
use crate::nn::KvCache;

/// A decoder-only language model.
pub trait CausalLm: Send + Sync {
    /// The model's configuration.
    fn config(&self) -> &ModelConfig;

    /// An empty KV cache for one sequence of at most `capacity` positions.
    fn new_cache(&self, capacity: usize) -> KvCache;

    /// Runs every sequence of `batch` (each `tokens` at positions `cache.len() ..`, appended to
    /// its cache) in one pass. Returns, per sequence, its logits `[n, vocab]`: of every new
    /// position when `all_logits`, else of the last one (`n = 1`).
    fn forward_batch(&self, batch: &mut [SeqBatch<'_>]) -> Result<Vec<Vec<f32>>>;

    /// One sequence: `tokens` at positions `cache.len() ..`; logits of every new position when
    /// `all_logits`, else of the last one.
    fn forward(&self, tokens: &[u32], cache: &mut KvCache, all_logits: bool) -> Result<Vec<f32>> {
        let mut batch = [SeqBatch {
            tokens,
            cache,
            all_logits,
        }];
        Ok(self.forward_batch(&mut batch)?.pop().unwrap_or_default())
    }
}

/// Builds the model named by `cfg.arch` from `store`; `src` gives family-specific keys.
pub fn load(
    cfg: &ModelConfig,
    store: &dyn TensorStore,
    naming: Naming,
    src: &ConfigSource<'_>,
) -> Result<Box<dyn CausalLm>, LoadError> {
    Ok(match cfg.arch {
        Arch::Llama | Arch::Qwen2 | Arch::Qwen3 => {
            Box::new(llama::Llama::load(cfg, store, naming, src)?)
        }
        Arch::Qwen35 | Arch::Qwen35Moe => Box::new(qwen35::Qwen35::load(cfg, store, naming, src)?),
        Arch::Gemma3 => Box::new(gemma::gemma3::Gemma3::load(cfg, store, naming, src)?),
        Arch::Gemma4 => Box::new(gemma::gemma4::Gemma4::load(cfg, store, naming, src)?),
    })
}
