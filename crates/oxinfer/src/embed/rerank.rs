//! Rerankers: cross-encoders that score how well a document answers a query, with one label:
//! `BertForSequenceClassification` (the ms-marco-MiniLM layout) and
//! `XLMRobertaForSequenceClassification` (the bge-reranker-v2-m3 layout). Each (query,
//! document) pair is one input, `[CLS] query [SEP] document [SEP]` (token types 0 then 1) or
//! `<s> query </s></s> document </s>`, as the tokenizer's post-processor says, cut
//! `longest_first` to the model's limit; the score is the classification head over the first
//! token ([`ClassifierHead`]), passed through the model's activation as sentence-transformers'
//! `CrossEncoder` applies it (`activation_fn` of `config_sentence_transformers.json` /
//! `config.json`; default sigmoid). Qwen3-Reranker-style causal LMs score by their "yes" / "no"
//! logits instead ([`super::yes_no`]).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::layout::read_json;
use super::template::{Encoded, InputTemplate};
use super::yes_no::{is_yes_no_reranker, YesNo};
use crate::arch::bert::{tensor_prefix, Bert, BertConfig, EncoderInput, ENCODER_MODEL_TYPES};
use crate::error::{Error, LoadError, Result};
use crate::loader::safetensors::SafetensorsModel;
use crate::loader::TensorStore;
use crate::nn::encoder_linear::EncoderLinear;
use crate::quant::{Overlay, Precision};
use crate::tokenizer::Tokenizer;

/// Pairs per encoder pass.
const PAIRS_PER_PASS: usize = 32;

/// Whether the folder `dir` holds a reranker: its `config.json` names a
/// `*ForSequenceClassification` architecture, `config_sentence_transformers.json` says
/// `CrossEncoder`, or it is a Qwen3-Reranker-style causal LM ([`is_yes_no_reranker`]).
pub fn is_reranker_model(dir: &Path) -> bool {
    if is_yes_no_reranker(dir) {
        return true;
    }
    let classifier = read_json(&dir.join("config.json"))
        .ok()
        .and_then(|v| {
            let archs = v.get("architectures")?.as_array()?.clone();
            Some(archs.iter().any(|a| {
                a.as_str()
                    .is_some_and(|s| s.ends_with("ForSequenceClassification"))
            }))
        })
        .unwrap_or(false);
    let st_cross = read_json(&dir.join("config_sentence_transformers.json"))
        .ok()
        .and_then(|v| v.get("model_type")?.as_str().map(|t| t == "CrossEncoder"))
        .unwrap_or(false);
    dir.is_dir() && (classifier || st_cross)
}

/// The function from logit to score.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoreActivation {
    /// `1 / (1 + e^-x)` (sentence-transformers' default for one label).
    Sigmoid,
    /// The raw logit.
    Identity,
}

impl ScoreActivation {
    fn apply(self, x: f32) -> f32 {
        match self {
            ScoreActivation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            ScoreActivation::Identity => x,
        }
    }

    /// The activation a sentence-transformers path such as
    /// `torch.nn.modules.activation.Sigmoid` names.
    fn parse(path: &Path, name: &str) -> Result<Self, LoadError> {
        match name.rsplit('.').next().unwrap_or(name) {
            "Sigmoid" => Ok(ScoreActivation::Sigmoid),
            "Identity" => Ok(ScoreActivation::Identity),
            other => Err(LoadError::field(
                path,
                format!("activation_fn '{other}' is not supported (Sigmoid, Identity)"),
            )),
        }
    }
}

/// The one-label classification head over the first token's state `h₀`:
/// `out(tanh(dense(h₀)))`. BERT names `dense` `{prefix}pooler.dense` and `out` `classifier`;
/// XLM-RoBERTa `classifier.dense` and `classifier.out_proj`.
struct ClassifierHead {
    dense: EncoderLinear,
    out: EncoderLinear,
}

