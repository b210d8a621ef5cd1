//! Constrained decoding: output forced to parse as JSON and validate against a JSON schema by
//! masking, at every step, the tokens whose text cannot continue a valid document (no retries).
//!
//! [`Grammar`] is the compiled schema, [`JsonMatcher`] the byte-level automaton, and
//! [`Constraint`] applies it to logits over a [`Vocabulary`].

mod matcher;
mod merge;
mod negate;
mod numeric;
mod oneof;
mod regex;
mod schema;
mod unique;

pub use matcher::JsonMatcher;
pub use schema::{Grammar, Node, NodeId, SchemaError};

use crate::tokenizer::Tokenizer;
use std::sync::Arc;

/// The bytes of every token and which ids are special or end generation, gathered once per
/// model.
#[derive(Debug)]
pub struct Vocabulary {
    bytes: Vec<Vec<u8>>,
    special: Vec<bool>,
    eos: Vec<u32>,
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
        Vocabulary {
            bytes,
            special,
            eos: tok.eos_ids().to_vec(),
        }
    }

    /// A vocabulary from token bytes (id = index) and end-of-generation ids; no special
    /// tokens besides those (tests, and tokenizers other than [`Tokenizer`]).
    pub fn from_tokens(bytes: Vec<Vec<u8>>, eos: Vec<u32>) -> Self {
        let special = vec![false; bytes.len()];
        Vocabulary {
            bytes,
            special,
            eos,
        }
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

    /// Sets every logit whose token cannot continue a valid document to −∞. With `need > 0`
    /// only the `need` most likely allowed tokens stay (enough for greedy decoding or top-k);
    /// `need == 0` checks the whole vocabulary. Returns how many tokens stay allowed.
    pub fn mask(&self, logits: &mut [f32], need: usize) -> usize {
        let mut order: Vec<u32> = (0..logits.len() as u32)
            .filter(|&i| logits[i as usize].is_finite())
            .collect();
        let by_logit = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]);
        let first = self.first_bytes();
        let mut keep = Vec::new();
        let mut checked = 0;
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
            checked = FIRST_LOOK;
        }
        if need == 0 || keep.len() < need {
            order[checked..].sort_by(by_logit);
            for &id in &order[checked..] {
                if self.allowed(id, &first) {
                    keep.push(id);
                    if need > 0 && keep.len() == need {
                        break;
                    }
                }
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
mod tests;
