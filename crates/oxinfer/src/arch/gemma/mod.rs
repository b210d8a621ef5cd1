//! The Gemma family: what Gemma 3 and Gemma 4 share — tensor names in both spellings (with the
//! post-norms Llama lacks), the sliding/full layer pattern, `(1 + w)` norms (stored as `w` by
//! transformers, as `1 + w` by llama.cpp's converter), embedding scaling by √hidden, the tied
//! output head and logit soft-capping.

pub mod audio;
pub mod audio_attention;
pub mod audio_features;
pub mod clipped;
pub mod gemma3;
pub mod gemma4;
pub mod gemma4_assistant;
pub mod gemma4_block;
pub mod gemma4_config;
pub mod gemma4_media;
pub mod gemma4_mmproj;
pub mod image_processor;
pub mod vision;

use super::names::{hf_layer_part, GEMMA_LAYER};
use crate::config::ConfigSource;
use crate::error::LoadError;
use crate::loader::{Naming, TensorStore};
use crate::nn::{Embedding, Linear};
use serde_json::Value;

/// Whether a decoder layer attends through a sliding window or to every position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    Sliding,
    Full,
}

/// Tensor names of a Gemma checkpoint: GGUF, or transformers' text-only (`model.…`) and
/// multimodal (`model.language_model.…`, older `language_model.model.…`) spellings.
#[derive(Clone, Debug)]
pub struct Names {
    naming: Naming,
    /// Prefix of the decoder's tensors (`model.` for a text-only checkpoint).
    prefix: String,
    /// Name of an untied output head, when the checkpoint spells it.
    head: String,
}

impl Names {
    /// Detects the spelling from where the embedding table lies in `store`.
    pub fn detect(store: &dyn TensorStore, naming: Naming) -> Self {
        match naming {
            Naming::Gguf => Names {
                naming,
                prefix: String::new(),
                head: "output.weight".into(),
            },
            Naming::Hf => {
                let (prefix, head) = [
                    ("model.", "lm_head.weight"),
                    ("model.language_model.", "lm_head.weight"),
                    ("language_model.model.", "language_model.lm_head.weight"),
                ]
                .into_iter()
                .find(|(p, _)| store.get(&format!("{p}embed_tokens.weight")).is_some())
                .unwrap_or(("model.", "lm_head.weight"));
                Names {
                    naming,
                    prefix: prefix.into(),
                    head: head.into(),
                }
            }
        }
    }

    /// Which spelling the file uses.
    pub fn naming(&self) -> Naming {
        self.naming
    }

    /// Whether stored norm gains still need the `1 +` (transformers stores `w`, llama.cpp's
    /// converter stores `1 + w`).
    pub fn norm_unit_offset(&self) -> bool {
        self.naming == Naming::Hf
    }

    /// A model-level tensor by GGUF name: `token_embd`, `output_norm`, `output`, or any other
    /// `part` (GGUF `part.weight`, transformers `{prefix}{hf}.weight`).
    pub fn global(&self, part: &str, hf: &str) -> String {
        match (self.naming, part) {
            (Naming::Gguf, _) => format!("{part}.weight"),
            (Naming::Hf, "token_embd") => format!("{}embed_tokens.weight", self.prefix),
            (Naming::Hf, "output_norm") => format!("{}norm.weight", self.prefix),
            (Naming::Hf, "output") => self.head.clone(),
            (Naming::Hf, _) => format!("{}{hf}.weight", self.prefix),
        }
    }

    /// Tensor `part` (GGUF spelling) of layer `i`; parts missing from the table keep their name.
    pub fn layer(&self, i: usize, part: &str) -> String {
        match self.naming {
            Naming::Gguf => format!("blk.{i}.{part}.weight"),
            Naming::Hf => {
                let hf = hf_layer_part(GEMMA_LAYER, part);
                format!("{}layers.{i}.{hf}.weight", self.prefix)
            }
        }
    }

    /// A per-layer tensor named `blk.{i}.{part}.{suffix}` in GGUF and `{prefix}layers.{i}.{hf}`
    /// (no `.weight`) by transformers: Gemma 4's layer scalar, router scales, stacked experts.
    pub fn layer_param(&self, i: usize, part: &str, suffix: &str, hf: &str) -> String {
        match self.naming {
            Naming::Gguf => format!("blk.{i}.{part}.{suffix}"),
            Naming::Hf => format!("{}layers.{i}.{hf}", self.prefix),
        }
    }
}

