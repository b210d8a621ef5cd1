//! BERT-style encoders: word + position + token-type embeddings → LayerNorm, then post-norm
//! blocks of bidirectional attention → residual → LayerNorm and MLP → residual → LayerNorm.
//! Three families share that shape ([`PositionIds`] says how each places tokens):
//! * BERT (MiniLM, the sentence-transformers BERT checkpoints): absolute positions from 0,
//!   biased projections, GELU MLP;
//! * XLM-RoBERTa (BGE-M3, multilingual-e5, bge-reranker-v2-m3): the same, with positions
//!   numbered from `pad_token_id + 1` and one token type;
//! * NomicBERT (nomic-embed-text, transformers' `NomicBertModel`): no position table but
//!   rotary embeddings on queries and keys, no biases, a gated MLP `down(act(gate(x)) · up(x))`.
//!
//! Several sequences of different lengths run in one pass without padding: their tokens are
//! concatenated, every projection runs once over all of them, and attention runs per sequence
//! (so no padding mask is needed and padded batches equal unpadded rows by construction).

use std::path::Path;

use serde_json::Value;

use crate::config::{RopeConfig, RopeScaling, RopeStyle};
use crate::error::{Error, LoadError, Result};
use crate::loader::TensorStore;
use crate::nn::encoder_act::EncoderAct;
use crate::nn::encoder_attention::EncoderHeads;
use crate::nn::encoder_linear::{split_rows, EncoderLinear};
use crate::nn::{Embedding, LayerNorm, Rope};
use crate::plan::encoder::{self, EncoderLayer, EncoderPlan, ExtraNorms, NormOrder, RopeOf};

/// The non-negative integer field `key` of the JSON object `v` read from `path`, or an error
/// naming the field and the file (the encoder configs' and sentence-transformers folders' reader).
pub(crate) fn json_usize(path: &Path, v: &Value, key: &str) -> Result<usize, LoadError> {
    v.get(key)
        .and_then(Value::as_u64)
        .map(|x| x as usize)
        .ok_or_else(|| LoadError::field(path, format!("missing integer field '{key}'")))
}

/// The `model_type`s of `config.json` this encoder reads.
pub const ENCODER_MODEL_TYPES: [&str; 3] = ["bert", "xlm-roberta", "nomic_bert"];

/// How position ids are numbered.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PositionIds {
    /// BERT: `0, 1, 2, …`.
    FromZero,
    /// RoBERTa / XLM-RoBERTa (transformers' `create_position_ids_from_input_ids`): a token
    /// equal to `pad` (`pad_token_id`, the `padding_idx`) has position `pad`; every other
    /// token has `pad + 1 +` the number of non-pad tokens before it.
    AfterPad {
        /// `pad_token_id`.
        pad: u32,
    },
    /// NomicBERT: no position table; queries and keys are rotated (transformers'
    /// `rotate_half` layout over the whole head) at positions `0, 1, 2, …`.
    Rotary {
        /// `rope_theta`.
        theta: f32,
        /// Dynamic NTK scaling of `theta` for sequences longer than the model was trained on
        /// (none: `theta` at every length).
        ntk: Option<DynamicNtk>,
    },
}

/// Dynamic NTK scaling of a rotary base (transformers' `rope_type: "dynamic"`, nomic's
/// `rotary_scaling_factor`): a sequence of `n > original` tokens is rotated with the base
/// `θ · (factor · n / original − (factor − 1))^(d / (d − 2))` (`d` the rotated width), a shorter
/// one with `θ`. Decided per sequence, so a text's embedding does not depend on the other texts
/// of its batch (transformers decides by the padded batch's length).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DynamicNtk {
    /// `factor` (`rotary_scaling_factor`).
    pub factor: f32,
    /// The trained length in tokens (`max_position_embeddings`, nomic's `max_trained_positions`).
    pub original: usize,
}

impl DynamicNtk {
    /// The rotary base for a sequence of `n` tokens with base `theta` over `dim` rotated
    /// dimensions.
    pub fn theta(&self, theta: f32, n: usize, dim: usize) -> f32 {
        if n <= self.original || dim <= 2 {
            return theta;
        }
        let f = f64::from(self.factor);
        let stretch = f * n as f64 / self.original as f64 - (f - 1.0);
        (f64::from(theta) * stretch.powf(dim as f64 / (dim as f64 - 2.0))) as f32
    }
}

