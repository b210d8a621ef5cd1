//! Splitting special tokens out of text before the model runs, the way llama.cpp's
//! `tokenizer_st_partition` does with `parse_special = true`: every control, user-defined and
//! unknown token, longest text first, is cut out of the text fragments that remain.

use std::ops::Range;

use super::vocab::{TokenKind, Vocab};

/// A piece of the input: raw text (a byte range of the input) or a token matched verbatim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// Text still to be tokenized by the model.
    Text(Range<usize>),
    /// A special token found in the text.
    Token(u32),
}

/// A byte trie node.
#[derive(Clone, Debug, Default)]
struct Node {
    /// Children sorted by byte.
    next: Vec<(u8, u32)>,
    /// Index into `SpecialMatcher::order` of the token ending here.
    term: Option<u32>,
}

/// The special tokens of a vocabulary, in matching order, with a trie to find which of them occur
/// in a text at all (so that a vocabulary with thousands of them stays fast).
#[derive(Clone, Debug, Default)]
pub(crate) struct SpecialMatcher {
    /// (text, id) sorted by text length, longest first (ties by id).
    order: Vec<(String, u32)>,
    nodes: Vec<Node>,
}

impl SpecialMatcher {
    /// The matcher for every token whose kind is matched in text.
    pub fn new(vocab: &Vocab) -> Self {
        Self::of_kinds(vocab, TokenKind::is_matched_in_text)
    }

    /// The matcher for the tokens whose kind `keep` accepts (empty texts never match).
    pub fn of_kinds(vocab: &Vocab, keep: impl Fn(TokenKind) -> bool) -> Self {
        let mut order: Vec<(String, u32)> = (0..vocab.len())
            .filter(|&i| keep(vocab.kinds[i]) && !vocab.texts[i].is_empty())
            .map(|i| (vocab.texts[i].clone(), i as u32))
            .collect();
        order.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        let mut m = SpecialMatcher {
            order,
            nodes: vec![Node::default()],
        };
        for i in 0..m.order.len() {
            let bytes = m.order[i].0.clone().into_bytes();
            let mut node = 0usize;
            for &b in &bytes {
                node = match m.nodes[node].next.binary_search_by_key(&b, |e| e.0) {
                    Ok(k) => m.nodes[node].next[k].1 as usize,
                    Err(k) => {
                        let new = m.nodes.len();
                        m.nodes.push(Node::default());
                        m.nodes[node].next.insert(k, (b, new as u32));
                        new
                    }
                };
            }
            if m.nodes[node].term.is_none() {
                m.nodes[node].term = Some(i as u32);
            }
        }
        m
    }

    /// Whether there are no special tokens.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Whether any of the tokens occurs in `text`.
    pub fn occurs_in(&self, text: &str) -> bool {
        !self.is_empty() && !self.present(text.as_bytes()).is_empty()
    }

    /// Indices (into `order`) of the special tokens that occur somewhere in `text`, ascending.
    fn present(&self, text: &[u8]) -> Vec<usize> {
        let mut found = vec![false; self.order.len()];
        let mut any = false;
        for start in 0..text.len() {
            let mut node = 0usize;
            for &b in &text[start..] {
                match self.nodes[node].next.binary_search_by_key(&b, |e| e.0) {
                    Ok(k) => node = self.nodes[node].next[k].1 as usize,
                    Err(_) => break,
                }
                if let Some(t) = self.nodes[node].term {
                    found[t as usize] = true;
                    any = true;
                }
            }
        }
        if !any {
            return Vec::new();
        }
        found
            .iter()
            .enumerate()
            .filter_map(|(i, &f)| f.then_some(i))
            .collect()
    }

    /// Splits `text` into fragments: for each special token in turn (longest first), every
    /// occurrence in every remaining text fragment becomes a token fragment, left to right.
    pub fn partition(&self, text: &str) -> Vec<Fragment> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut frags = vec![Fragment::Text(0..text.len())];
        if self.is_empty() {
            return frags;
        }
        for idx in self.present(text.as_bytes()) {
            let (pat, id) = (&self.order[idx].0, self.order[idx].1);
            let mut next = Vec::with_capacity(frags.len() + 2);
            for frag in frags {
                let range = match frag {
                    Fragment::Text(r) => r,
                    tok => {
                        next.push(tok);
                        continue;
                    }
                };
                let mut pos = range.start;
                for (off, m) in text[range.clone()].match_indices(pat.as_str()) {
                    let at = range.start + off;
                    if at > pos {
                        next.push(Fragment::Text(pos..at));
                    }
                    next.push(Fragment::Token(id));
                    pos = at + m.len();
                }
                if pos < range.end {
                    next.push(Fragment::Text(pos..range.end));
                }
            }
            frags = next;
        }
        frags
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(items: &[(&str, TokenKind)]) -> Vocab {
        Vocab::new(
            items.iter().map(|i| i.0.to_string()).collect(),
            items.iter().map(|i| i.1).collect(),
            vec![0.0; items.len()],
        )
    }

    #[test]
    fn longest_first_and_all_occurrences() {
        let v = vocab(&[
            ("a", TokenKind::Normal),
            ("<s>", TokenKind::Control),
            ("<s><s>", TokenKind::Control),
            ("  ", TokenKind::UserDefined),
        ]);
        let m = SpecialMatcher::new(&v);
        let parts = m.partition("x<s><s>y<s>  z");
        assert_eq!(
            parts,
            vec![
                Fragment::Text(0..1),
                Fragment::Token(2),
                Fragment::Text(7..8),
                Fragment::Token(1),
                Fragment::Token(3),
                Fragment::Text(13..14),
            ]
        );
        assert_eq!(m.partition("plain"), vec![Fragment::Text(0..5)]);
        assert!(m.partition("").is_empty());
    }
}
