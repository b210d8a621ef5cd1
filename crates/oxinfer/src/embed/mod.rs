//! Sentence embeddings: an encoder ([`crate::arch::bert`]: BERT, XLM-RoBERTa) or a decoder
//! read at its hidden states ([`decoder`]: Qwen3-Embedding), with its tokenizer, input template
//! and sentence-transformers layout (pooling, dense projections, normalization, prompts), as
//! one [`Embedder`] that turns texts into vectors.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use oxinfer::embed::{EmbedOptions, Embedder};
//! let e = Embedder::load(std::path::Path::new("all-minilm-l6-v2"))?;
//! let v = e.embed(&["a sentence", "another one"], &EmbedOptions::default())?;
//! assert_eq!(v[0].len(), e.dim());
//! # Ok(()) }
//! ```

pub mod decoder;
pub mod encoder;
pub mod gguf_bert;
pub mod layout;
pub mod pooling;
pub mod rerank;
pub mod sequence_groups;
pub mod template;
pub mod yes_no;

use std::path::{Path, PathBuf};

use crate::arch::bert::EncoderInput;
use crate::error::{Error, LoadError, Result};
use crate::quant::Precision;
use crate::tokenizer::Tokenizer;
pub use encoder::TextEncoder;
use layout::{read_json, SentenceLayout};
pub use pooling::{PoolMode, Pooling};
pub use rerank::{is_reranker_model, CrossEncoder};
pub use template::{Encoded, InputTemplate};

/// How [`Embedder::embed`] treats its texts.
#[derive(Clone, Debug)]
pub struct EmbedOptions {
    /// Scale each vector to unit length; `None`: as the model's layout says (`Normalize`).
    pub normalize: Option<bool>,
    /// Cut texts longer than [`Embedder::max_tokens`] (`true`, sentence-transformers'
    /// behaviour) or refuse them with an error naming the text (`false`).
    pub truncate: bool,
    /// Texts per encoder pass.
    pub batch_size: usize,
    /// Text put before every input (a prompt such as `"query: "`); `None`: the model's default
    /// prompt, if it names one.
    pub prompt: Option<String>,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        EmbedOptions {
            normalize: None,
            truncate: true,
            batch_size: 32,
            prompt: None,
        }
    }
}

/// A sentence-embedding model: encoder, tokenizer and sentence-transformers layout.
pub struct Embedder {
    encoder: TextEncoder,
    tokenizer: Tokenizer,
    template: InputTemplate,
    layout: SentenceLayout,
    max_tokens: usize,
    source: PathBuf,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("source", &self.source)
            .field("dim", &self.dim())
            .field("max_tokens", &self.max_tokens)
            .finish_non_exhaustive()
    }
}

/// Whether `dir` holds an embedding model [`Embedder::load`] can read: a folder with a
/// sentence-transformers layout (`modules.json`) or an encoder's `config.json` (and not a
/// reranker, [`is_reranker_model`]), or a BERT GGUF file ([`gguf_bert`]).
pub fn is_embedding_model(dir: &Path) -> bool {
    if gguf_bert::is_gguf_embedding_model(dir) {
        return true;
    }
    if !dir.is_dir() || is_reranker_model(dir) {
        return false;
    }
    if dir.join("modules.json").is_file() {
        return true;
    }
    read_json(&dir.join("config.json"))
        .ok()
        .and_then(|v| {
            let t = v.get("model_type")?.as_str()?;
            Some(encoder::is_bidirectional_type(t))
        })
        .unwrap_or(false)
}

/// The tokenizer of the model folder `dir` (`tokenizer.json`, `tokenizer_config.json`), its
/// input template (the `post_processor`) and its `model_max_length`, if given.
pub(crate) fn load_tokenizer(
    dir: &Path,
) -> Result<(Tokenizer, InputTemplate, Option<usize>), LoadError> {
    let tok_path = dir.join("tokenizer.json");
    let tok_cfg = dir.join("tokenizer_config.json");
    let tokenizer = Tokenizer::from_files(&tok_path, tok_cfg.is_file().then_some(&*tok_cfg))
        .map_err(|e| LoadError::malformed(&tok_path, e.to_string()))?;
    let template =
        InputTemplate::from_tokenizer_json(&tok_path, &read_json(&tok_path)?, &tokenizer)?;
    let model_max = read_json(&tok_cfg)
        .ok()
        .and_then(|v| v.get("model_max_length")?.as_u64())
        .map(|x| x as usize);
    Ok((tokenizer, template, model_max))
}