impl PositionIds {
    /// Positions of `ids`, appended to `out`.
    fn extend(self, ids: &[u32], out: &mut Vec<u32>) {
        match self {
            PositionIds::FromZero | PositionIds::Rotary { .. } => out.extend(0..ids.len() as u32),
            PositionIds::AfterPad { pad } => {
                let mut seen = 0;
                out.extend(ids.iter().map(|&id| {
                    if id == pad {
                        pad
                    } else {
                        seen += 1;
                        pad + seen
                    }
                }));
            }
        }
    }

    /// Rows of the position table an input of `n` tokens may need beyond `n` (the offset of
    /// the first position).
    fn offset(self) -> usize {
        match self {
            PositionIds::FromZero | PositionIds::Rotary { .. } => 0,
            PositionIds::AfterPad { pad } => pad as usize + 1,
        }
    }
}

/// The fields of a BERT, XLM-RoBERTa or NomicBERT `config.json` the encoder needs.
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
    /// Rows of the position table (`max_position_embeddings`); for rotary positions, the
    /// longest sequence.
    pub max_positions: usize,
    /// How positions are numbered (by `model_type`).
    pub positions: PositionIds,
    /// Rows of the token-type table (0: the model has none).
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f32,
    /// MLP activation.
    pub act: EncoderAct,
}

impl BertConfig {
    /// Parses a BERT, XLM-RoBERTa or NomicBERT `config.json` (`model_type` `bert`,
    /// `xlm-roberta` or `nomic_bert` as transformers writes them, see [`ENCODER_MODEL_TYPES`];
    /// a `nomic_bert` config may also use nomic's remote-code names, [`NOMIC_ALIASES`]).
    pub fn from_json(path: &Path, v: &Value) -> Result<Self, LoadError> {
        if let Some(t) = v.get("position_embedding_type").and_then(Value::as_str) {
            if t != "absolute" {
                return Err(LoadError::field(
                    path,
                    format!("position_embedding_type '{t}' is not supported (only 'absolute')"),
                ));
            }
        }
        let model_type = v
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or("bert");
        let nomic = model_type == "nomic_bert";
        // A field by transformers' name, or (NomicBERT) by nomic's.
        let get = |key: &str| -> Option<&Value> {
            let alias = NOMIC_ALIASES
                .iter()
                .find(|(native, _)| nomic && *native == key)
                .map(|&(_, remote)| remote);
            std::iter::once(key)
                .chain(alias)
                .find_map(|k| v.get(k).filter(|x| !x.is_null()))
        };
        let usize_field = |k: &str| {
            get(k)
                .and_then(Value::as_u64)
                .map(|x| x as usize)
                .ok_or_else(|| LoadError::field(path, format!("missing integer field '{k}'")))
        };
        let positions = match model_type {
            "bert" => PositionIds::FromZero,
            "xlm-roberta" => PositionIds::AfterPad {
                pad: v
                    .get("pad_token_id")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| {
                        LoadError::field(path, "xlm-roberta needs an integer 'pad_token_id'")
                    })? as u32,
            },
            "nomic_bert" => nomic_rotary(path, v)?,
            other => {
                return Err(LoadError::field(
                    path,
                    format!(
                        "model_type '{other}' is not an encoder (bert, xlm-roberta, nomic_bert)"
                    ),
                ))
            }
        };
        let act = match (v.get("hidden_act"), v.get("activation_function")) {
            (Some(Value::String(name)), _) => EncoderAct::from_name(path, name)?,
            (_, Some(Value::String(name))) if nomic => nomic_activation(path, name)?,
            _ if nomic => EncoderAct::Silu,
            _ => EncoderAct::GeluErf,
        };
        let hidden_size = usize_field("hidden_size")?;
        let max_positions = match positions {
            // nomic's `n_positions` (GPT-2's `max_position_embeddings`) is the longest input of
            // its remote code (8192 for nomic-embed-text-v1.5, trained at 2048); in
            // transformers' spelling, sentence-transformers stops at `max_position_embeddings`.
            PositionIds::Rotary { .. } => v
                .get("n_positions")
                .or_else(|| get("max_position_embeddings"))
                .and_then(Value::as_u64)
                .unwrap_or(2048) as usize,
            _ => usize_field("max_position_embeddings")?,
        };
        let cfg = BertConfig {
            vocab_size: usize_field("vocab_size")?,
            hidden_size,
            n_layers: usize_field("num_hidden_layers")?,
            n_heads: usize_field("num_attention_heads")?,
            intermediate_size: usize_field("intermediate_size")?,
            max_positions,
            positions,
            type_vocab_size: v
                .get("type_vocab_size")
                .and_then(Value::as_u64)
                .unwrap_or(0) as usize,
            layer_norm_eps: get("layer_norm_eps")
                .and_then(Value::as_f64)
                .unwrap_or(1e-12) as f32,
            act,
        };
        if let Some(hd) = v.get("head_dim").and_then(Value::as_u64) {
            if cfg.n_heads as u64 * hd != cfg.hidden_size as u64 {
                return Err(LoadError::field(
                    path,
                    format!("head_dim {hd} × {} heads is not hidden_size", cfg.n_heads),
                ));
            }
        }
        if cfg.n_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.n_heads) {
            return Err(LoadError::field(
                path,
                format!(
                    "hidden_size {} is not a multiple of num_attention_heads {}",
                    cfg.hidden_size, cfg.n_heads
                ),
            ));
        }
        if cfg.max_tokens() == 0 {
            return Err(LoadError::field(
                path,
                format!(
                    "max_position_embeddings {} leaves no position for a token",
                    cfg.max_positions
                ),
            ));
        }
        Ok(cfg)
    }

    /// The longest input the position table allows, in tokens.
    pub fn max_tokens(&self) -> usize {
        self.max_positions.saturating_sub(self.positions.offset())
    }
}