impl ClassifierHead {
    /// Loads the head of the encoder (width `d`, tensors under `prefix`) from `store`.
    fn load(store: &dyn TensorStore, prefix: &str, d: usize) -> Result<Self, LoadError> {
        let (dense, out) = if store.get("classifier.out_proj.weight").is_some() {
            (
                "classifier.dense.weight".to_string(),
                "classifier.out_proj.weight",
            )
        } else {
            (format!("{prefix}pooler.dense.weight"), "classifier.weight")
        };
        let dense = EncoderLinear::load(store, &dense, d, d)?;
        let out = EncoderLinear::load(store, out, 1, d).map_err(|e| {
            LoadError::malformed(
                store.path(),
                format!("a reranker needs a one-label {out} [1, {d}]: {e}"),
            )
        })?;
        Ok(ClassifierHead { dense, out })
    }

    /// Logits of the first-token states `h0` (`[n, d]`): `[n]`.
    fn forward(&self, h0: &[f32], n: usize) -> Vec<f32> {
        let mut pooled = self.dense.forward(h0, n);
        pooled.iter_mut().for_each(|v| *v = v.tanh());
        self.out.forward(&pooled, n)
    }
}

/// What turns a (query, document) input into a logit.
enum Scorer {
    /// A BERT-style encoder and its classification head; inputs made by the tokenizer's
    /// post-processor.
    Classifier {
        encoder: Box<Bert>,
        head: Box<ClassifierHead>,
        template: InputTemplate,
    },
    /// A causal LM's `yes − no` logit.
    YesNo(Box<YesNo>),
}

/// A loaded reranker (cross-encoder or yes/no causal LM) with its tokenizer.
pub struct CrossEncoder {
    scorer: Scorer,
    activation: ScoreActivation,
    tokenizer: Tokenizer,
    max_tokens: usize,
    source: PathBuf,
}

impl std::fmt::Debug for CrossEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrossEncoder")
            .field("source", &self.source)
            .field("max_tokens", &self.max_tokens)
            .field("activation", &self.activation)
            .finish_non_exhaustive()
    }
}

/// One scored document.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ranked {
    /// Position of the document in the input.
    pub index: usize,
    /// Its relevance score (after the model's activation).
    pub score: f32,
}

