//! Qwen3-Reranker-style rerankers: a Qwen3 causal LM asked whether a document meets a query,
//! scored by its next-token logits of "yes" and "no". The input is the model card's:
//!
//! ```text
//! <|im_start|>system\nJudge whether the Document meets the requirements based on the Query and
//! the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n
//! <|im_start|>user\n  +  <Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}
//!   +  <|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n
//! ```
//!
//! with the three parts tokenized separately (no special tokens added), the middle one cut to
//! the model's limit (the card's `max_length` 8192, or the context if shorter) less the other
//! two. The score is `softmax(no, yes)[yes]`, which equals `sigmoid(yes − no)`: the logit
//! [`YesNo::logits`] gives is `yes − no` and the reranker's activation is the sigmoid.
//!
//! A folder is such a reranker ([`is_yes_no_reranker`]) when its `config.json` is a Qwen3 causal
//! LM (`model_type` `qwen3`, `Qwen3ForCausalLM`) and a component of its path names it a
//! reranker (`Qwen3-Reranker-0.6B`, the hub's `models--Qwen--Qwen3-Reranker-4B/...`): nothing
//! inside the published folders tells them from chat models.

use std::path::Path;

use serde_json::Value;

use super::decoder::DecoderStates;
use super::layout::read_json;
use super::template::Encoded;
use crate::error::{Error, LoadError, Result};
use crate::quant::Precision;
use crate::tokenizer::Tokenizer;

/// The model card's system turn and the start of the user turn.
pub const PREFIX: &str = "<|im_start|>system\nJudge whether the Document meets the requirements \
     based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \
     \"no\".<|im_end|>\n<|im_start|>user\n";

/// The model card's end of the user turn and the empty thinking block.
pub const SUFFIX: &str = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

/// The model card's default instruction.
pub const DEFAULT_INSTRUCTION: &str =
    "Given a web search query, retrieve relevant passages that answer the query";

/// The model card's `max_length`.
const CARD_MAX_LENGTH: usize = 8192;

/// Whether the folder `dir` holds a Qwen3-Reranker-style model (see the module doc).
pub fn is_yes_no_reranker(dir: &Path) -> bool {
    let named = dir.components().any(|c| {
        c.as_os_str()
            .to_string_lossy()
            .to_lowercase()
            .contains("reranker")
    });
    named
        && read_json(&dir.join("config.json"))
            .ok()
            .is_some_and(|v| is_qwen3_causal_lm(&v))
}

/// `model_type` `qwen3` with `Qwen3ForCausalLM` among the architectures.
fn is_qwen3_causal_lm(v: &Value) -> bool {
    v.get("model_type").and_then(Value::as_str) == Some("qwen3")
        && v.get("architectures")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|x| x.as_str() == Some("Qwen3ForCausalLM")))
}

/// A loaded yes/no reranker.
pub struct YesNo {
    decoder: DecoderStates,
    prefix: Vec<u32>,
    suffix: Vec<u32>,
    yes: u32,
    no: u32,
    max_tokens: usize,
}

impl YesNo {
    /// Loads the model of `dir` (`config.json`, safetensors, tokenized by `tokenizer`), its
    /// weight matrices converted to `quant` on load when given.
    pub fn load(
        dir: &Path,
        tokenizer: &Tokenizer,
        quant: Option<Precision>,
    ) -> Result<Self, LoadError> {
        let cfg_path = dir.join("config.json");
        let cfg_json = read_json(&cfg_path)?;
        if !is_qwen3_causal_lm(&cfg_json) {
            return Err(LoadError::field(
                &cfg_path,
                "a yes/no reranker must be a Qwen3ForCausalLM (model_type qwen3)",
            ));
        }
        let decoder = DecoderStates::load(dir, &cfg_path, &cfg_json, quant)?;
        let tok_path = dir.join("tokenizer.json");
        let token = |piece: &str| {
            tokenizer.token_id(piece).ok_or_else(|| {
                LoadError::malformed(
                    &tok_path,
                    format!("a yes/no reranker needs \"{piece}\" as one token"),
                )
            })
        };
        let encode = |text: &str| {
            tokenizer
                .encode(text, false)
                .map_err(|e| LoadError::malformed(&tok_path, e.to_string()))
        };
        let (prefix, suffix) = (encode(PREFIX)?, encode(SUFFIX)?);
        let (yes, no) = (token("yes")?, token("no")?);
        let vocab = decoder.config().vocab_size;
        if yes.max(no) as usize >= vocab {
            return Err(LoadError::malformed(
                &tok_path,
                format!("\"yes\" ({yes}) / \"no\" ({no}) outside the model's {vocab} logits"),
            ));
        }
        let max_tokens = CARD_MAX_LENGTH.min(decoder.config().context_length);
        if prefix.len() + suffix.len() >= max_tokens {
            return Err(LoadError::field(
                &cfg_path,
                format!("a context of {max_tokens} tokens leaves no room after the prompt"),
            ));
        }
        Ok(YesNo {
            yes,
            no,
            decoder,
            prefix,
            suffix,
            max_tokens,
        })
    }

    /// The longest input in tokens, prompt included.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// The input of (`query`, `document`) (see the module doc) with the task `instruction`
    /// (`None`: the model card's [`DEFAULT_INSTRUCTION`]), the middle part cut to the limit when
    /// `truncate`, else an error naming document `index` when it is too long.
    pub fn encode_pair(
        &self,
        tokenizer: &Tokenizer,
        index: usize,
        instruction: Option<&str>,
        (query, document): (&str, &str),
        truncate: bool,
    ) -> Result<Encoded> {
        let instruction = instruction.unwrap_or(DEFAULT_INSTRUCTION);
        let text = format!("<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}");
        let mut middle = tokenizer
            .encode(&text, false)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        let room = self.max_tokens - self.prefix.len() - self.suffix.len();
        if middle.len() > room {
            if !truncate {
                return Err(Error::Request(format!(
                    "document {index}: the input has {} tokens, more than the model's limit of \
                     {} (truncation is off)",
                    middle.len() + self.prefix.len() + self.suffix.len(),
                    self.max_tokens
                )));
            }
            middle.truncate(room);
        }
        let ids = [&self.prefix[..], &middle, &self.suffix].concat();
        Ok(Encoded {
            ids,
            ..Encoded::default()
        })
    }

    /// `yes − no` of the last position of each encoded pair, in order (the score is its
    /// sigmoid).
    pub fn logits(&self, pairs: &[Encoded]) -> Result<Vec<f32>> {
        let batch: Vec<&[u32]> = pairs.iter().map(|e| &e.ids[..]).collect();
        let rows = self.decoder.last_logits(&batch)?;
        Ok(rows
            .iter()
            .map(|r| r[self.yes as usize] - r[self.no as usize])
            .collect())
    }
}