/// transformers' names of NomicBERT's fields and the names of nomic's remote-code
/// `NomicBertConfig` (a GPT-2 config; nomic-embed-text's hub `config.json` is written with them).
pub const NOMIC_ALIASES: [(&str, &str); 6] = [
    ("hidden_size", "n_embd"),
    ("num_hidden_layers", "n_layer"),
    ("num_attention_heads", "n_head"),
    ("intermediate_size", "n_inner"),
    ("layer_norm_eps", "layer_norm_epsilon"),
    ("max_position_embeddings", "max_trained_positions"),
];

/// The MLP activation of nomic's `activation_function`: `swiglu` (SiLU-gated) or `geglu`
/// (GELU-gated), the gated MLP whose `fc11` / `fc12` / `fc2` the loader reads.
fn nomic_activation(path: &Path, name: &str) -> Result<EncoderAct, LoadError> {
    match name {
        "swiglu" => Ok(EncoderAct::Silu),
        "geglu" => Ok(EncoderAct::GeluErf),
        other => Err(LoadError::field(
            path,
            format!(
                "activation_function '{other}' is not supported for nomic_bert (swiglu, geglu: \
                 the gated MLP)"
            ),
        )),
    }
}

/// NomicBERT's rotary positions: θ from `rope_parameters` (transformers 5), `rope_theta` or
/// nomic's `rotary_emb_base` (default 1000, as `NomicBertConfig`'s); dynamic NTK scaling from
/// `rope_type: "dynamic"` (its `factor`, over `max_position_embeddings`) or nomic's
/// `rotary_scaling_factor` (over `max_trained_positions`). Other RoPE types and nomic's
/// partial, interleaved or xPos rotations are refused, as are pre-norm and causal blocks.
fn nomic_rotary(path: &Path, v: &Value) -> Result<PositionIds, LoadError> {
    let bad = |what: String| Err(LoadError::field(path, what));
    let present = |k: &str| {
        v.get(k)
            .filter(|x| !x.is_null() && **x != Value::Bool(false))
    };
    if let Some(f) = v.get("rotary_emb_fraction").and_then(Value::as_f64) {
        if f != 1.0 {
            return bad(format!(
                "rotary_emb_fraction {f} is not supported (only 1.0: every dimension rotates)"
            ));
        }
    }
    for key in [
        "rotary_emb_interleaved",
        "rotary_emb_scale_base",
        "prenorm",
        "causal",
    ] {
        if let Some(x) = present(key) {
            return bad(format!("{key} {x} is not supported for nomic_bert"));
        }
    }
    let params = v.get("rope_parameters").filter(|p| !p.is_null());
    let num = |p: Option<&Value>, k: &str| p.and_then(|p| p.get(k)).and_then(Value::as_f64);
    let theta = num(params, "rope_theta")
        .or_else(|| num(Some(v), "rope_theta"))
        .or_else(|| num(Some(v), "rotary_emb_base"))
        .unwrap_or(1000.0) as f32;
    let trained = |key: &str| v.get(key).and_then(Value::as_u64).unwrap_or(2048) as usize;
    let ntk = match params
        .and_then(|p| p.get("rope_type"))
        .and_then(Value::as_str)
    {
        None | Some("default") => None,
        Some("dynamic") => Some(DynamicNtk {
            factor: num(params, "factor").ok_or_else(|| {
                LoadError::field(
                    path,
                    "rope_parameters: rope_type 'dynamic' needs a 'factor'",
                )
            })? as f32,
            original: num(params, "original_max_position_embeddings")
                .map_or_else(|| trained("max_position_embeddings"), |x| x as usize),
        }),
        Some(t) => {
            return bad(format!(
                "rope_type '{t}' is not supported for nomic_bert (default, dynamic)"
            ))
        }
    };
    let ntk = match (ntk, num(Some(v), "rotary_scaling_factor")) {
        (Some(n), _) => Some(n),
        (None, Some(factor)) => Some(DynamicNtk {
            factor: factor as f32,
            original: trained("max_trained_positions"),
        }),
        (None, None) => None,
    };
    if let Some(n) = ntk {
        if n.factor.is_nan() || n.factor < 1.0 || n.original == 0 {
            return bad(format!(
                "dynamic RoPE scaling needs factor ≥ 1 and a trained length > 0 (factor {}, length {})",
                n.factor, n.original
            ));
        }
    }
    Ok(PositionIds::Rotary { theta, ntk })
}

