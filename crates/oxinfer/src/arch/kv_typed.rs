//! A [`CausalLm`] whose KV caches store keys and values in chosen [`KvTypes`]
//! (`--cache-type-k` / `--cache-type-v`), and what such a cache costs per position
//! ([`kv_footprint`]).

use super::{CausalLm, SeqBatch};
use crate::config::ModelConfig;
use crate::error::Result;
use crate::nn::KvCache;
use crate::plan::{KvTypes, Mixer, Plan};

/// `inner` with every new cache in `types`; everything else is `inner`'s.
pub struct KvTyped {
    inner: Box<dyn CausalLm>,
    types: KvTypes,
}

impl KvTyped {
    /// `inner` with caches of `types` (`inner` itself when both are f32, the default).
    pub fn wrap(inner: Box<dyn CausalLm>, types: KvTypes) -> Box<dyn CausalLm> {
        if types == KvTypes::default() {
            return inner;
        }
        Box::new(KvTyped { inner, types })
    }
}

impl CausalLm for KvTyped {
    fn config(&self) -> &ModelConfig {
        self.inner.config()
    }

    fn new_cache(&self, capacity: usize) -> KvCache {
        self.inner.new_cache(capacity).with_types(self.types)
    }

    fn plan(&self) -> Plan<'_> {
        self.inner.plan()
    }

    fn as_gemma4(&self) -> Option<&super::gemma::gemma4::Gemma4> {
        self.inner.as_gemma4()
    }

    fn media(&self) -> Option<&dyn super::multimodal::MediaTowers> {
        self.inner.media()
    }

    fn attach_mmproj(
        &mut self,
        mm: &super::mmproj::Mmproj,
    ) -> std::result::Result<(), crate::error::LoadError> {
        self.inner.attach_mmproj(mm)
    }

    fn forward_batch(&self, batch: &mut [SeqBatch<'_>]) -> Result<Vec<Vec<f32>>> {
        self.inner.forward_batch(batch)
    }

    fn forward_batch_argmax(&self, batch: &mut [SeqBatch<'_>]) -> Result<Vec<u32>> {
        self.inner.forward_batch_argmax(batch)
    }

    fn forward_scores(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        targets: &[u32],
    ) -> Result<Vec<crate::plan::RowScore>> {
        self.inner.forward_scores(tokens, cache, targets)
    }
}

/// Memory of a model's KV cache in given types.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvFootprint {
    /// Bytes each position adds to the layers that keep every position (keys and values).
    pub global_per_position: usize,
    /// Bytes each position takes in the sliding-window layers (until their windows fill).
    pub sliding_per_position: usize,
    /// Bytes of the whole cache holding `ctx` positions (sliding layers hold their window).
    pub total_at_ctx: usize,
}

/// What the KV cache of `plan`'s attention layers takes in `types` at `ctx` positions (layers
/// that read another layer's keys store nothing; recurrent state is not counted).
pub fn kv_footprint(plan: &Plan<'_>, types: KvTypes, ctx: usize) -> KvFootprint {
    let mut f = KvFootprint::default();
    for layer in &plan.layers {
        let Mixer::Attention { op, spec } = layer.mixer else {
            continue;
        };
        let parts = op.parts();
        if parts.kv_source.is_some() {
            continue;
        }
        let row = types.bytes_per_row(parts.n_kv_heads * parts.head_dim);
        match spec.window {
            Some(w) => {
                f.sliding_per_position += row;
                f.total_at_ctx += row * ctx.min(w);
            }
            None => {
                f.global_per_position += row;
                f.total_at_ctx += row * ctx;
            }
        }
    }
    f
}
