//! Constrained decoding: output forced to parse as JSON and validate against a JSON schema by
//! masking, at every step, the tokens whose text cannot continue a valid document (no retries).
//!
//! [`Grammar`] is the compiled schema, [`JsonMatcher`] the byte-level automaton, and
//! [`Constraint`] applies it to logits over a [`Vocabulary`].

mod analysis;
mod budget;
mod keywords;
mod matcher;
mod merge;
mod negate;
mod node;
mod numeric;
mod oneof;
mod regex;
mod schema;
mod trie;
mod unique;

pub use analysis::MAX_ALTERNATIVES;
pub use budget::{CompileLimits, DEFAULT_TIME, DEFAULT_WORK};
pub use matcher::JsonMatcher;
pub use node::{Grammar, Node, NodeId, MAX_ENUM_VALUES};
pub use regex::{MAX_GROUP_DEPTH, MAX_PATTERN_CHARS};
pub use schema::SchemaError;

use crate::tokenizer::Tokenizer;
use std::sync::Arc;
use trie::TokenTrie;

/// The bytes of every token and which ids are special or end generation, gathered once per
/// model, with the ordinary tokens in a byte trie (see [`trie`]) for masking.
#[derive(Debug)]
pub struct Vocabulary {
    bytes: Vec<Vec<u8>>,
    special: Vec<bool>,
    eos: Vec<u32>,
    /// Every token that is neither special nor end-of-generation.
    trie: TokenTrie,
}

impl Vocabulary {
    /// Reads `tok`'s vocabulary; `n_logits` is the width of the model's logits (may exceed the
    /// vocabulary: the extra ids are never allowed).
    pub fn new(tok: &Tokenizer, n_logits: usize) -> Self {
        let n = n_logits.max(tok.vocab_size());
        let mut bytes = Vec::with_capacity(n);
        let mut special = Vec::with_capacity(n);
        for id in 0..n as u32 {
            bytes.push(tok.token_bytes(id).unwrap_or_default().to_vec());
            special.push(tok.is_special(id) || tok.is_eog(id) || id as usize >= tok.vocab_size());
        }
        Self::with_trie(bytes, special, tok.eos_ids().to_vec())
    }

    fn with_trie(bytes: Vec<Vec<u8>>, special: Vec<bool>, eos: Vec<u32>) -> Self {
        let trie = TokenTrie::new(&bytes, |id| !special[id as usize] && !eos.contains(&id));
        Vocabulary {
            bytes,
            special,
            eos,
            trie,
        }
    }

    /// A vocabulary from token bytes (id = index) and end-of-generation ids; no special
    /// tokens besides those (tests, and tokenizers other than [`Tokenizer`]).
    pub fn from_tokens(bytes: Vec<Vec<u8>>, eos: Vec<u32>) -> Self {
        let special = vec![false; bytes.len()];
        Self::with_trie(bytes, special, eos)
    }

    /// The end-of-generation ids.
    pub fn eos(&self) -> &[u32] {
        &self.eos
    }
}

/// A JSON constraint on one generation.
#[derive(Clone, Debug)]
pub struct Constraint {
    matcher: JsonMatcher,
    vocab: Arc<Vocabulary>,
}

/// Tokens examined first (by descending logit) before sorting the whole vocabulary.
const FIRST_LOOK: usize = 512;

impl Constraint {
    /// A constraint to documents of `grammar`.
    pub fn new(grammar: Arc<Grammar>, vocab: Arc<Vocabulary>) -> Self {
        Constraint {
            matcher: JsonMatcher::new(grammar),
            vocab,
        }
    }

    /// Whether the text so far is a whole valid document.
    pub fn is_complete(&self) -> bool {
        self.matcher.is_complete()
    }

    /// Whether the document is complete and nothing may follow (objects and arrays end at their
    /// closing bracket; a top-level number could still grow).
    pub fn is_finished(&self) -> bool {
        self.matcher.is_finished()
    }

