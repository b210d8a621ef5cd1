//! Rank-ordered BPE built on the `tokenizers` crate, in two spellings:
//! * byte-level (GGUF `tokenizer.ggml.model = "gpt2"`): the family's regular expressions split
//!   the text, GPT-2's byte table spells each piece, and the merges (rank order) build tokens;
//! * SentencePiece-style (GGUF `tokenizer.ggml.model = "gemma4"`, llama.cpp's
//!   `LLAMA_VOCAB_PRE_TYPE_GEMMA4`): spaces become `▁`, the text is split only into runs of
//!   newlines and runs of anything else, merges run on the raw UTF-8 characters, and characters
//!   left outside the vocabulary fall back to `<0xXX>` byte tokens. A run of newlines that is a
//!   vocabulary entry is taken whole (llama.cpp's Gemma 4 rule, which matches the reference
//!   `tokenizers` output).

use std::collections::{HashMap, HashSet};

use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{
    Model, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer, SplitDelimiterBehavior,
};

use super::pretokenize::PreTokenizer as Family;
use super::vocab::Vocab;

/// A BPE model with its pre-tokenizer.
pub(crate) struct BpeModel {
    model: BPE,
    /// Byte-level: the pre-tokenizer sequence. SentencePiece-style: `None`.
    pre: Option<Sequence>,
    /// SentencePiece-style only: the vocabulary, for runs of newlines taken whole.
    newline_runs: HashMap<String, u32>,
}

impl std::fmt::Debug for BpeModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BpeModel").finish_non_exhaustive()
    }
}

impl BpeModel {
    /// Builds the model from the vocabulary and the `"left right"` merge strings. Merges whose
    /// parts or result are not in the vocabulary can never apply and are dropped; a repeated merge
    /// keeps its first (best) rank, as in llama.cpp.
    pub fn new(vocab: &Vocab, merges: &[String], family: &Family) -> Result<Self, String> {
        let model = Self::bpe(vocab, merges, family.ignore_merges, false)?;
        let mut steps: Vec<PreTokenizerWrapper> = Vec::with_capacity(family.regexes.len() + 1);
        for re in &family.regexes {
            let split = Split::new(
                SplitPattern::Regex((*re).to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| format!("pre-tokenizer regex {re:?}: {e}"))?;
            steps.push(split.into());
        }
        steps.push(ByteLevel::new(false, false, false).into());
        Ok(BpeModel {
            model,
            pre: Some(Sequence::new(steps)),
            newline_runs: HashMap::new(),
        })
    }

    /// The SentencePiece-style model (GGUF `tokenizer.ggml.model = "gemma4"`): merges on raw
    /// UTF-8 with `<0xXX>` byte fallback, spaces written as `▁` by [`BpeModel::encode`].
    pub fn new_spm_style(vocab: &Vocab, merges: &[String]) -> Result<Self, String> {
        let model = Self::bpe(vocab, merges, false, true)?;
        let newline_runs = vocab
            .to_id
            .iter()
            .filter(|(k, _)| !k.is_empty() && k.bytes().all(|b| b == b'\n'))
            .map(|(k, &v)| (k.clone(), v))
            .collect();
        Ok(BpeModel {
            model,
            pre: None,
            newline_runs,
        })
    }

    fn bpe(
        vocab: &Vocab,
        merges: &[String],
        ignore_merges: bool,
        byte_fallback: bool,
    ) -> Result<BPE, String> {
        let map: HashMap<&str, u32> = vocab.to_id.iter().map(|(k, &v)| (k.as_str(), v)).collect();
        let mut seen = HashSet::with_capacity(merges.len());
        let mut pairs = Vec::with_capacity(merges.len());
        for m in merges {
            // llama.cpp splits at the first space after the first byte.
            let bytes = m.as_bytes();
            let Some(pos) = bytes.iter().skip(1).position(|&b| b == b' ').map(|p| p + 1) else {
                continue;
            };
            let (a, b) = (&m[..pos], &m[pos + 1..]);
            if a.is_empty() || b.is_empty() {
                continue;
            }
            let joined = format!("{a}{b}");
            if !(map.contains_key(a) && map.contains_key(b) && map.contains_key(joined.as_str())) {
                continue;
            }
            if seen.insert((a.to_string(), b.to_string())) {
                pairs.push((a.to_string(), b.to_string()));
            }
        }
        let ordered: tokenizers::models::bpe::Vocab =
            vocab.to_id.iter().map(|(k, &v)| (k.clone(), v)).collect();
        BPE::builder()
            .vocab_and_merges(ordered, pairs)
            .ignore_merges(ignore_merges)
            .byte_fallback(byte_fallback)
            .build()
            .map_err(|e| e.to_string())
    }

    /// Appends the ids of `text` (a fragment without special tokens) to `out`.
    pub fn encode(&self, text: &str, out: &mut Vec<u32>) -> Result<(), String> {
        if text.is_empty() {
            return Ok(());
        }
        let Some(pre) = &self.pre else {
            return self.encode_spm_style(text, out);
        };
        let mut pts = PreTokenizedString::from(text);
        pre.pre_tokenize(&mut pts).map_err(|e| e.to_string())?;
        pts.tokenize(|piece| self.model.tokenize(piece.get()))
            .map_err(|e| e.to_string())?;
        for (_, _, tokens) in pts.get_splits(OffsetReferential::Original, OffsetType::None) {
            if let Some(tokens) = tokens {
                out.extend(tokens.iter().map(|t| t.id));
            }
        }
        Ok(())
    }

    /// SentencePiece-style encoding: `▁` for spaces, pieces split at newline runs.
    fn encode_spm_style(&self, text: &str, out: &mut Vec<u32>) -> Result<(), String> {
        let escaped = text.replace(' ', "\u{2581}");
        let mut rest = escaped.as_str();
        while !rest.is_empty() {
            let newlines = rest.starts_with('\n');
            let end = rest
                .find(|c: char| (c == '\n') != newlines)
                .unwrap_or(rest.len());
            let (piece, tail) = rest.split_at(end);
            rest = tail;
            if let Some(&id) = newlines.then(|| self.newline_runs.get(piece)).flatten() {
                out.push(id);
                continue;
            }
            let tokens = self.model.tokenize(piece).map_err(|e| e.to_string())?;
            out.extend(tokens.iter().map(|t| t.id));
        }
        Ok(())
    }
}