impl CrossEncoder {
    /// Loads the reranker folder `dir`: a cross-encoder (`config.json` with
    /// `BertForSequenceClassification` or `XLMRobertaForSequenceClassification`,
    /// `model.safetensors`, `tokenizer.json`) or a Qwen3-Reranker-style causal LM.
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        Self::load_quantized(dir, None)
    }

    /// [`Self::load`] with the weight matrices converted to `quant` on load
    /// ([`crate::quant::convert`], as [`crate::embed::TextEncoder::load_quantized`] does for
    /// embedding models: the encoder's or the causal LM's projections and the classification
    /// head then run on the quantized matmul kernels); `None`: as stored.
    pub fn load_quantized(dir: &Path, quant: Option<Precision>) -> Result<Self, LoadError> {
        if !is_reranker_model(dir) {
            return Err(LoadError::malformed(
                dir,
                "not a reranker: expected a cross-encoder folder (config.json with \
                 BertForSequenceClassification, model.safetensors, tokenizer.json) or a \
                 Qwen3ForCausalLM folder whose name contains \"reranker\"",
            ));
        }
        if is_yes_no_reranker(dir) {
            let tok_path = dir.join("tokenizer.json");
            let tok_cfg = dir.join("tokenizer_config.json");
            let tokenizer =
                Tokenizer::from_files(&tok_path, tok_cfg.is_file().then_some(&*tok_cfg))
                    .map_err(|e| LoadError::malformed(&tok_path, e.to_string()))?;
            let model = YesNo::load(dir, &tokenizer, quant)?;
            return Ok(CrossEncoder {
                max_tokens: model.max_tokens(),
                scorer: Scorer::YesNo(Box::new(model)),
                activation: ScoreActivation::Sigmoid,
                tokenizer,
                source: dir.to_path_buf(),
            });
        }
        let cfg_path = dir.join("config.json");
        let cfg_json = read_json(&cfg_path)?;
        let model_type = cfg_json
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !ENCODER_MODEL_TYPES.contains(&model_type) {
            return Err(LoadError::UnsupportedArch {
                path: cfg_path,
                arch: model_type.to_string(),
                supported: "bert, xlm-roberta (rerankers)".to_string(),
            });
        }
        let cfg = BertConfig::from_json(&cfg_path, &cfg_json)?;
        let st = SafetensorsModel::open(dir)?;
        let converted = crate::quant::convert_to(&st, quant)?;
        let store = Overlay::new(&st, converted.as_ref());
        let prefix = tensor_prefix(&store);
        let encoder = Bert::load(&cfg, &store, prefix)?;
        let head = ClassifierHead::load(&store, prefix, cfg.hidden_size)?;
        let st_path = dir.join("config_sentence_transformers.json");
        let named = read_json(&st_path)
            .ok()
            .and_then(|v| {
                Some((
                    st_path.clone(),
                    v.get("activation_fn")?.as_str()?.to_string(),
                ))
            })
            .or_else(|| {
                let v = cfg_json
                    .get("sentence_transformers")?
                    .get("activation_fn")?;
                Some((cfg_path.clone(), v.as_str()?.to_string()))
            });
        let activation = match named {
            Some((path, name)) => ScoreActivation::parse(&path, &name)?,
            None => ScoreActivation::Sigmoid,
        };
        let (tokenizer, template, model_max) = super::load_tokenizer(dir)?;
        let max_tokens = model_max.unwrap_or(cfg.max_tokens()).min(cfg.max_tokens());
        Ok(CrossEncoder {
            scorer: Scorer::Classifier {
                encoder: Box::new(encoder),
                head: Box::new(head),
                template,
            },
            activation,
            tokenizer,
            max_tokens,
            source: dir.to_path_buf(),
        })
    }

    /// The longest pair input in tokens, specials included.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// The folder the model was loaded from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// The score activation.
    pub fn activation(&self) -> ScoreActivation {
        self.activation
    }

    /// The input of (`query`, `document`): specials added, token types 0 / 1, cut
    /// `longest_first` to [`max_tokens`](Self::max_tokens) when `truncate`, else an error
    /// naming document `index` when too long (a yes/no reranker: its prompt,
    /// [`YesNo::encode_pair`]).
    pub fn encode_pair(
        &self,
        index: usize,
        query: &str,
        document: &str,
        truncate: bool,
    ) -> Result<Encoded> {
        self.encode_instructed_pair(index, None, query, document, truncate)
    }

    /// [`encode_pair`](Self::encode_pair) with the task `instruction` of a yes/no reranker in
    /// place of the model card's default ([`super::yes_no::DEFAULT_INSTRUCTION`]); `None`: the
    /// default. A cross-encoder takes no instruction: `Some` is an error for it.
    pub fn encode_instructed_pair(
        &self,
        index: usize,
        instruction: Option<&str>,
        query: &str,
        document: &str,
        truncate: bool,
    ) -> Result<Encoded> {
        let template = match &self.scorer {
            Scorer::YesNo(m) => {
                let pair = (query, document);
                return m.encode_pair(&self.tokenizer, index, instruction, pair, truncate);
            }
            Scorer::Classifier { .. } if instruction.is_some() => {
                return Err(Error::Request(
                    "this reranker is a cross-encoder, which takes no instruction (only \
                     Qwen3-Reranker-style models do)"
                        .into(),
                ))
            }
            Scorer::Classifier { template, .. } => template,
        };
        let tok = |t: &str| {
            self.tokenizer
                .encode(t, false)
                .map_err(|e| Error::Tokenizer(e.to_string()))
        };
        let (q, d) = (tok(query)?, tok(document)?);
        let n = q.len() + d.len() + template.added_tokens(true);
        if !truncate && n > self.max_tokens {
            return Err(Error::Request(format!(
                "document {index}: the pair has {n} tokens, more than the model's limit of {} \
                 (truncation is off)",
                self.max_tokens
            )));
        }
        template
            .apply(&q, Some(&d), Some(self.max_tokens))
            .ok_or_else(|| {
                Error::Request(format!(
                    "the model's limit of {} tokens leaves no room for text",
                    self.max_tokens
                ))
            })
    }

    /// The logits of encoded pairs, one per pair, in order (before the activation): the
    /// classifier's, or a yes/no reranker's `yes − no`.
    pub fn logits(&self, pairs: &[Encoded]) -> Result<Vec<f32>> {
        let (encoder, head) = match &self.scorer {
            Scorer::Classifier { encoder, head, .. } => (encoder, head),
            Scorer::YesNo(m) => {
                let mut out = Vec::with_capacity(pairs.len());
                for chunk in pairs.chunks(PAIRS_PER_PASS) {
                    out.extend(m.logits(chunk)?);
                }
                return Ok(out);
            }
        };
        let d = encoder.config().hidden_size;
        let mut out = Vec::with_capacity(pairs.len());
        for chunk in pairs.chunks(PAIRS_PER_PASS) {
            let batch: Vec<EncoderInput<'_>> = chunk
                .iter()
                .map(|e| EncoderInput {
                    ids: &e.ids,
                    type_ids: &e.type_ids,
                })
                .collect();
            let hidden = encoder.forward(&batch)?;
            let mut cls = Vec::with_capacity(chunk.len() * d);
            let mut row = 0;
            for e in chunk {
                cls.extend_from_slice(&hidden[row * d..(row + 1) * d]);
                row += e.ids.len();
            }
            out.extend(head.forward(&cls, chunk.len()));
        }
        Ok(out)
    }

    /// The relevance score of each document to `query`, in document order.
    pub fn score(&self, query: &str, documents: &[&str], truncate: bool) -> Result<Vec<f32>> {
        self.score_instructed(None, query, documents, truncate)
    }

    /// [`score`](Self::score) with a yes/no reranker's task `instruction`
    /// ([`encode_instructed_pair`](Self::encode_instructed_pair)).
    pub fn score_instructed(
        &self,
        instruction: Option<&str>,
        query: &str,
        documents: &[&str],
        truncate: bool,
    ) -> Result<Vec<f32>> {
        let pairs = documents
            .iter()
            .enumerate()
            .map(|(i, d)| self.encode_instructed_pair(i, instruction, query, d, truncate))
            .collect::<Result<Vec<_>>>()?;
        self.scores_of(&pairs)
    }

    /// Scores (after the activation) of encoded pairs, in order.
    pub fn scores_of(&self, pairs: &[Encoded]) -> Result<Vec<f32>> {
        if let Some(i) = pairs.iter().position(|e| e.ids.is_empty()) {
            return Err(Error::Request(format!("document {i} has no tokens")));
        }
        Ok(self
            .logits(pairs)?
            .into_iter()
            .map(|x| self.activation.apply(x))
            .collect())
    }
}