    /// Whether token `id` may come next; `first` says which first bytes the matcher takes.
    fn allowed(&self, id: u32, first: &[bool; 256]) -> bool {
        let i = id as usize;
        if self.vocab.eos.contains(&id) {
            return self.matcher.is_complete();
        }
        if self.matcher.is_finished() || self.vocab.special.get(i).copied().unwrap_or(true) {
            return false;
        }
        let b = &self.vocab.bytes[i];
        match b.len() {
            0 => false,
            1 => first[b[0] as usize],
            _ => first[b[0] as usize] && self.matcher.accepts(b),
        }
    }

    /// Which single bytes the matcher takes next (a cheap first filter over the vocabulary).
    fn first_bytes(&self) -> [bool; 256] {
        let mut first = [false; 256];
        for (b, ok) in first.iter_mut().enumerate() {
            *ok = self.matcher.accepts(&[b as u8]);
        }
        first
    }

    /// Every token that may come next (the ordinary ones found by a walk of the vocabulary
    /// trie over the prefixes the matcher accepts, then the end-of-generation ids if the
    /// document is complete), in no particular order.
    fn all_allowed(&self, first: &[bool; 256]) -> Vec<u32> {
        let mut out = Vec::new();
        if !self.matcher.is_finished() {
            self.vocab.trie.allowed(&self.matcher, first, &mut out);
        }
        if self.matcher.is_complete() {
            out.extend_from_slice(&self.vocab.eos);
        }
        out
    }

    /// Sets every logit whose token cannot continue a valid document to −∞. With `need > 0`
    /// only the `need` most likely allowed tokens stay (enough for greedy decoding or top-k);
    /// `need == 0` keeps every allowed token. Returns how many tokens stay allowed.
    ///
    /// Cost per call: the [`FIRST_LOOK`] most likely tokens are checked first; only when they
    /// hold fewer than `need` allowed ones (or `need == 0`) is the vocabulary trie walked, over
    /// the prefixes the grammar accepts, never token by token over the whole vocabulary.
    pub fn mask(&self, logits: &mut [f32], need: usize) -> usize {
        let by_logit = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]);
        let first = self.first_bytes();
        let mut keep = Vec::new();
        let mut order: Vec<u32> = Vec::new();
        if need > 0 {
            order = (0..logits.len() as u32)
                .filter(|&i| logits[i as usize].is_finite())
                .collect();
        }
        if need > 0 && order.len() > FIRST_LOOK {
            order.select_nth_unstable_by(FIRST_LOOK - 1, by_logit);
            order[..FIRST_LOOK].sort_by(by_logit);
            for &id in &order[..FIRST_LOOK] {
                if self.allowed(id, &first) {
                    keep.push(id);
                    if keep.len() == need {
                        break;
                    }
                }
            }
        }
        if need == 0 || keep.len() < need {
            keep = self.all_allowed(&first);
            keep.retain(|&id| logits.get(id as usize).is_some_and(|v| v.is_finite()));
            if need > 0 && keep.len() > need {
                // Ties by id, as a stable sort of the ids in order would keep them.
                keep.sort_unstable_by(|a, b| by_logit(a, b).then(a.cmp(b)));
                keep.truncate(need);
            }
        }
        let mut out = vec![f32::NEG_INFINITY; logits.len()];
        for &id in &keep {
            out[id as usize] = logits[id as usize];
        }
        if keep.is_empty() {
            // Nothing fits (a vocabulary without the needed bytes): end the generation.
            for &e in &self.vocab.eos {
                if let Some(v) = out.get_mut(e as usize) {
                    *v = 0.0;
                }
            }
        }
        logits.copy_from_slice(&out);
        keep.len()
    }

    /// Records the chosen token; false if it does not fit (the caller should stop).
    pub fn advance(&mut self, id: u32) -> bool {
        if self.vocab.eos.contains(&id) {
            return self.matcher.is_complete();
        }
        let Some(b) = self.vocab.bytes.get(id as usize) else {
            return false;
        };
        self.matcher.push_bytes(b)
    }
}

#[cfg(test)]
mod limit_tests;
#[cfg(test)]
mod regex_tests;
#[cfg(test)]
mod tests;