/// NomicBERT's rotation: transformers' `rotate_half` layout over the whole head of `dim`.
fn rotary_config(theta: f32, dim: usize) -> RopeConfig {
    RopeConfig {
        theta,
        dim,
        style: RopeStyle::Half,
        scaling: RopeScaling::None,
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
    /// The gate of a gated MLP (NomicBERT).
    gate: Option<EncoderLinear>,
    up: EncoderLinear,
    down: EncoderLinear,
    ffn_norm: LayerNorm,
}

/// Where a block's query, key and value projections are stored.
enum QkvNames {
    /// Three matrices `[d, d]` (with biases when present).
    Separate([&'static str; 3]),
    /// One `[3d, d]` matrix, query rows first, then key, then value (NomicBERT's `Wqkv`), no
    /// bias.
    Fused(&'static str),
}

/// The names of one block's tensors as the checkpoint stores them, under `stem` (matrices
/// `{stem}{part}.weight`; norms `{stem}{part}.weight` / `.bias`).
struct BlockNames {
    stem: String,
    qkv: QkvNames,
    o: &'static str,
    attn_norm: &'static str,
    gate: Option<&'static str>,
    up: &'static str,
    down: &'static str,
    ffn_norm: &'static str,
}

impl BlockNames {
    /// The names of block `i` of the family `positions` stands for, under `prefix`. NomicBERT
    /// files (the hub's, and transformers' saves of `NomicBertModel`) keep nomic's original
    /// names: `attn.Wqkv`, `attn.out_proj`, `norm1`, `mlp.fc11` (up), `mlp.fc12` (gate),
    /// `mlp.fc2` (down), `norm2`.
    fn of(positions: PositionIds, prefix: &str, i: usize) -> Self {
        match positions {
            PositionIds::Rotary { .. } => BlockNames {
                stem: format!("{prefix}encoder.layers.{i}."),
                qkv: QkvNames::Fused("attn.Wqkv"),
                o: "attn.out_proj",
                attn_norm: "norm1",
                gate: Some("mlp.fc12"),
                up: "mlp.fc11",
                down: "mlp.fc2",
                ffn_norm: "norm2",
            },
            _ => BlockNames {
                stem: format!("{prefix}encoder.layer.{i}."),
                qkv: QkvNames::Separate([
                    "attention.self.query",
                    "attention.self.key",
                    "attention.self.value",
                ]),
                o: "attention.output.dense",
                attn_norm: "attention.output.LayerNorm",
                gate: None,
                up: "intermediate.dense",
                down: "output.dense",
                ffn_norm: "output.LayerNorm",
            },
        }
    }

    /// Loads the block from `store`.
    fn load(&self, store: &dyn TensorStore, cfg: &BertConfig) -> Result<Block, LoadError> {
        let (d, ff) = (cfg.hidden_size, cfg.intermediate_size);
        let stem = &self.stem;
        let linear = |part: &str, n_out: usize, n_in: usize| {
            EncoderLinear::load(store, &format!("{stem}{part}.weight"), n_out, n_in)
        };
        let norm =
            |part: &str| LayerNorm::load(store, &format!("{stem}{part}"), d, cfg.layer_norm_eps);
        let [q, k, v] = match self.qkv {
            QkvNames::Separate([q, k, v]) => [linear(q, d, d)?, linear(k, d, d)?, linear(v, d, d)?],
            QkvNames::Fused(part) => fused_qkv(store, &format!("{stem}{part}"), d)?,
        };
        Ok(Block {
            q,
            k,
            v,
            o: linear(self.o, d, d)?,
            attn_norm: norm(self.attn_norm)?,
            gate: self.gate.map(|g| linear(g, ff, d)).transpose()?,
            up: linear(self.up, ff, d)?,
            down: linear(self.down, d, ff)?,
            ffn_norm: norm(self.ffn_norm)?,
        })
    }
}

/// The query, key and value projections of the fused `{stem}.weight` (`[3d, d]`), each
/// borrowing its third of the rows.
fn fused_qkv(
    store: &dyn TensorStore,
    stem: &str,
    d: usize,
) -> Result<[EncoderLinear; 3], LoadError> {
    let bias = format!("{stem}.bias");
    if store.get(&bias).is_some() {
        return Err(LoadError::tensor(
            store.path(),
            bias,
            "a bias on the fused query/key/value projection is not supported",
        ));
    }
    let [q, k, v] = split_rows(store, &format!("{stem}.weight"), [d; 3], d)?;
    Ok([q, k, v])
}

/// A loaded BERT-style encoder.
pub struct Bert {
    cfg: BertConfig,
    words: Embedding,
    /// The absolute position table (none with rotary positions).
    positions: Option<Embedding>,
    /// Rotary embeddings of queries and keys (NomicBERT).
    rope: Option<Rope>,
    types: Option<Embedding>,
    embed_norm: LayerNorm,
    blocks: Vec<Block>,
}

/// The prefix of the encoder's tensor names in `store`: `""` for `BertModel` /
/// `XLMRobertaModel` / `NomicBertModel` checkpoints, `"bert."` / `"roberta."` /
/// `"nomic_bert."` for task-head checkpoints (`BertForSequenceClassification`,
/// `XLMRobertaForSequenceClassification`, ...).
pub fn tensor_prefix(store: &dyn TensorStore) -> &'static str {
    ["", "bert.", "roberta.", "nomic_bert.", "model."]
        .into_iter()
        .find(|p| {
            store
                .get(&format!("{p}embeddings.word_embeddings.weight"))
                .is_some()
        })
        .unwrap_or("")
}

impl Bert {
    /// Loads the encoder's tensors (transformers' `BertModel` / `XLMRobertaModel` /
    /// `NomicBertModel` names under `prefix`) from `store`.
    pub fn load(
        cfg: &BertConfig,
        store: &dyn TensorStore,
        prefix: &str,
    ) -> Result<Self, LoadError> {
        let d = cfg.hidden_size;
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
        let (positions, rope) = match cfg.positions {
            PositionIds::Rotary { theta, .. } => {
                let rope = rotary_config(theta, d / cfg.n_heads);
                (None, Some(Rope::new(&rope, None)))
            }
            _ => (Some(table("position_embeddings", cfg.max_positions)?), None),
        };
        let blocks = (0..cfg.n_layers)
            .map(|i| BlockNames::of(cfg.positions, prefix, i).load(store, cfg))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Bert {
            cfg: cfg.clone(),
            words: table("word_embeddings", cfg.vocab_size)?,
            positions,
            rope,
            types,
            embed_norm: LayerNorm::load(
                store,
                &match cfg.positions {
                    PositionIds::Rotary { .. } => format!("{prefix}emb_ln"),
                    _ => format!("{prefix}embeddings.LayerNorm"),
                },
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
        let x = self.embed(batch)?;
        let lens: Vec<usize> = batch.iter().map(|s| s.ids.len()).collect();
        let scaled = self.scaled_ropes(&lens);
        let rope_of = |n: usize| {
            let rope = self.rope.as_ref().expect("rotary encoders have a rope");
            scaled
                .iter()
                .find(|(len, _)| *len == n)
                .map_or(rope, |(_, r)| r)
        };
        let rope_of = self.rope.is_some().then_some(RopeOf::Positions(&rope_of));
        let layers = self
            .blocks
            .iter()
            .map(|b| EncoderLayer {
                q: &b.q,
                k: &b.k,
                v: &b.v,
                o: &b.o,
                attn_norm: Some((&b.attn_norm).into()),
                window: None,
                rope_of,
                gate: b.gate.as_ref(),
                up: &b.up,
                down: &b.down,
                ffn_norm: (&b.ffn_norm).into(),
                extra_norms: ExtraNorms::default(),
            })
            .collect();
        let plan = EncoderPlan {
            layers,
            order: NormOrder::Post,
            heads: EncoderHeads {
                n_heads: self.cfg.n_heads,
                n_kv_heads: self.cfg.n_heads,
                head_dim: d / self.cfg.n_heads,
                scale: 1.0 / ((d / self.cfg.n_heads) as f32).sqrt(),
                window: None,
            },
            act: self.cfg.act,
            dim: d,
        };
        encoder::run(&plan, x, &lens)
    }

    /// The rotations of the sequence lengths among `lens` that dynamic NTK scaling gives a
    /// base of their own (none without scaling), as (length, rotation).
    fn scaled_ropes(&self, lens: &[usize]) -> Vec<(usize, Rope)> {
        let PositionIds::Rotary {
            theta,
            ntk: Some(ntk),
        } = self.cfg.positions
        else {
            return Vec::new();
        };
        let dim = self.cfg.hidden_size / self.cfg.n_heads;
        let mut out: Vec<(usize, Rope)> = Vec::new();
        for &n in lens {
            if n > ntk.original && !out.iter().any(|(len, _)| *len == n) {
                let cfg = rotary_config(ntk.theta(theta, n, dim), dim);
                out.push((n, Rope::new(&cfg, None)));
            }
        }
        out
    }

    /// Word + position + token-type embeddings, normalized: `[Σ tᵢ, hidden]`.
    fn embed(&self, batch: &[EncoderInput<'_>]) -> Result<Vec<f32>> {
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        let mut types = Vec::new();
        for (i, s) in batch.iter().enumerate() {
            if s.ids.len() > self.cfg.max_tokens() {
                return Err(Error::Request(format!(
                    "input {i} has {} tokens, more than the model's {} positions",
                    s.ids.len(),
                    self.cfg.max_tokens()
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
            self.cfg.positions.extend(s.ids, &mut positions);
            if s.type_ids.is_empty() {
                types.extend(std::iter::repeat_n(0, s.ids.len()));
            } else {
                types.extend_from_slice(s.type_ids);
            }
        }
        let mut x = self.words.forward(&ids)?;
        if let Some(table) = &self.positions {
            let p = table.forward(&positions)?;
            x.iter_mut().zip(&p).for_each(|(a, b)| *a += b);
        }
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
}