/// The sliding/full pattern: `config.json` `layer_types`, else a period (`sliding_window_pattern`,
/// GGUF `attention.sliding_window_pattern` as a period or a per-layer bool array), else
/// `default_period` (every `period`-th layer is full). The layer kinds must include at least one.
pub fn layer_kinds(
    src: &ConfigSource<'_>,
    n_layers: usize,
    default_period: usize,
) -> Result<Vec<LayerKind>, LoadError> {
    let bad = |what: String| LoadError::field(src.path(), what);
    if let Some(types) = src.json("layer_types") {
        let types = types
            .as_array()
            .ok_or_else(|| bad("'layer_types' must be a list".into()))?;
        if types.len() != n_layers {
            return Err(bad(format!(
                "'layer_types' has {} entries for {n_layers} layers",
                types.len()
            )));
        }
        return types
            .iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => Ok(LayerKind::Sliding),
                Some("full_attention") => Ok(LayerKind::Full),
                _ => Err(bad(format!("layer type {t} is not supported"))),
            })
            .collect();
    }
    if let Some(v) = src.gguf_value("attention.sliding_window_pattern") {
        if let Some(a) = v.as_array() {
            let flags: Option<Vec<i64>> = a.to_ints();
            let flags = flags.filter(|f| f.len() == n_layers).ok_or_else(|| {
                bad(format!(
                    "attention.sliding_window_pattern must hold {n_layers} flags"
                ))
            })?;
            return Ok(flags
                .iter()
                .map(|&f| {
                    if f != 0 {
                        LayerKind::Sliding
                    } else {
                        LayerKind::Full
                    }
                })
                .collect());
        }
    }
    let period = match src {
        ConfigSource::Gguf(_) => src.usize("attention.sliding_window_pattern", "")?,
        ConfigSource::Json { .. } => match src.usize("", "sliding_window_pattern")? {
            Some(p) => Some(p),
            None => src.usize("", "_sliding_window_pattern")?,
        },
    }
    .unwrap_or(default_period);
    if period == 0 {
        return Err(bad("sliding window pattern 0".into()));
    }
    Ok((0..n_layers)
        .map(|i| {
            if (i + 1) % period == 0 {
                LayerKind::Full
            } else {
                LayerKind::Sliding
            }
        })
        .collect())
}

/// A `rope_parameters[layer_type][key]` number of a transformers-5 `config.json`.
pub fn json_rope_param(src: &ConfigSource<'_>, layer_type: &str, key: &str) -> Option<f64> {
    src.json("rope_parameters")?
        .get(layer_type)?
        .get(key)
        .and_then(Value::as_f64)
}

/// A soft-cap value (`None` when absent, null or ≤ 0).
pub fn softcap(
    src: &ConfigSource<'_>,
    gguf_key: &str,
    json_key: &str,
) -> Result<Option<f32>, LoadError> {
    Ok(src
        .f64(gguf_key, json_key)?
        .filter(|&c| c > 0.0)
        .map(|c| c as f32))
}

/// The scaled embedding (`× √hidden`, rounded to f32 as transformers and llama.cpp do) and the
/// output head ([`crate::arch::embedding_and_head`]).
pub fn embedding_and_head(
    store: &dyn TensorStore,
    names: &Names,
    vocab: usize,
    dim: usize,
    tie: bool,
) -> Result<(Embedding, Linear), LoadError> {
    crate::arch::embedding_and_head(
        store,
        &names.global("token_embd", ""),
        &names.global("output", ""),
        [vocab, dim],
        tie,
        (dim as f64).sqrt() as f32,
    )
}

/// Checks that the MLP activation is the tanh-approximated GELU every Gemma uses.
pub fn check_activation(src: &ConfigSource<'_>) -> Result<(), LoadError> {
    for key in ["hidden_activation", "hidden_act"] {
        if let Some(v) = src.json(key) {
            match v.as_str() {
                Some("gelu_pytorch_tanh") | Some("gelu_tanh") => {}
                _ => {
                    return Err(LoadError::field(
                        src.path(),
                        format!("activation {v} is not supported (gelu_pytorch_tanh is)"),
                    ))
                }
            }
        }
    }
    Ok(())
}
