//! ModernBERT (transformers' `ModernBertModel`: modernbert-embed, gte-modernbert): token
//! embeddings → LayerNorm, then pre-norm blocks `x += Wo(attn(norm(x)))`, `x += mlp(norm(x))`
//! (the first block has no attention norm), then a final LayerNorm. Attention is bidirectional
//! with rotary positions (`rotate_half` layout over the whole head); layers alternate between
//! global attention (θ `rope_parameters.full_attention`, default 160000) and local attention
//! (θ of `sliding_attention`, default 10000) in which a query sees only the keys at distance
//! `≤ local_attention / 2`. The MLP is GeGLU: `Wi` `[2·ff, d]` gives `input ‖ gate`, and the
//! block returns `Wo(act(input) · gate)`. Norms and projections have no biases unless
//! `norm_bias` / `attention_bias` / `mlp_bias` say so.
//!
//! As [`super::bert`], several sequences run in one pass without padding (attention per
//! sequence), so a batch gives the rows of one-by-one runs.

use std::path::Path;

use serde_json::Value;

use super::bert::{json_usize, EncoderInput};
use crate::config::{RopeConfig, RopeScaling, RopeStyle};
use crate::error::{Error, LoadError, Result};
use crate::loader::TensorStore;
use crate::nn::encoder_act::EncoderAct;
use crate::nn::encoder_attention::EncoderHeads;
use crate::nn::encoder_linear::{split_rows, EncoderLinear};
use crate::nn::{Embedding, LayerNorm, Rope};
use crate::plan::encoder::{self, EncoderLayer, EncoderPlan, ExtraNorms, Norm, NormOrder, RopeOf};

/// The `model_type` of a ModernBERT `config.json`.
pub const MODEL_TYPE: &str = "modernbert";

/// The attention of one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerAttention {
    /// Every token of the sequence (`full_attention`).
    Global,
    /// Keys at distance `≤ window` from the query (`sliding_attention`).
    Local,
}

/// The fields of a ModernBERT `config.json` the encoder needs.
#[derive(Clone, Debug, PartialEq)]
pub struct ModernBertConfig {
    /// Rows of the token-embedding table.
    pub vocab_size: usize,
    /// Width of every hidden state.
    pub hidden_size: usize,
    /// Attention heads (`hidden_size / n_heads` wide each).
    pub n_heads: usize,
    /// Width of the GeGLU MLP (its `Wi` has twice as many rows).
    pub intermediate_size: usize,
    /// The longest sequence (`max_position_embeddings`).
    pub max_positions: usize,
    /// Attention of each layer, in order (`layer_types`, or every
    /// `global_attn_every_n_layers`-th layer global as older configs say).
    pub layers: Vec<LayerAttention>,
    /// Half the local window (`local_attention / 2`), in tokens.
    pub window: usize,
    /// RoPE θ of the global layers.
    pub global_theta: f32,
    /// RoPE θ of the local layers.
    pub local_theta: f32,
    /// LayerNorm epsilon (`norm_eps`).
    pub norm_eps: f32,
    /// MLP activation (`hidden_activation`).
    pub act: EncoderAct,
}