impl Embedder {
    /// Loads the model folder `dir`: a sentence-transformers folder (BERT, XLM-RoBERTa,
    /// NomicBERT, ModernBERT, Qwen3 or Gemma 3 inside) or a plain HF encoder folder; or a BERT
    /// GGUF file as llama.cpp writes it ([`gguf_bert`]).
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        Self::load_quantized(dir, None)
    }

    /// [`Self::load`] with the encoder's weight matrices converted to `quant` on load
    /// ([`TextEncoder::load_quantized`]; `Dense` modules stay as stored). A GGUF file keeps its
    /// own types: `Some` is an error for it.
    pub fn load_quantized(dir: &Path, quant: Option<Precision>) -> Result<Self, LoadError> {
        if gguf_bert::is_gguf_embedding_model(dir) {
            if let Some(p) = quant {
                return Err(LoadError::malformed(
                    dir,
                    format!(
                        "--quant {p} converts safetensors weights; a GGUF file keeps the types \
                         it was written with"
                    ),
                ));
            }
            return Self::load_gguf(dir);
        }
        if !dir.is_dir() {
            return Err(LoadError::malformed(
                dir,
                "not an embedding model: expected a sentence-transformers or BERT folder \
                 (modules.json, config.json with model_type bert, xlm-roberta, nomic_bert, \
                 modernbert, qwen3 or gemma3_text, model.safetensors, tokenizer.json) or a \
                 bert / nomic-bert GGUF file",
            ));
        }
        if rerank::is_reranker_model(dir) {
            return Err(LoadError::malformed(
                dir,
                "this is a reranker (cross-encoder), not an embedding model: use `oxinfer rerank`",
            ));
        }
        let layout = SentenceLayout::load(dir)?;
        let enc_dir = layout.encoder_dir.clone();
        let encoder = TextEncoder::load_quantized(&enc_dir, quant)?;
        if matches!(encoder, TextEncoder::Decoder(_)) && !dir.join("modules.json").is_file() {
            return Err(LoadError::malformed(
                dir,
                "a decoder (qwen3, gemma3_text) is an embedding model only with its sentence-transformers \
                 modules.json (pooling, normalization); without one this is a chat model",
            ));
        }
        let (tokenizer, template, model_max) = load_tokenizer(&enc_dir)?;
        let max_tokens = layout
            .max_seq_length
            .or(model_max)
            .unwrap_or(encoder.max_tokens())
            .min(encoder.max_tokens());
        let mut dim = layout.pooling.out_dim(encoder.hidden_size());
        for (i, d) in layout.dense.iter().enumerate() {
            if d.linear.n_in != dim {
                return Err(LoadError::field(
                    dir,
                    format!(
                        "Dense module {i} takes {} features, pooling gives {dim}",
                        d.linear.n_in
                    ),
                ));
            }
            dim = d.linear.n_out;
        }
        Ok(Embedder {
            encoder,
            tokenizer,
            template,
            layout,
            max_tokens,
            source: dir.to_path_buf(),
        })
    }

    /// Loads the BERT GGUF file `path` ([`gguf_bert`]).
    fn load_gguf(path: &Path) -> Result<Self, LoadError> {
        let g = gguf_bert::GgufEmbedding::load(path)?;
        let max_tokens = g.encoder.config().max_tokens();
        Ok(Embedder {
            encoder: TextEncoder::Bert(Box::new(g.encoder)),
            tokenizer: g.tokenizer,
            template: g.template,
            layout: g.layout,
            max_tokens,
            source: path.to_path_buf(),
        })
    }

    /// Width of the embeddings.
    pub fn dim(&self) -> usize {
        match self.layout.dense.last() {
            Some(d) => d.linear.n_out,
            None => self.layout.pooling.out_dim(self.encoder.hidden_size()),
        }
    }

    /// The longest input in tokens, special tokens included (`max_seq_length`).
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// The folder the model was loaded from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The encoder.
    pub fn encoder(&self) -> &TextEncoder {
        &self.encoder
    }

    /// Whether the model's layout normalizes its output.
    pub fn normalizes(&self) -> bool {
        self.layout.normalize
    }

    /// The named prompt (`config_sentence_transformers.json`), if the model has it.
    pub fn prompt(&self, name: &str) -> Option<&str> {
        self.layout.prompts.get(name).map(String::as_str)
    }

    /// The input of `text` (with the prompt of `opts`, lower-cased when the model asks),
    /// special tokens added and cut to [`max_tokens`](Self::max_tokens) when `opts.truncate`;
    /// an error naming input `index` when it is too long and truncation is off.
    pub fn encode(&self, index: usize, text: &str, opts: &EmbedOptions) -> Result<Encoded> {
        let prompt = opts
            .prompt
            .as_deref()
            .or(self.layout.default_prompt.as_deref());
        let full = match prompt {
            Some(p) => format!("{p}{text}"),
            None => text.to_string(),
        };
        let mut encoded = self.encode_ids(index, &self.tokenize(&full)?, opts.truncate)?;
        // Only a pooling that leaves the prompt out needs its length.
        if let Some(p) = prompt.filter(|p| !p.is_empty() && !self.layout.pooling.include_prompt) {
            encoded.prompt_len = self.prompt_len(p)?;
        }
        Ok(encoded)
    }

    /// The ids of `text` (lower-cased when the model asks), no special tokens.
    fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        let text = if self.layout.lower_case {
            std::borrow::Cow::Owned(text.to_lowercase())
        } else {
            std::borrow::Cow::Borrowed(text)
        };
        self.tokenizer
            .encode(&text, false)
            .map_err(|e| Error::Tokenizer(e.to_string()))
    }

    /// sentence-transformers' `prompt_length` of `prompt`: the tokens of the prompt's own input
    /// (special tokens added, cut to [`max_tokens`](Self::max_tokens)), less a final special
    /// token.
    fn prompt_len(&self, prompt: &str) -> Result<usize> {
        let ids = self.tokenize(prompt)?;
        let n = self
            .template
            .apply(&ids, None, Some(self.max_tokens))
            .map_or(0, |e| e.ids.len());
        Ok(n.saturating_sub(usize::from(self.template.ends_with_special())))
    }

    /// The input of already tokenized text `ids` (no special tokens): special tokens added, cut
    /// to [`max_tokens`](Self::max_tokens) when `truncate`, else an error naming input `index`
    /// when too long.
    pub fn encode_ids(&self, index: usize, ids: &[u32], truncate: bool) -> Result<Encoded> {
        let specials = self.template.added_tokens(false);
        if !truncate && ids.len() + specials > self.max_tokens {
            return Err(Error::Request(format!(
                "input {index} has {} tokens, more than the model's limit of {} (truncation is off)",
                ids.len() + specials,
                self.max_tokens
            )));
        }
        let vocab = self.encoder.vocab_size();
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= vocab) {
            return Err(Error::Request(format!(
                "input {index}: token id {bad} is outside the vocabulary (size {vocab})"
            )));
        }
        self.template
            .apply(ids, None, Some(self.max_tokens))
            .ok_or_else(|| {
                Error::Request(format!(
                    "max_seq_length {} leaves no room for text",
                    self.max_tokens
                ))
            })
    }

    /// Embeddings of `texts`, one vector of [`dim`](Self::dim) per text, in order.
    pub fn embed(&self, texts: &[&str], opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        let inputs = texts
            .iter()
            .enumerate()
            .map(|(i, t)| self.encode(i, t, opts))
            .collect::<Result<Vec<_>>>()?;
        self.embed_encoded(&inputs, opts)
    }

    /// Embeddings of inputs made by [`encode`](Self::encode) / [`encode_ids`](Self::encode_ids),
    /// `opts.batch_size` per encoder pass. With several passes and an encoder whose sequences
    /// run apart ([`TextEncoder::runs_sequences_apart`]), the passes run on separate threads
    /// (one pool task each, its products on its thread), so the threads wait for each other
    /// once, at the end, instead of at every product.
    pub fn embed_encoded(&self, inputs: &[Encoded], opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        let normalize = opts.normalize.unwrap_or(self.layout.normalize);
        let chunks: Vec<&[Encoded]> = inputs.chunks(opts.batch_size.max(1)).collect();
        if chunks.len() < 2 || !self.encoder.runs_sequences_apart() {
            let mut out = Vec::with_capacity(inputs.len());
            for chunk in chunks {
                out.extend(self.embed_pass(chunk, normalize)?);
            }
            return Ok(out);
        }
        let mut passes: Vec<Result<Vec<Vec<f32>>>> =
            chunks.iter().map(|_| Ok(Vec::new())).collect();
        oxinfer_kernels::pool::for_each_mut(&mut passes, |i, pass| {
            *pass = self.embed_pass(chunks[i], normalize);
        });
        let mut out = Vec::with_capacity(inputs.len());
        for pass in passes {
            out.extend(pass?);
        }
        Ok(out)
    }

    /// The embeddings of one encoder pass over `chunk`: hidden states, pooling, the dense
    /// projections and (when `normalize`) unit length.
    fn embed_pass(&self, chunk: &[Encoded], normalize: bool) -> Result<Vec<Vec<f32>>> {
        let hidden = self.hidden_states(chunk)?;
        let d = self.encoder.hidden_size();
        let mut row = 0;
        let mut pooled = Vec::with_capacity(chunk.len() * self.layout.pooling.out_dim(d));
        for e in chunk {
            let n = e.ids.len();
            let states = &hidden[row * d..(row + n) * d];
            pooled.extend(self.layout.pooling.pool(states, d, e.prompt_len));
            row += n;
        }
        for dense in &self.layout.dense {
            pooled = dense.forward(&pooled, chunk.len());
        }
        Ok(pooled
            .chunks_exact(self.dim())
            .map(|v| {
                let mut v = v.to_vec();
                if normalize {
                    pooling::normalize(&mut v);
                }
                v
            })
            .collect())
    }

    /// The encoder's last hidden states of `inputs`, concatenated (`[Σ tᵢ, hidden]`).
    pub fn hidden_states(&self, inputs: &[Encoded]) -> Result<Vec<f32>> {
        if let Some(i) = inputs.iter().position(|e| e.ids.is_empty()) {
            return Err(Error::Request(format!("input {i} has no tokens")));
        }
        let batch: Vec<EncoderInput<'_>> = inputs
            .iter()
            .map(|e| EncoderInput {
                ids: &e.ids,
                type_ids: &e.type_ids,
            })
            .collect();
        self.encoder.forward(&batch)
    }
}
