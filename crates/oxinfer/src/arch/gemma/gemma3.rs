//! Gemma 3 text decoder (transformers `gemma3_text`, llama.cpp `gemma3`): sliding-window and
//! global attention layers, each with its own RoPE (local base vs global base and scaling),
//! per-head QK RMSNorm, norms before and after attention and MLP, tanh-GELU gated MLP,
//! embeddings scaled by √hidden, tied head, optional final logit soft-capping. With
//! `use_bidirectional_attention` (EmbeddingGemma) the same blocks run without the causal mask
//! ([`Plan::bidirectional`]), read by the embedder at their hidden states.

use super::{LayerKind, Names};
use crate::arch::CausalLm;
use crate::config::{ConfigSource, ModelConfig, RopeConfig, RopeScaling};
use crate::error::{LoadError, Result};
use crate::loader::{Naming, TensorStore};
use crate::nn::{
    AttentionShape, Embedding, GateAct, GatedMlp, KvCache, Linear, RmsNorm, Rope, SelfAttention,
};
use crate::plan::{AttnSpec, Ffn, Layer as PlanLayer, Mixer, Plan};

struct Layer {
    kind: LayerKind,
    attn_norm: RmsNorm,
    attn: SelfAttention,
    post_attn_norm: RmsNorm,
    ffn_norm: RmsNorm,
    mlp: GatedMlp,
    post_ffn_norm: RmsNorm,
}

/// Gemma 3's family-specific settings, read from GGUF metadata or `config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemma3Params {
    pub layer_kinds: Vec<LayerKind>,
    /// RoPE of the sliding layers (local base, never scaled).
    pub local_rope: RopeConfig,
    /// Attention scores are multiplied by `query_pre_attn_scalar^-1/2`.
    pub attn_scale: f32,
    /// Final logits become `cap · tanh(logits / cap)`. (`attn_logit_softcapping` is ignored:
    /// transformers' Gemma 3 attention never applies it, nor does llama.cpp.)
    pub final_softcap: Option<f32>,
    /// `use_bidirectional_attention` (EmbeddingGemma): no causal mask; a sliding layer's query
    /// sees the keys at distance `≤ sliding_window / 2` on both sides, as transformers defines it.
    pub bidirectional: bool,
}

impl Gemma3Params {
    /// Reads the settings; defaults are transformers' (`Gemma3TextConfig`) and llama.cpp's.
    pub fn read(cfg: &ModelConfig, src: &ConfigSource<'_>) -> Result<Self, LoadError> {
        super::check_activation(src)?;
        let layer_kinds = super::layer_kinds(src, cfg.n_layers, 6)?;
        // transformers 5: rope_parameters.sliding_attention; older: rope_local_base_freq;
        // llama.cpp fixes 10 000 (newer files may carry rope.freq_base_swa).
        let local_theta = super::json_rope_param(src, "sliding_attention", "rope_theta")
            .or(src.f64("rope.freq_base_swa", "rope_local_base_freq")?)
            .unwrap_or(10_000.0);
        let local_rope = RopeConfig {
            theta: local_theta as f32,
            dim: cfg.head_dim,
            style: cfg.rope.style,
            scaling: RopeScaling::None,
        };
        // llama.cpp: 1/sqrt(head_dim), except Gemma 3 27B (62 layers): 1/sqrt(hidden/heads).
        let default_scalar = if src.gguf().is_some() && cfg.n_layers == 62 {
            cfg.hidden_size / cfg.n_heads
        } else {
            cfg.head_dim
        };
        let scalar = src
            .f64("attention.query_pre_attn_scalar", "query_pre_attn_scalar")?
            .unwrap_or(default_scalar as f64);
        if !(scalar.is_finite() && scalar > 0.0) {
            return Err(LoadError::field(
                src.path(),
                format!("query_pre_attn_scalar {scalar} must be positive"),
            ));
        }
        Ok(Gemma3Params {
            layer_kinds,
            local_rope,
            attn_scale: scalar.powf(-0.5) as f32,
            final_softcap: super::softcap(
                src,
                "final_logit_softcapping",
                "final_logit_softcapping",
            )?,
            bidirectional: src
                .json("use_bidirectional_attention")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
        })
    }
}

/// A loaded Gemma 3 text model.
pub struct Gemma3 {
    cfg: ModelConfig,
    params: Gemma3Params,
    embed: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    head: Linear,
    local_rope: Rope,
    global_rope: Rope,
}