impl ModernBertConfig {
    /// Parses a ModernBERT `config.json` (`path`, parsed as `v`) as transformers 5 writes it
    /// (`layer_types`, `rope_parameters`) or as the hub's older files do
    /// (`global_attn_every_n_layers`, `global_rope_theta`, `local_rope_theta`).
    pub fn from_json(path: &Path, v: &Value) -> Result<Self, LoadError> {
        let usize_field = |k: &str| json_usize(path, v, k);
        let n_layers = usize_field("num_hidden_layers")?;
        let layers = match v.get("layer_types").filter(|t| !t.is_null()) {
            Some(types) => {
                let list = types
                    .as_array()
                    .ok_or_else(|| LoadError::field(path, "layer_types is not a list"))?;
                list.iter()
                    .map(|t| match t.as_str() {
                        Some("full_attention") => Ok(LayerAttention::Global),
                        Some("sliding_attention") => Ok(LayerAttention::Local),
                        _ => Err(LoadError::field(
                            path,
                            format!(
                                "layer type {t} is not supported (full_attention, sliding_attention)"
                            ),
                        )),
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            None => {
                let every = v
                    .get("global_attn_every_n_layers")
                    .and_then(Value::as_u64)
                    .unwrap_or(3)
                    .max(1) as usize;
                (0..n_layers)
                    .map(|i| match i % every {
                        0 => LayerAttention::Global,
                        _ => LayerAttention::Local,
                    })
                    .collect()
            }
        };
        if layers.len() != n_layers {
            return Err(LoadError::field(
                path,
                format!(
                    "layer_types has {} entries for {n_layers} layers",
                    layers.len()
                ),
            ));
        }
        let cfg = ModernBertConfig {
            vocab_size: usize_field("vocab_size")?,
            hidden_size: usize_field("hidden_size")?,
            n_heads: usize_field("num_attention_heads")?,
            intermediate_size: usize_field("intermediate_size")?,
            max_positions: v
                .get("max_position_embeddings")
                .and_then(Value::as_u64)
                .unwrap_or(8192) as usize,
            layers,
            window: v
                .get("local_attention")
                .and_then(Value::as_u64)
                .unwrap_or(128) as usize
                / 2,
            global_theta: rope_theta(path, v, "full_attention", "global_rope_theta", 160_000.0)?,
            local_theta: rope_theta(path, v, "sliding_attention", "local_rope_theta", 10_000.0)?,
            norm_eps: v.get("norm_eps").and_then(Value::as_f64).unwrap_or(1e-5) as f32,
            act: EncoderAct::from_name(
                path,
                v.get("hidden_activation")
                    .and_then(Value::as_str)
                    .unwrap_or("gelu"),
            )?,
        };
        if cfg.n_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.n_heads) {
            return Err(LoadError::field(
                path,
                format!(
                    "hidden_size {} is not a multiple of num_attention_heads {}",
                    cfg.hidden_size, cfg.n_heads
                ),
            ));
        }
        if cfg.max_positions == 0 {
            return Err(LoadError::field(
                path,
                "max_position_embeddings 0 leaves no position for a token",
            ));
        }
        Ok(cfg)
    }

    /// Width of one head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.n_heads
    }
}

/// θ of the `kind` layers: `rope_parameters[kind].rope_theta` (transformers 5), else the older
/// top-level `legacy` key, else `default`; only the default RoPE type is read.
fn rope_theta(
    path: &Path,
    v: &Value,
    kind: &str,
    legacy: &str,
    default: f64,
) -> Result<f32, LoadError> {
    let params = v
        .get("rope_parameters")
        .and_then(|p| p.get(kind))
        .filter(|p| !p.is_null());
    if let Some(t) = params
        .and_then(|p| p.get("rope_type"))
        .and_then(Value::as_str)
    {
        if t != "default" {
            return Err(LoadError::field(
                path,
                format!("rope_type '{t}' of {kind} is not supported for modernbert (default only)"),
            ));
        }
    }
    Ok(params
        .and_then(|p| p.get("rope_theta"))
        .or_else(|| v.get(legacy))
        .and_then(Value::as_f64)
        .unwrap_or(default) as f32)
}

/// `{stem}.weight` (and `{stem}.bias` when stored, else zeros) of width `d`.
fn layer_norm(
    store: &dyn TensorStore,
    stem: &str,
    d: usize,
    eps: f32,
) -> Result<LayerNorm, LoadError> {
    let weight = store
        .require_shape(&format!("{stem}.weight"), &[d])?
        .to_f32()?;
    let bias = match store.get(&format!("{stem}.bias")) {
        Some(_) => store
            .require_shape(&format!("{stem}.bias"), &[d])?
            .to_f32()?,
        None => vec![0.0; d],
    };
    Ok(LayerNorm { weight, bias, eps })
}

struct Block {
    /// None in the first block (transformers' `nn.Identity`).
    attn_norm: Option<LayerNorm>,
    qkv: [EncoderLinear; 3],
    o: EncoderLinear,
    attention: LayerAttention,
    mlp_norm: LayerNorm,
    /// `Wi`'s first half (activated) and second half (the gate it multiplies; the plan's
    /// `up`).
    input: EncoderLinear,
    gate: EncoderLinear,
    out: EncoderLinear,
}

/// A loaded ModernBERT encoder.
pub struct ModernBert {
    cfg: ModernBertConfig,
    words: Embedding,
    embed_norm: LayerNorm,
    blocks: Vec<Block>,
    final_norm: LayerNorm,
    global_rope: Rope,
    local_rope: Rope,
}

/// The prefix of the encoder's tensor names in `store`: `""` for `ModernBertModel` saves,
/// `"model."` for task-head checkpoints (`ModernBertForMaskedLM`, ...).
pub fn tensor_prefix(store: &dyn TensorStore) -> &'static str {
    if store
        .get("model.embeddings.tok_embeddings.weight")
        .is_some()
    {
        "model."
    } else {
        ""
    }
}

