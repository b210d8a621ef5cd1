//! Llama-family decoder (Llama 2/3, SmolLM, Mistral-style, Qwen2, Qwen3): pre-norm blocks of
//! RMSNorm → GQA attention with RoPE → residual, RMSNorm → SwiGLU MLP → residual; final RMSNorm
//! and an output head (tied to the embedding or not). Qwen2's q/k/v biases and Qwen3's per-head
//! QK norms are loaded when the checkpoint has them (see [`SelfAttention`]).

use super::CausalLm;
use crate::config::{Arch, ConfigSource, ModelConfig};
use crate::error::{LoadError, Result};
use crate::loader::{Naming, TensorStore};
use crate::nn::{
    AttentionShape, Embedding, GateAct, GatedMlp, KvCache, Linear, RmsNorm, Rope, SelfAttention,
};
use crate::plan::{AttnSpec, Ffn, Layer, Mixer, Plan};

struct Block {
    attn_norm: RmsNorm,
    attn: SelfAttention,
    ffn_norm: RmsNorm,
    mlp: GatedMlp,
}

/// A loaded Llama-family model.
pub struct Llama {
    cfg: ModelConfig,
    embed: Embedding,
    blocks: Vec<Block>,
    norm: RmsNorm,
    head: Linear,
    rope: Rope,
    /// Sliding attention window of each layer (`None`: full attention).
    windows: Vec<Option<usize>>,
}

/// Each layer's attention window. `config.json` may name the layer types (`layer_types`:
/// `sliding_attention` / `full_attention`); Qwen2/Qwen3 configs without them slide only on the
/// layers at and above `max_window_layers` (transformers' rule, default 28); otherwise the
/// configured window (if any) applies to every layer, as in Mistral-style models and GGUF files.
fn layer_windows(
    cfg: &ModelConfig,
    src: &ConfigSource<'_>,
) -> Result<Vec<Option<usize>>, LoadError> {
    let Some(window) = cfg.sliding_window else {
        return Ok(vec![None; cfg.n_layers]);
    };
    if let Some(types) = src.json("layer_types").and_then(|v| v.as_array()) {
        if types.len() != cfg.n_layers {
            return Err(LoadError::field(
                src.path(),
                format!(
                    "layer_types has {} entries for {} layers",
                    types.len(),
                    cfg.n_layers
                ),
            ));
        }
        return types
            .iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => Ok(Some(window)),
                Some("full_attention") => Ok(None),
                _ => Err(LoadError::field(
                    src.path(),
                    format!("unknown layer type {t}"),
                )),
            })
            .collect();
    }
    let from = match (cfg.arch, src) {
        (Arch::Qwen2 | Arch::Qwen3, ConfigSource::Json { .. }) => {
            src.usize("", "max_window_layers")?.unwrap_or(28)
        }
        _ => 0,
    };
    Ok((0..cfg.n_layers)
        .map(|i| (i >= from).then_some(window))
        .collect())
}

impl Llama {
    /// Loads every tensor of the model from `store` (borrowed from the mapped file); `src` gives
    /// the per-layer attention pattern.
    pub fn load(
        cfg: &ModelConfig,
        store: &dyn TensorStore,
        naming: Naming,
        src: &ConfigSource<'_>,
    ) -> Result<Self, LoadError> {
        let (d, hd) = (cfg.hidden_size, cfg.head_dim);
        let (embed, head) = super::embedding_and_head(
            store,
            &naming.global("token_embd"),
            &naming.global("output"),
            [cfg.vocab_size, d],
            cfg.tie_embeddings,
            1.0,
        )?;
        let freq_factors = match store.get("rope_freqs.weight") {
            Some(t) => Some(t?.to_f32()?),
            None => None,
        };
        if let Some(f) = &freq_factors {
            if f.len() != cfg.rope.dim / 2 {
                return Err(LoadError::tensor(
                    store.path(),
                    "rope_freqs.weight",
                    format!("{} factors, expected {}", f.len(), cfg.rope.dim / 2),
                ));
            }
        }
        let rope = Rope::new(&cfg.rope, freq_factors.as_deref());
        let attn_shape = AttentionShape {
            dim: d,
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: hd,
            norm_eps: cfg.norm_eps,
            qk_norm_unit_offset: false,
            output_gate: false,
        };
        let mut blocks = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let name = |part: &str| naming.layer(i, part);
            blocks.push(Block {
                attn_norm: RmsNorm::load(store, &name("attn_norm"), d, cfg.norm_eps, false)?,
                attn: SelfAttention::load(store, name, attn_shape)?,
                ffn_norm: RmsNorm::load(store, &name("ffn_norm"), d, cfg.norm_eps, false)?,
                mlp: GatedMlp::load(
                    store,
                    [&name("ffn_gate"), &name("ffn_up"), &name("ffn_down")],
                    d,
                    cfg.intermediate_size,
                    GateAct::Silu,
                )?,
            });
        }
        Ok(Llama {
            cfg: cfg.clone(),
            embed,
            blocks,
            norm: RmsNorm::load(store, &naming.global("output_norm"), d, cfg.norm_eps, false)?,
            head,
            rope,
            windows: layer_windows(cfg, src)?,
        })
    }
}

impl CausalLm for Llama {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn new_cache(&self, capacity: usize) -> KvCache {
        KvCache::new(
            self.cfg.n_layers,
            self.cfg.n_kv_heads * self.cfg.head_dim,
            capacity,
        )
        .with_windows(&self.windows)
    }

    fn plan(&self) -> Plan<'_> {
        let scale = 1.0 / (self.cfg.head_dim as f32).sqrt();
        let layers = self
            .blocks
            .iter()
            .zip(&self.windows)
            .map(|(b, &window)| {
                let spec = AttnSpec {
                    rope: 0,
                    scale,
                    window,
                    softcap: None,
                };
                Layer::new(
                    &b.attn_norm,
                    Mixer::Attention { op: &b.attn, spec },
                    Ffn::mlp(&b.ffn_norm, &b.mlp),
                )
            })
            .collect();
        Plan::new(
            &self.embed,
            layers,
            &self.norm,
            &self.head,
            vec![&self.rope],
        )
    }
}
