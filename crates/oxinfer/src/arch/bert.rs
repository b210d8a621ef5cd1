//! BERT-style encoder (BERT, MiniLM, the sentence-transformers BERT checkpoints): word +
//! absolute position + token-type embeddings → LayerNorm, then post-norm blocks of
//! bidirectional attention → residual → LayerNorm and GELU MLP → residual → LayerNorm.
//!
//! Several sequences of different lengths run in one pass without padding: their tokens are
//! concatenated, every projection runs once over all of them, and attention runs per sequence
//! (so no padding mask is needed and padded batches equal unpadded rows by construction).

use std::path::Path;

use serde_json::Value;

use super::encoder_attention::{encoder_attention, EncoderHeads};
use super::encoder_linear::EncoderLinear;
use crate::error::{Error, LoadError, Result};
use crate::loader::TensorStore;
use crate::nn::{Embedding, LayerNorm};

/// The activation of the MLP (`hidden_act`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncoderAct {
    /// `gelu`: exact GELU `0.5 · x · (1 + erf(x / √2))`.
    GeluErf,
    /// `gelu_new` / `gelu_pytorch_tanh`: the tanh approximation.
    GeluTanh,
    /// `relu`.
    Relu,
}

impl EncoderAct {
    fn apply(self, x: f32) -> f32 {
        match self {
            EncoderAct::GeluErf => {
                0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2))
            }
            EncoderAct::GeluTanh => oxinfer_kernels::act::GateAct::GeluTanh.apply(x),
            EncoderAct::Relu => x.max(0.0),
        }
    }
}

/// The fields of a BERT `config.json` the encoder needs.
#[derive(Clone, Debug, PartialEq)]
pub struct BertConfig {
    /// Rows of the word-embedding table.
    pub vocab_size: usize,
    /// Width of every hidden state.
    pub hidden_size: usize,
    /// Encoder blocks.
    pub n_layers: usize,
    /// Attention heads (`hidden_size / n_heads` wide each).
    pub n_heads: usize,
    /// Width of the MLP.
    pub intermediate_size: usize,
    /// Rows of the position table: the longest sequence, in tokens.
    pub max_positions: usize,
    /// Rows of the token-type table (0: the model has none).
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f32,
    /// MLP activation.
    pub act: EncoderAct,
}

impl BertConfig {
    /// Parses a BERT `config.json` (`model_type` `bert`; absolute positions only).
    pub fn from_json(path: &Path, v: &Value) -> Result<Self, LoadError> {
        let usize_field = |k: &str| -> Result<usize, LoadError> {
            v.get(k)
                .and_then(Value::as_u64)
                .map(|x| x as usize)
                .ok_or_else(|| LoadError::field(path, format!("missing integer field '{k}'")))
        };
        if let Some(t) = v.get("position_embedding_type").and_then(Value::as_str) {
            if t != "absolute" {
                return Err(LoadError::field(
                    path,
                    format!("position_embedding_type '{t}' is not supported (only 'absolute')"),
                ));
            }
        }
        let act = match v
            .get("hidden_act")
            .and_then(Value::as_str)
            .unwrap_or("gelu")
        {
            "gelu" => EncoderAct::GeluErf,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => EncoderAct::GeluTanh,
            "relu" => EncoderAct::Relu,
            other => {
                return Err(LoadError::field(
                    path,
                    format!("hidden_act '{other}' is not supported (gelu, gelu_new, relu)"),
                ))
            }
        };
        let cfg = BertConfig {
            vocab_size: usize_field("vocab_size")?,
            hidden_size: usize_field("hidden_size")?,
            n_layers: usize_field("num_hidden_layers")?,
            n_heads: usize_field("num_attention_heads")?,
            intermediate_size: usize_field("intermediate_size")?,
            max_positions: usize_field("max_position_embeddings")?,
            type_vocab_size: v
                .get("type_vocab_size")
                .and_then(Value::as_u64)
                .unwrap_or(0) as usize,
            layer_norm_eps: v
                .get("layer_norm_eps")
                .and_then(Value::as_f64)
                .unwrap_or(1e-12) as f32,
            act,
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
        Ok(cfg)
    }
}

/// One sequence of an encoder batch: token ids and their token types (segment ids).
#[derive(Clone, Copy, Debug)]
pub struct EncoderInput<'a> {
    /// Token ids, specials included (`[CLS] … [SEP]`).
    pub ids: &'a [u32],
    /// Token type of each id (empty: all 0).
    pub type_ids: &'a [u32],
}

struct Block {
    q: EncoderLinear,
    k: EncoderLinear,
    v: EncoderLinear,
    o: EncoderLinear,
    attn_norm: LayerNorm,
    up: EncoderLinear,
    down: EncoderLinear,
    ffn_norm: LayerNorm,
}

/// A loaded BERT encoder.
pub struct Bert {
    cfg: BertConfig,
    words: Embedding,
    positions: Embedding,
    types: Option<Embedding>,
    embed_norm: LayerNorm,
    blocks: Vec<Block>,
}

/// The prefix of the encoder's tensor names in `store`: `""` for `BertModel` checkpoints,
/// `"bert."` for task-head checkpoints (`BertForSequenceClassification`, ...).
pub fn tensor_prefix(store: &dyn TensorStore) -> &'static str {
    ["", "bert.", "model."]
        .into_iter()
        .find(|p| {
            store
                .get(&format!("{p}embeddings.word_embeddings.weight"))
                .is_some()
        })
        .unwrap_or("")
}

