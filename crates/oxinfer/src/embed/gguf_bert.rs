//! GGUF embedding models as llama.cpp's `convert_hf_to_gguf.py` writes BERT
//! (`general.architecture = bert`) and NomicBERT (`nomic-bert`: rotary positions with θ
//! `nomic-bert.rope.freq_base`, the fused `attn_qkv`, `ffn_gate` beside `ffn_up`, SiLU, no
//! position table): the encoder's hyper-parameters from `bert.*` / `nomic-bert.*`
//! (`block_count`, `context_length`, `embedding_length`, `feed_forward_length`,
//! `attention.head_count`, `attention.layer_norm_epsilon`, `tokenizer.ggml.token_type_count`),
//! the pooling from `bert.pooling_type` (1 mean, 2 cls, 3 last token), the WordPiece vocabulary
//! from `tokenizer.ggml.*` (model `bert`), `[CLS] … [SEP]` from its BOS / separator ids, and the
//! tensors under llama.cpp's names (`token_embd`, `position_embd`, `token_types`,
//! `token_embd_norm`, `blk.N.attn_q` … `layer_output_norm`), read through [`GgufBertNames`] as
//! the transformers names [`Bert`] loads.
//!
//! What the GGUF does not carry is taken as llama.cpp takes it: the output is normalized (the
//! sentence-transformers `Normalize` module is not written; `llama-embedding` normalizes by
//! default), inputs are limited by the context length (not `max_seq_length`), the activation is
//! BERT's exact GELU (NomicBERT's SiLU), and `2_Dense` projections are absent.

use std::path::Path;

use super::layout::SentenceLayout;
use super::pooling::{PoolMode, Pooling};
use super::template::InputTemplate;
use crate::arch::bert::{Bert, BertConfig, PositionIds};
use crate::error::LoadError;
use crate::gguf::GgufFile;
use crate::loader::{TensorStore, TensorView};
use crate::nn::encoder_act::EncoderAct;
use crate::tokenizer::Tokenizer;

/// The `general.architecture`s this module reads.
pub const GGUF_EMBEDDING_ARCHS: [&str; 2] = ["bert", "nomic-bert"];

/// Whether `path` is a GGUF file of an embedding architecture ([`GGUF_EMBEDDING_ARCHS`]).
pub fn is_gguf_embedding_model(path: &Path) -> bool {
    path.is_file()
        && path.extension().is_some_and(|e| e == "gguf")
        && GgufFile::open(path).is_ok_and(|g| {
            g.architecture()
                .is_ok_and(|a| GGUF_EMBEDDING_ARCHS.contains(&a))
        })
}

/// A BERT GGUF's tensors under transformers' `BertModel` names.
pub struct GgufBertNames<'a> {
    gguf: &'a GgufFile,
}

impl GgufBertNames<'_> {
    /// The GGUF name of the transformers tensor `name` (`….weight` / `….bias`).
    fn gguf_name(name: &str) -> Option<String> {
        let (stem, suffix) = name.rsplit_once('.')?;
        let gguf_stem = match stem {
            "embeddings.word_embeddings" => "token_embd".to_string(),
            "embeddings.position_embeddings" => "position_embd".to_string(),
            "embeddings.token_type_embeddings" => "token_types".to_string(),
            "embeddings.LayerNorm" | "emb_ln" => "token_embd_norm".to_string(),
            _ => {
                let rest = stem
                    .strip_prefix("encoder.layer.")
                    .or_else(|| stem.strip_prefix("encoder.layers."))?;
                let (i, part) = rest.split_once('.')?;
                let part = match part {
                    "attention.self.query" => "attn_q",
                    "attention.self.key" => "attn_k",
                    "attention.self.value" => "attn_v",
                    "attn.Wqkv" => "attn_qkv",
                    "attention.output.dense" | "attn.out_proj" => "attn_output",
                    "attention.output.LayerNorm" | "norm1" => "attn_output_norm",
                    "intermediate.dense" | "mlp.fc11" => "ffn_up",
                    "mlp.fc12" => "ffn_gate",
                    "output.dense" | "mlp.fc2" => "ffn_down",
                    "output.LayerNorm" | "norm2" => "layer_output_norm",
                    _ => return None,
                };
                format!("blk.{i}.{part}")
            }
        };
        Some(format!("{gguf_stem}.{suffix}"))
    }
}

impl TensorStore for GgufBertNames<'_> {
    fn path(&self) -> &Path {
        self.gguf.path()
    }

    fn get(&self, name: &str) -> Option<Result<TensorView, LoadError>> {
        TensorStore::get(self.gguf, &Self::gguf_name(name)?)
    }
}

