//! The network under an [`Embedder`](super::Embedder): a bidirectional BERT-style encoder
//! ([`Bert`]: BERT, XLM-RoBERTa, NomicBERT; [`ModernBert`]) or a causal decoder read at its last hidden states
//! ([`DecoderStates`]: Qwen3-Embedding, EmbeddingGemma). Both turn a batch of token sequences into one hidden
//! state per token.

use std::path::Path;

use serde_json::Value;

use super::decoder::DecoderStates;
use super::sequence_groups::forward_in_groups;
use crate::arch::bert::{tensor_prefix, Bert, BertConfig, EncoderInput, ENCODER_MODEL_TYPES};
use crate::arch::modernbert::{self, ModernBert, ModernBertConfig};
use crate::error::{LoadError, Result};
use crate::loader::safetensors::SafetensorsModel;
use crate::quant::{Overlay, Precision};

/// The `model_type`s a decoder embedder may have.
pub const DECODER_MODEL_TYPES: [&str; 2] = ["qwen3", "gemma3_text"];

/// A network that gives every token of a batch of sequences a hidden state.
pub enum TextEncoder {
    /// A bidirectional BERT-style encoder.
    Bert(Box<Bert>),
    /// A ModernBERT encoder.
    ModernBert(Box<ModernBert>),
    /// A causal decoder's final-normed hidden states.
    Decoder(DecoderStates),
}

/// Whether `model_type` (of `config.json`) is one [`TextEncoder::load`] reads.
pub fn is_text_encoder_type(model_type: &str) -> bool {
    is_bidirectional_type(model_type) || DECODER_MODEL_TYPES.contains(&model_type)
}

/// Whether `model_type` is a bidirectional encoder (BERT-style or ModernBERT), an embedding
/// model even without a sentence-transformers layout.
pub fn is_bidirectional_type(model_type: &str) -> bool {
    ENCODER_MODEL_TYPES.contains(&model_type) || model_type == modernbert::MODEL_TYPE
}

impl TextEncoder {
    /// Loads the model folder `dir` (`config.json`, safetensors weights) by its `model_type`.
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        Self::load_quantized(dir, None)
    }

    /// [`Self::load`] with every float weight matrix converted to `quant` on load
    /// ([`crate::quant::convert`]: the projections run on the quantized matmul kernels; the
    /// embedding tables are read row by row); `None`: as stored.
    pub fn load_quantized(dir: &Path, quant: Option<Precision>) -> Result<Self, LoadError> {
        let cfg_path = dir.join("config.json");
        let cfg_json = super::layout::read_json(&cfg_path)?;
        let model_type = cfg_json
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if DECODER_MODEL_TYPES.contains(&model_type) {
            return Ok(TextEncoder::Decoder(DecoderStates::load(
                dir, &cfg_path, &cfg_json, quant,
            )?));
        }
        let bert = ENCODER_MODEL_TYPES.contains(&model_type);
        if bert || model_type == modernbert::MODEL_TYPE {
            let st = SafetensorsModel::open(dir)?;
            let converted = crate::quant::convert_to(&st, quant)?;
            let store = Overlay::new(&st, converted.as_ref());
            return Ok(if bert {
                let cfg = BertConfig::from_json(&cfg_path, &cfg_json)?;
                let prefix = tensor_prefix(&store);
                TextEncoder::Bert(Box::new(Bert::load(&cfg, &store, prefix)?))
            } else {
                let cfg = ModernBertConfig::from_json(&cfg_path, &cfg_json)?;
                let prefix = modernbert::tensor_prefix(&store);
                TextEncoder::ModernBert(Box::new(ModernBert::load(&cfg, &store, prefix)?))
            });
        }
        Err(LoadError::UnsupportedArch {
            path: cfg_path,
            arch: model_type.to_string(),
            supported: "bert, xlm-roberta, nomic_bert, modernbert, qwen3, gemma3_text \
                        (embedding models)"
                .to_string(),
        })
    }

    /// The hidden states of every sequence of `batch`, concatenated: `[Σ tᵢ, hidden]`, the rows
    /// of sequence `i` after those of sequences `0 .. i`. A decoder ignores token types. When
    /// [`Self::runs_sequences_apart`], a big enough batch runs as groups of sequences on separate
    /// threads ([`sequence_groups`](super::sequence_groups)); the rows are the same.
    pub fn forward(&self, batch: &[EncoderInput<'_>]) -> Result<Vec<f32>> {
        if !self.runs_sequences_apart() {
            return self.forward_whole(batch);
        }
        let threads = oxinfer_kernels::pool::pool_threads();
        forward_in_groups(batch, threads, |part| self.forward_whole(part))
    }

    /// [`Self::forward`] in one pass over the whole batch, every product split across the pool
    /// (or run on the calling thread when it is a pool task).
    pub fn forward_whole(&self, batch: &[EncoderInput<'_>]) -> Result<Vec<f32>> {
        match self {
            TextEncoder::Bert(b) => b.forward(batch),
            TextEncoder::ModernBert(m) => m.forward(batch),
            TextEncoder::Decoder(d) => d.forward(batch),
        }
    }

    /// Whether whole sequences may run on separate threads: a bidirectional encoder (its
    /// sequences are independent and it holds no state between calls) on the CPU (a BERT
    /// with no backend installed, which wants big batches instead; ModernBERT always runs on
    /// the host). A decoder runs through the generation engine's batch and is never split.
    pub fn runs_sequences_apart(&self) -> bool {
        match self {
            TextEncoder::Bert(_) => crate::backend::active().is_none(),
            TextEncoder::ModernBert(_) => true,
            TextEncoder::Decoder(_) => false,
        }
    }

    /// Width of a hidden state.
    pub fn hidden_size(&self) -> usize {
        match self {
            TextEncoder::Bert(b) => b.config().hidden_size,
            TextEncoder::ModernBert(m) => m.config().hidden_size,
            TextEncoder::Decoder(d) => d.config().hidden_size,
        }
    }

    /// Rows of the token-embedding table (ids must be below it).
    pub fn vocab_size(&self) -> usize {
        match self {
            TextEncoder::Bert(b) => b.config().vocab_size,
            TextEncoder::ModernBert(m) => m.config().vocab_size,
            TextEncoder::Decoder(d) => d.config().vocab_size,
        }
    }

    /// The longest sequence the position table allows, in tokens.
    pub fn max_tokens(&self) -> usize {
        match self {
            TextEncoder::Bert(b) => b.config().max_tokens(),
            TextEncoder::ModernBert(m) => m.config().max_positions,
            TextEncoder::Decoder(d) => d.config().context_length,
        }
    }
}
