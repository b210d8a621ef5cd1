//! Decoder embedders: the engine's own decoder ([`crate::arch`]), run without its output head,
//! gives every token its final-normed hidden state; the embedder pools them. Qwen3-Embedding
//! runs causally and pools the last token (which its tokenizer's post-processor makes
//! `<|endoftext|>`); EmbeddingGemma (`gemma3_text` with `use_bidirectional_attention`) runs the
//! Gemma 3 blocks without the causal mask and mean-pools, then its `Dense` projections.
//!
//! Sequences of a batch run in one pass, each with its own KV cache, so nothing is padded and a
//! batch gives the rows of one-by-one runs (left or right padding, which the reference
//! implementations must choose between for last-token pooling, does not arise).
//!
//! Checkpoints saved from the bare `Qwen3Model` (Qwen3-Embedding's own files, and
//! sentence-transformers saves) name their tensors without the `model.` prefix and have no
//! `lm_head`; both spellings load.

use std::path::Path;

use serde_json::Value;

use crate::arch::bert::EncoderInput;
use crate::arch::{CausalLm, SeqBatch};
use crate::config::{Arch, ConfigSource, ModelConfig};
use crate::error::{Error, LoadError, Result};
use crate::loader::safetensors::SafetensorsModel;
use crate::loader::{Naming, TensorStore, TensorView};
use crate::nn::KvCache;
use crate::quant::{Overlay, Precision};

/// A loaded causal decoder used for its hidden states.
pub struct DecoderStates {
    lm: Box<dyn CausalLm>,
}

/// `inner`'s tensors, also under the `model.` prefix transformers' causal-LM names carry when
/// the file was saved from the bare model.
struct BareModelNames<'a> {
    inner: &'a dyn TensorStore,
}

impl TensorStore for BareModelNames<'_> {
    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn get(&self, name: &str) -> Option<Result<TensorView, LoadError>> {
        self.inner
            .get(name)
            .or_else(|| self.inner.get(name.strip_prefix("model.")?))
    }
}

impl DecoderStates {
    /// Loads the decoder of the folder `dir` (`config.json` at `cfg_path`, parsed as
    /// `cfg_json`; safetensors weights). Qwen3 and Gemma 3 are accepted: the families whose
    /// embedding checkpoints are checked against sentence-transformers.
    pub fn load(
        dir: &Path,
        cfg_path: &Path,
        cfg_json: &Value,
        quant: Option<Precision>,
    ) -> Result<Self, LoadError> {
        crate::tuning::ensure();
        let cfg = ModelConfig::from_config_value(cfg_path, cfg_json)?;
        if !matches!(cfg.arch, Arch::Qwen3 | Arch::Gemma3) {
            return Err(LoadError::UnsupportedArch {
                path: cfg_path.to_path_buf(),
                arch: cfg.arch.name().to_string(),
                supported: "qwen3, gemma3_text (decoder embedding models)".to_string(),
            });
        }
        let st = SafetensorsModel::open(dir)?;
        let converted = crate::quant::convert_to(&st, quant)?;
        let overlay = Overlay::new(&st, converted.as_ref());
        let store = BareModelNames { inner: &overlay };
        let src = ConfigSource::Json {
            path: cfg_path,
            json: cfg_json,
        };
        let lm = crate::arch::load(&cfg, &store, Naming::Hf, &src)?;
        Ok(DecoderStates { lm })
    }

    /// The decoder's configuration.
    pub fn config(&self) -> &ModelConfig {
        self.lm.config()
    }

    /// The final-normed hidden states of every sequence of `batch` (causal or, as the model
    /// says, bidirectional attention within each sequence, positions from 0), concatenated: `[Σ tᵢ, hidden]`. Token types are
    /// ignored.
    pub fn forward(&self, batch: &[EncoderInput<'_>]) -> Result<Vec<f32>> {
        self.check_lengths(batch.iter().map(|s| s.ids))?;
        let mut caches: Vec<_> = batch
            .iter()
            .map(|s| self.lm.new_cache(s.ids.len()))
            .collect();
        let mut seqs = seq_batch(batch.iter().map(|s| s.ids), &mut caches, true);
        self.lm.forward_hidden(&mut seqs)
    }

    /// The logits of the last position of every sequence of `batch` (each from position 0),
    /// one `[vocab]` row per sequence (Qwen3-Reranker's yes/no scoring).
    pub fn last_logits(&self, batch: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        self.check_lengths(batch.iter().copied())?;
        let mut caches: Vec<_> = batch.iter().map(|s| self.lm.new_cache(s.len())).collect();
        let mut seqs = seq_batch(batch.iter().copied(), &mut caches, false);
        self.lm.forward_batch(&mut seqs)
    }

    /// An error naming the first sequence longer than the model's context.
    fn check_lengths<'a>(&self, seqs: impl Iterator<Item = &'a [u32]>) -> Result<()> {
        let max = self.config().context_length;
        for (i, s) in seqs.enumerate() {
            if s.len() > max {
                return Err(Error::Request(format!(
                    "input {i} has {} tokens, more than the model's context of {max}",
                    s.len()
                )));
            }
        }
        Ok(())
    }
}

/// One [`SeqBatch`] per token sequence, each with its cache.
fn seq_batch<'a>(
    seqs: impl Iterator<Item = &'a [u32]>,
    caches: &'a mut [KvCache],
    all_logits: bool,
) -> Vec<SeqBatch<'a>> {
    seqs.zip(caches.iter_mut())
        .map(|(tokens, cache)| SeqBatch {
            tokens,
            cache,
            all_logits,
            media: None,
        })
        .collect()
}