impl Gemma3 {
    /// Loads every tensor from `store` (borrowed from the mapped file).
    pub fn load(
        cfg: &ModelConfig,
        store: &dyn TensorStore,
        naming: Naming,
        src: &ConfigSource<'_>,
    ) -> Result<Self, LoadError> {
        let params = Gemma3Params::read(cfg, src)?;
        let names = Names::detect(store, naming);
        let (d, eps, offset) = (cfg.hidden_size, cfg.norm_eps, names.norm_unit_offset());
        let (embed, head) =
            super::embedding_and_head(store, &names, cfg.vocab_size, d, cfg.tie_embeddings)?;
        let shape = AttentionShape {
            dim: d,
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: cfg.head_dim,
            norm_eps: eps,
            qk_norm_unit_offset: offset,
            output_gate: false,
        };
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for (i, &kind) in params.layer_kinds.iter().enumerate() {
            let name = |part: &str| names.layer(i, part);
            let norm = |part: &str| RmsNorm::load(store, &name(part), d, eps, offset);
            let attn = SelfAttention::load(store, name, shape)?;
            if attn.q_norm.is_none() || attn.k_norm.is_none() {
                return Err(LoadError::tensor(
                    store.path(),
                    names.layer(i, "attn_q_norm"),
                    "missing (Gemma 3 has QK norms)",
                ));
            }
            layers.push(Layer {
                kind,
                attn_norm: norm("attn_norm")?,
                attn,
                post_attn_norm: norm("post_attention_norm")?,
                ffn_norm: norm("ffn_norm")?,
                mlp: GatedMlp::load(
                    store,
                    [&name("ffn_gate"), &name("ffn_up"), &name("ffn_down")],
                    d,
                    cfg.intermediate_size,
                    GateAct::GeluTanh,
                )?,
                post_ffn_norm: norm("post_ffw_norm")?,
            });
        }
        Ok(Gemma3 {
            cfg: cfg.clone(),
            embed,
            layers,
            norm: RmsNorm::load(store, &names.global("output_norm", ""), d, eps, offset)?,
            head,
            local_rope: Rope::new(&params.local_rope, None),
            global_rope: Rope::new(&cfg.rope, None),
            params,
        })
    }

    /// The family-specific settings in use.
    pub fn params(&self) -> &Gemma3Params {
        &self.params
    }

    /// How a layer of `kind` attends: RoPE table 0 is the global one, 1 the local one. A
    /// bidirectional sliding layer keeps `|q − k| < sliding_window / 2 + 1` (transformers'
    /// `Gemma3TextConfig` halves the window when `use_bidirectional_attention` is set).
    fn attn_spec(&self, kind: LayerKind) -> AttnSpec {
        let (rope, window) = match kind {
            LayerKind::Sliding if self.params.bidirectional => {
                (1, self.cfg.sliding_window.map(|w| w / 2 + 1))
            }
            LayerKind::Sliding => (1, self.cfg.sliding_window),
            LayerKind::Full => (0, None),
        };
        AttnSpec {
            rope,
            scale: self.params.attn_scale,
            window,
            softcap: None,
        }
    }
}

impl CausalLm for Gemma3 {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Sliding layers keep only about two windows of positions.
    fn new_cache(&self, capacity: usize) -> KvCache {
        let windows: Vec<Option<usize>> = self
            .layers
            .iter()
            .map(|l| self.attn_spec(l.kind).window)
            .collect();
        KvCache::new(
            self.cfg.n_layers,
            self.cfg.n_kv_heads * self.cfg.head_dim,
            capacity,
        )
        .with_windows(&windows)
    }

    fn plan(&self) -> Plan<'_> {
        let layers = self
            .layers
            .iter()
            .map(|l| {
                let mixer = Mixer::Attention {
                    op: &l.attn,
                    spec: self.attn_spec(l.kind),
                };
                let mut ffn = Ffn::mlp(&l.ffn_norm, &l.mlp);
                ffn.post_norm = Some(&l.post_ffn_norm);
                let mut layer = PlanLayer::new(&l.attn_norm, mixer, ffn);
                layer.mixer_post_norm = Some(&l.post_attn_norm);
                layer
            })
            .collect();
        let ropes = vec![&self.global_rope as _, &self.local_rope as _];
        let mut plan = Plan::new(&self.embed, layers, &self.norm, &self.head, ropes);
        plan.final_softcap = self.params.final_softcap;
        plan.bidirectional = self.params.bidirectional;
        plan
    }
}