/// The documents of `scores` ordered by score, highest first (ties: input order), at most
/// `top_n` of them (`None`: all).
pub fn rank(scores: &[f32], top_n: Option<usize>) -> Vec<Ranked> {
    let mut r: Vec<Ranked> = scores
        .iter()
        .enumerate()
        .map(|(index, &score)| Ranked { index, score })
        .collect();
    r.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
    r.truncate(top_n.unwrap_or(usize::MAX));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_orders_by_score_then_index() {
        let r = rank(&[0.1, 0.9, 0.5, 0.9], Some(3));
        let idx: Vec<usize> = r.iter().map(|x| x.index).collect();
        assert_eq!(idx, [1, 3, 2]);
        assert_eq!(rank(&[1.0], None).len(), 1);
    }

    #[test]
    fn activations_parse_by_class_name() {
        let p = Path::new("x");
        assert_eq!(
            ScoreActivation::parse(p, "torch.nn.modules.activation.Sigmoid").unwrap(),
            ScoreActivation::Sigmoid
        );
        assert_eq!(
            ScoreActivation::parse(p, "torch.nn.modules.linear.Identity").unwrap(),
            ScoreActivation::Identity
        );
        assert!(ScoreActivation::parse(p, "torch.nn.Tanh").is_err());
    }
}
