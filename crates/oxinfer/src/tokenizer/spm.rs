//! SentencePiece-style BPE (GGUF `tokenizer.ggml.model = "llama"`), written the way llama.cpp's
//! `llm_tokenizer_spm_session` works: the text (spaces already written as `▁`) starts as one
//! symbol per UTF-8 character; the adjacent pair whose concatenation is the vocabulary entry with
//! the highest score merges first (ties: leftmost); symbols that end up outside the vocabulary are
//! written as byte-fallback tokens `<0xXX>`.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::vocab::Vocab;

/// The SentencePiece escape for a space.
pub(crate) const SPACE: char = '\u{2581}';

/// A symbol: a byte range of the text, linked to its neighbours.
#[derive(Clone, Copy, Debug)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of two adjacent symbols.
#[derive(Clone, Copy, Debug)]
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bigram {
    /// Higher score first; for equal scores the leftmost pair first (a max-heap pops the greatest).
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// The SentencePiece-style model: llama.cpp's flags plus the byte-fallback table.
#[derive(Clone, Debug)]
pub(crate) struct SpmModel {
    /// Whether a space is put before text that starts the input or follows a special token.
    pub add_space_prefix: bool,
    /// The token for each byte (`<0xXX>`, else the byte itself as a one-character token).
    byte_tokens: Box<[Option<u32>; 256]>,
    /// The token used when a byte has no token at all.
    unk: Option<u32>,
}

impl SpmModel {
    /// The model for `vocab`.
    pub fn new(vocab: &Vocab, add_space_prefix: bool, unk: Option<u32>) -> Self {
        let mut byte_tokens = Box::new([None; 256]);
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            *slot = vocab.id(&format!("<0x{b:02X}>")).or_else(|| {
                (b < 0x80)
                    .then(|| char::from(b as u8).to_string())
                    .and_then(|s| vocab.id(&s))
            });
        }
        SpmModel {
            add_space_prefix,
            byte_tokens,
            unk,
        }
    }

    /// Escapes a text fragment (space prefix, `▁` for spaces) and appends its ids to `out`.
    pub fn encode_fragment(
        &self,
        vocab: &Vocab,
        fragment: &str,
        after_special: bool,
        out: &mut Vec<u32>,
    ) {
        let mut text = String::with_capacity(fragment.len() + 3);
        if self.add_space_prefix && after_special {
            text.push(SPACE);
        }
        for c in fragment.chars() {
            text.push(if c == ' ' { SPACE } else { c });
        }
        self.tokenize(vocab, &text, out);
    }

    /// Tokenizes already-escaped text.
    fn tokenize(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        for (start, c) in text.char_indices() {
            let i = symbols.len();
            symbols.push(Symbol {
                start,
                len: c.len_utf8(),
                prev: i.checked_sub(1),
                next: Some(i + 1),
            });
        }
        let Some(last) = symbols.last_mut() else {
            return;
        };
        last.next = None;

        let mut queue = BinaryHeap::new();
        let try_add = |queue: &mut BinaryHeap<Bigram>, symbols: &[Symbol], l: usize, r: usize| {
            let (ls, rs) = (symbols[l], symbols[r]);
            let piece = &text[ls.start..ls.start + ls.len + rs.len];
            if let Some(id) = vocab.id(piece) {
                queue.push(Bigram {
                    left: l,
                    right: r,
                    score: vocab.scores.get(id as usize).copied().unwrap_or(0.0),
                    size: piece.len(),
                });
            }
        };
        for i in 1..symbols.len() {
            try_add(&mut queue, &symbols, i - 1, i);
        }
        while let Some(bigram) = queue.pop() {
            let (l, r) = (symbols[bigram.left], symbols[bigram.right]);
            // Stale: one side was merged away or grew since the pair was queued.
            if l.len == 0 || r.len == 0 || l.len + r.len != bigram.size {
                continue;
            }
            symbols[bigram.left].len += r.len;
            symbols[bigram.right].len = 0;
            symbols[bigram.left].next = r.next;
            if let Some(n) = r.next {
                symbols[n].prev = Some(bigram.left);
            }
            if let Some(p) = symbols[bigram.left].prev {
                try_add(&mut queue, &symbols, p, bigram.left);
            }
            if let Some(n) = symbols[bigram.left].next {
                try_add(&mut queue, &symbols, bigram.left, n);
            }
        }

        let mut cur = Some(0usize);
        while let Some(i) = cur {
            let s = symbols[i];
            let piece = &text[s.start..s.start + s.len];
            match vocab.id(piece) {
                Some(id) => out.push(id),
                None => {
                    // A merged symbol is always in the vocabulary, so only single characters
                    // get here: write their bytes.
                    for &b in piece.as_bytes() {
                        if let Some(id) = self.byte_tokens[b as usize].or(self.unk) {
                            out.push(id);
                        }
                    }
                }
            }
            cur = s.next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::vocab::TokenKind;
    use super::*;

    #[test]
    fn merges_by_score_and_falls_back_to_bytes() {
        let mut texts: Vec<String> = vec!["<unk>".into(), "▁".into(), "a".into(), "b".into()];
        texts.extend(["ab", "▁a", "▁ab"].map(String::from));
        texts.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
        let n = texts.len();
        let mut scores = vec![0.0; n];
        scores[4] = -1.0; // ab
        scores[5] = -0.5; // ▁a wins over ab
        scores[6] = -2.0; // ▁ab
        let mut kinds = vec![TokenKind::Normal; n];
        kinds[0] = TokenKind::Unknown;
        let vocab = Vocab::new(texts, kinds, scores);
        let spm = SpmModel::new(&vocab, true, Some(0));
        let mut out = Vec::new();
        spm.encode_fragment(&vocab, "ab", true, &mut out);
        // "▁ab": "▁a" (-0.5) merges before "ab" (-1), then "▁a"+"b" makes "▁ab".
        assert_eq!(out, vec![6]);
        out.clear();
        spm.encode_fragment(&vocab, "é", false, &mut out);
        assert_eq!(out, vec![7 + 0xC3, 7 + 0xA9]);
    }
}