impl ModernBert {
    /// Loads the encoder's tensors (transformers' `ModernBertModel` names under `prefix`) from
    /// `store`.
    pub fn load(
        cfg: &ModernBertConfig,
        store: &dyn TensorStore,
        prefix: &str,
    ) -> Result<Self, LoadError> {
        let (d, ff, eps) = (cfg.hidden_size, cfg.intermediate_size, cfg.norm_eps);
        let mut blocks = Vec::with_capacity(cfg.layers.len());
        for (i, &attention) in cfg.layers.iter().enumerate() {
            let stem = format!("{prefix}layers.{i}.");
            let linear = |part: &str, n_out: usize, n_in: usize| {
                EncoderLinear::load(store, &format!("{stem}{part}.weight"), n_out, n_in)
            };
            let fused = |part: &str| -> Result<(), LoadError> {
                match store.get(&format!("{stem}{part}.bias")) {
                    Some(_) => Err(LoadError::tensor(
                        store.path(),
                        format!("{stem}{part}.bias"),
                        "a bias on a fused projection is not supported",
                    )),
                    None => Ok(()),
                }
            };
            fused("attn.Wqkv")?;
            fused("mlp.Wi")?;
            let [input, gate] = split_rows(store, &format!("{stem}mlp.Wi.weight"), [ff, ff], d)?;
            let attn_norm = format!("{stem}attn_norm");
            blocks.push(Block {
                attn_norm: match store.get(&format!("{attn_norm}.weight")) {
                    Some(_) => Some(layer_norm(store, &attn_norm, d, eps)?),
                    None if i == 0 => None,
                    None => {
                        return Err(LoadError::tensor(
                            store.path(),
                            format!("{attn_norm}.weight"),
                            "missing (only the first layer has no attention norm)",
                        ))
                    }
                },
                qkv: split_rows(store, &format!("{stem}attn.Wqkv.weight"), [d; 3], d)?,
                o: linear("attn.Wo", d, d)?,
                attention,
                mlp_norm: layer_norm(store, &format!("{stem}mlp_norm"), d, eps)?,
                input,
                gate,
                out: linear("mlp.Wo", d, ff)?,
            });
        }
        let rope = |theta: f32| {
            Rope::new(
                &RopeConfig {
                    theta,
                    dim: cfg.head_dim(),
                    style: RopeStyle::Half,
                    scaling: RopeScaling::None,
                },
                None,
            )
        };
        Ok(ModernBert {
            cfg: cfg.clone(),
            words: Embedding::new(
                store.require_shape(
                    &format!("{prefix}embeddings.tok_embeddings.weight"),
                    &[cfg.vocab_size, d],
                )?,
                1.0,
            )?,
            embed_norm: layer_norm(store, &format!("{prefix}embeddings.norm"), d, eps)?,
            blocks,
            final_norm: layer_norm(store, &format!("{prefix}final_norm"), d, eps)?,
            global_rope: rope(cfg.global_theta),
            local_rope: rope(cfg.local_theta),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ModernBertConfig {
        &self.cfg
    }

    /// The last hidden states (after the final norm) of every sequence of `batch`,
    /// concatenated: `[Σ tᵢ, hidden]`, the rows of sequence `i` after those of sequences
    /// `0 .. i`. Token types are ignored (ModernBERT has none).
    pub fn forward(&self, batch: &[EncoderInput<'_>]) -> Result<Vec<f32>> {
        let d = self.cfg.hidden_size;
        let mut ids = Vec::new();
        for (i, s) in batch.iter().enumerate() {
            if s.ids.len() > self.cfg.max_positions {
                return Err(Error::Request(format!(
                    "input {i} has {} tokens, more than the model's {} positions",
                    s.ids.len(),
                    self.cfg.max_positions
                )));
            }
            ids.extend_from_slice(s.ids);
        }
        let lens: Vec<usize> = batch.iter().map(|s| s.ids.len()).collect();
        let mut x = self.words.forward(&ids)?;
        self.embed_norm.forward_inplace(&mut x);
        let (global, local) = (|_| &self.global_rope, |_| &self.local_rope);
        let layers = self
            .blocks
            .iter()
            .map(|b| {
                let (rope_of, window): (RopeOf<'_>, _) = match b.attention {
                    LayerAttention::Global => (RopeOf::Positions(&global), None),
                    LayerAttention::Local => (RopeOf::Positions(&local), Some(self.cfg.window)),
                };
                EncoderLayer {
                    q: &b.qkv[0],
                    k: &b.qkv[1],
                    v: &b.qkv[2],
                    o: &b.o,
                    attn_norm: b.attn_norm.as_ref().map(Norm::from),
                    window,
                    rope_of: Some(rope_of),
                    // GeGLU: `Wi`'s first half is activated and multiplies the second.
                    gate: Some(&b.input),
                    up: &b.gate,
                    down: &b.out,
                    ffn_norm: (&b.mlp_norm).into(),
                    extra_norms: ExtraNorms::default(),
                }
            })
            .collect();
        let head_dim = self.cfg.head_dim();
        let plan = EncoderPlan {
            layers,
            order: NormOrder::Pre {
                final_norm: Some((&self.final_norm).into()),
            },
            heads: EncoderHeads {
                n_heads: self.cfg.n_heads,
                n_kv_heads: self.cfg.n_heads,
                head_dim,
                scale: 1.0 / (head_dim as f32).sqrt(),
                window: None,
            },
            act: self.cfg.act,
            dim: d,
        };
        let x = encoder::run(&plan, x, &lens)?;
        debug_assert_eq!(x.len(), ids.len() * d);
        Ok(x)
    }
}