impl Bert {
    /// Loads the encoder's tensors (HF `BertModel` names under `prefix`) from `store`.
    pub fn load(
        cfg: &BertConfig,
        store: &dyn TensorStore,
        prefix: &str,
    ) -> Result<Self, LoadError> {
        let (d, ff) = (cfg.hidden_size, cfg.intermediate_size);
        let table = |name: &str, rows: usize| -> Result<Embedding, LoadError> {
            Embedding::new(
                store.require_shape(&format!("{prefix}embeddings.{name}.weight"), &[rows, d])?,
                1.0,
            )
        };
        let types = match cfg.type_vocab_size {
            0 => None,
            n => Some(table("token_type_embeddings", n)?),
        };
        let mut blocks = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let l = format!("{prefix}encoder.layer.{i}.");
            let linear = |part: &str, n_out: usize, n_in: usize| {
                EncoderLinear::load(store, &format!("{l}{part}.weight"), n_out, n_in)
            };
            let norm = |part: &str| {
                LayerNorm::load(
                    store,
                    &format!("{l}{part}.LayerNorm"),
                    d,
                    cfg.layer_norm_eps,
                )
            };
            blocks.push(Block {
                q: linear("attention.self.query", d, d)?,
                k: linear("attention.self.key", d, d)?,
                v: linear("attention.self.value", d, d)?,
                o: linear("attention.output.dense", d, d)?,
                attn_norm: norm("attention.output")?,
                up: linear("intermediate.dense", ff, d)?,
                down: linear("output.dense", d, ff)?,
                ffn_norm: norm("output")?,
            });
        }
        Ok(Bert {
            cfg: cfg.clone(),
            words: table("word_embeddings", cfg.vocab_size)?,
            positions: table("position_embeddings", cfg.max_positions)?,
            types,
            embed_norm: LayerNorm::load(
                store,
                &format!("{prefix}embeddings.LayerNorm"),
                d,
                cfg.layer_norm_eps,
            )?,
            blocks,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &BertConfig {
        &self.cfg
    }

    /// The last hidden states of every sequence of `batch`, concatenated: `[Σ tᵢ, hidden]`, the
    /// rows of sequence `i` after those of sequences `0 .. i`.
    pub fn forward(&self, batch: &[EncoderInput<'_>]) -> Result<Vec<f32>> {
        let d = self.cfg.hidden_size;
        let mut x = self.embed(batch)?;
        let total = x.len() / d;
        let lens: Vec<usize> = batch.iter().map(|s| s.ids.len()).collect();
        let heads = EncoderHeads {
            n_heads: self.cfg.n_heads,
            head_dim: d / self.cfg.n_heads,
            scale: 1.0 / ((d / self.cfg.n_heads) as f32).sqrt(),
        };
        for b in &self.blocks {
            let qkv = EncoderLinear::forward_shared(&[&b.q, &b.k, &b.v], &x, total);
            let mixed = encoder_attention(&qkv[0], &qkv[1], &qkv[2], &lens, &heads);
            residual_norm(&mut x, &b.o.forward(&mixed, total), &b.attn_norm);
            let mut h = b.up.forward(&x, total);
            self.activate(&mut h);
            residual_norm(&mut x, &b.down.forward(&h, total), &b.ffn_norm);
        }
        Ok(x)
    }

    /// Word + position + token-type embeddings, normalized: `[Σ tᵢ, hidden]`.
    fn embed(&self, batch: &[EncoderInput<'_>]) -> Result<Vec<f32>> {
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        let mut types = Vec::new();
        for (i, s) in batch.iter().enumerate() {
            if s.ids.len() > self.cfg.max_positions {
                return Err(Error::Request(format!(
                    "input {i} has {} tokens, more than the model's {} positions",
                    s.ids.len(),
                    self.cfg.max_positions
                )));
            }
            if !s.type_ids.is_empty() && s.type_ids.len() != s.ids.len() {
                return Err(Error::Request(format!(
                    "input {i}: {} token types for {} tokens",
                    s.type_ids.len(),
                    s.ids.len()
                )));
            }
            ids.extend_from_slice(s.ids);
            positions.extend(0..s.ids.len() as u32);
            if s.type_ids.is_empty() {
                types.extend(std::iter::repeat_n(0, s.ids.len()));
            } else {
                types.extend_from_slice(s.type_ids);
            }
        }
        let mut x = self.words.forward(&ids)?;
        let p = self.positions.forward(&positions)?;
        x.iter_mut().zip(&p).for_each(|(a, b)| *a += b);
        if let Some(table) = &self.types {
            let t = table.forward(&types).map_err(|_| {
                Error::Request(format!(
                    "token type ids must be below {} (type_vocab_size)",
                    self.cfg.type_vocab_size
                ))
            })?;
            x.iter_mut().zip(&t).for_each(|(a, b)| *a += b);
        }
        self.embed_norm.forward_inplace(&mut x);
        Ok(x)
    }

    /// The MLP activation over `h` in place, in parallel parts.
    fn activate(&self, h: &mut [f32]) {
        let act = self.cfg.act;
        const PART: usize = 16 * 1024;
        let mut parts: Vec<&mut [f32]> = h.chunks_mut(PART).collect();
        oxinfer_kernels::pool::for_each_mut(&mut parts, |_, part| {
            part.iter_mut().for_each(|v| *v = act.apply(*v));
        });
    }
}

/// `x ← norm(x + y)` (post-norm residual).
fn residual_norm(x: &mut [f32], y: &[f32], norm: &LayerNorm) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
    norm.forward_inplace(x);
}