/// The parts of an embedder read from a BERT GGUF.
pub struct GgufEmbedding {
    /// The encoder.
    pub encoder: Bert,
    /// The WordPiece tokenizer.
    pub tokenizer: Tokenizer,
    /// `[CLS] $A [SEP]` (pairs `[CLS] $A [SEP] $B [SEP]`).
    pub template: InputTemplate,
    /// Pooling and normalization (see the module doc).
    pub layout: SentenceLayout,
}

impl GgufEmbedding {
    /// Loads the BERT GGUF file `path`.
    pub fn load(path: &Path) -> Result<Self, LoadError> {
        let g = GgufFile::open(path)?;
        let arch = g.architecture()?;
        if !GGUF_EMBEDDING_ARCHS.contains(&arch) {
            return Err(LoadError::UnsupportedArch {
                path: path.to_path_buf(),
                arch: arch.to_string(),
                supported: "bert, nomic-bert (GGUF embedding models)".to_string(),
            });
        }
        let u = |key: &str| -> Result<usize, LoadError> {
            g.get_u64(&format!("{arch}.{key}"))?
                .map(|v| v as usize)
                .ok_or_else(|| LoadError::field(path, format!("missing {arch}.{key}")))
        };
        let tokenizer =
            Tokenizer::from_gguf(&g).map_err(|e| LoadError::malformed(path, e.to_string()))?;
        let cfg = BertConfig {
            vocab_size: tokenizer.vocab_size(),
            hidden_size: u("embedding_length")?,
            n_layers: u("block_count")?,
            n_heads: u("attention.head_count")?,
            intermediate_size: u("feed_forward_length")?,
            max_positions: u("context_length")?,
            positions: match arch {
                "nomic-bert" => PositionIds::Rotary {
                    theta: g
                        .get_f64(&format!("{arch}.rope.freq_base"))?
                        .unwrap_or(1000.0) as f32,
                    ntk: None,
                },
                _ => PositionIds::FromZero,
            },
            type_vocab_size: g.get_u64("tokenizer.ggml.token_type_count")?.unwrap_or(0) as usize,
            layer_norm_eps: g
                .get_f64(&format!("{arch}.attention.layer_norm_epsilon"))?
                .unwrap_or(1e-12) as f32,
            act: match arch {
                "nomic-bert" => EncoderAct::Silu,
                _ => EncoderAct::GeluErf,
            },
        };
        if cfg.n_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.n_heads) {
            return Err(LoadError::field(
                path,
                format!(
                    "{arch}.embedding_length {} is not a multiple of {arch}.attention.head_count {}",
                    cfg.hidden_size, cfg.n_heads
                ),
            ));
        }
        let encoder = Bert::load(&cfg, &GgufBertNames { gguf: &g }, "")?;
        let special = |key: &str| -> Result<u32, LoadError> {
            g.get_u64(&format!("tokenizer.ggml.{key}"))?
                .map(|v| v as u32)
                .ok_or_else(|| LoadError::field(path, format!("missing tokenizer.ggml.{key}")))
        };
        let cls = special("bos_token_id")?;
        let sep = match g.get_u64("tokenizer.ggml.seperator_token_id")? {
            Some(id) => id as u32,
            None => special("eos_token_id")?,
        };
        let pooling = match g.get_u64(&format!("{arch}.pooling_type"))? {
            None | Some(1) => PoolMode::Mean,
            Some(2) => PoolMode::Cls,
            Some(3) => PoolMode::LastToken,
            Some(other) => {
                return Err(LoadError::field(
                    path,
                    format!("{arch}.pooling_type {other} is not supported (1 mean, 2 cls, 3 last)"),
                ))
            }
        };
        let mut layout = SentenceLayout::plain(path);
        layout.pooling = Pooling::new(vec![pooling]);
        layout.normalize = true;
        Ok(GgufEmbedding {
            encoder,
            tokenizer,
            template: InputTemplate::bert(cls, sep),
            layout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transformers_names_map_to_llama_cpp_names() {
        let n = |s: &str| GgufBertNames::gguf_name(s);
        assert_eq!(
            n("embeddings.word_embeddings.weight").as_deref(),
            Some("token_embd.weight")
        );
        assert_eq!(
            n("encoder.layer.3.attention.output.LayerNorm.bias").as_deref(),
            Some("blk.3.attn_output_norm.bias")
        );
        assert_eq!(
            n("encoder.layer.0.output.dense.weight").as_deref(),
            Some("blk.0.ffn_down.weight")
        );
        assert_eq!(
            n("encoder.layers.1.mlp.fc12.weight").as_deref(),
            Some("blk.1.ffn_gate.weight")
        );
        assert_eq!(n("emb_ln.bias").as_deref(), Some("token_embd_norm.bias"));
        assert_eq!(n("pooler.dense.weight"), None);
    }
}
