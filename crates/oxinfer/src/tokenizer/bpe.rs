//! Byte-level BPE (GGUF `tokenizer.ggml.model = "gpt2"`), built on the `tokenizers` crate: the
//! family's regular expressions split the text, GPT-2's byte table spells each piece, and the
//! merges (rank order) build tokens.

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

/// A byte-level BPE model with its pre-tokenizer.
pub(crate) struct BpeModel {
    model: BPE,
    pre: Sequence,
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
        let model = BPE::builder()
            .vocab_and_merges(ordered, pairs)
            .ignore_merges(family.ignore_merges)
            .build()
            .map_err(|e| e.to_string())?;
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
            pre: Sequence::new(steps),
        })
    }

    /// Appends the ids of `text` (a fragment without special tokens) to `out`.
    pub fn encode(&self, text: &str, out: &mut Vec<u32>) -> Result<(), String> {
        if text.is_empty() {
            return Ok(());
        }
        let mut pts = PreTokenizedString::from(text);
        self.pre.pre_tokenize(&mut pts).map_err(|e| e.to_string())?;
        pts.tokenize(|piece| self.model.tokenize(piece.get()))
            .map_err(|e| e.to_string())?;
        for (_, _, tokens) in pts.get_splits(OffsetReferential::Original, OffsetType::None) {
            if let Some(tokens) = tokens {
                out.extend(tokens.iter().map(|t| t.id));
            }
        }
        Ok(())
    }
}
