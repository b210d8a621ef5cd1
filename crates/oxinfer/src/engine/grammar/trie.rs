//! The vocabulary's token bytes as a prefix trie, built once per model, so the tokens a
//! matcher allows are found by walking only the byte prefixes it accepts: a token is checked
//! through its shared prefix once, and a rejected byte prunes every token below it. The cost
//! of a walk follows the allowed prefixes, not the size of the vocabulary.

use super::JsonMatcher;

/// A byte trie over token ids, stored flat: node `i`'s children are
/// `child_byte/child_node[child_start[i]..child_start[i + 1]]` (sorted by byte) and the tokens
/// spelled by its path are `token_ids[token_start[i]..token_start[i + 1]]`. Node 0 is the root
/// (the empty prefix).
#[derive(Debug, Default)]
pub struct TokenTrie {
    child_start: Vec<u32>,
    child_byte: Vec<u8>,
    child_node: Vec<u32>,
    token_start: Vec<u32>,
    token_ids: Vec<u32>,
}

/// A node while building: children (byte, node) and the tokens ending here.
#[derive(Default)]
struct BuildNode {
    children: Vec<(u8, u32)>,
    tokens: Vec<u32>,
}

impl TokenTrie {
    /// The trie of `tokens` (id = index) for which `include(id)` holds; empty tokens are left
    /// out.
    pub fn new(tokens: &[Vec<u8>], include: impl Fn(u32) -> bool) -> Self {
        let mut build = vec![BuildNode::default()];
        for (id, bytes) in tokens.iter().enumerate() {
            let id = id as u32;
            if bytes.is_empty() || !include(id) {
                continue;
            }
            let mut node = 0usize;
            for &b in bytes {
                let found = build[node].children.iter().find(|c| c.0 == b).map(|c| c.1);
                node = match found {
                    Some(n) => n as usize,
                    None => {
                        let n = build.len();
                        build.push(BuildNode::default());
                        build[node].children.push((b, n as u32));
                        n
                    }
                };
            }
            build[node].tokens.push(id);
        }
        let mut t = TokenTrie::default();
        for node in &mut build {
            node.children.sort_unstable();
            t.child_start.push(t.child_byte.len() as u32);
            t.token_start.push(t.token_ids.len() as u32);
            for &(b, n) in &node.children {
                t.child_byte.push(b);
                t.child_node.push(n);
            }
            t.token_ids.extend_from_slice(&node.tokens);
        }
        t.child_start.push(t.child_byte.len() as u32);
        t.token_start.push(t.token_ids.len() as u32);
        t
    }

    fn children(&self, node: usize) -> impl Iterator<Item = (u8, usize)> + '_ {
        let r = self.child_start[node] as usize..self.child_start[node + 1] as usize;
        self.child_byte[r.clone()]
            .iter()
            .zip(&self.child_node[r])
            .map(|(&b, &n)| (b, n as usize))
    }

    fn tokens(&self, node: usize) -> &[u32] {
        &self.token_ids[self.token_start[node] as usize..self.token_start[node + 1] as usize]
    }

    /// Appends to `out` every token whose whole byte string `matcher` accepts; `first[b]`
    /// says whether it accepts the single byte `b` (a filter for the root's children).
    pub fn allowed(&self, matcher: &JsonMatcher, first: &[bool; 256], out: &mut Vec<u32>) {
        if self.child_start.len() < 2 {
            return;
        }
        // Nodes still to expand, with the matcher after their prefix.
        let mut stack: Vec<(usize, JsonMatcher)> = Vec::new();
        for (b, child) in self.children(0) {
            if !first[b as usize] {
                continue;
            }
            self.enter(matcher, b, child, out, &mut stack);
        }
        while let Some((node, m)) = stack.pop() {
            for (b, child) in self.children(node) {
                self.enter(&m, b, child, out, &mut stack);
            }
        }
    }

    /// Feeds byte `b` to a copy of `m`; if accepted, records `child`'s tokens and queues it.
    fn enter(
        &self,
        m: &JsonMatcher,
        b: u8,
        child: usize,
        out: &mut Vec<u32>,
        stack: &mut Vec<(usize, JsonMatcher)>,
    ) {
        let mut next = m.clone();
        if !next.push(b) {
            return;
        }
        out.extend_from_slice(self.tokens(child));
        if self.child_start[child] < self.child_start[child + 1] {
            stack.push((child, next));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Constraint, Grammar, Vocabulary};
    use crate::engine::sampler::Rng;
    use serde_json::json;
    use std::sync::Arc;

    /// Masks agree with checking every token on its own (the definition), for every `need`.
    #[test]
    fn trie_masks_equal_per_token_checks() {
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        for t in [
            "{\"", "\":", "\": \"", "\",", "\"}", "}", "]", "[", ", ", "true", "null", "12", "-3",
            "0.", "e5", "abc", "ab", "a", "é", "😀", "\\n", "\\u00e9", "\"a\"", "x\"",
        ] {
            tokens.push(t.as_bytes().to_vec());
        }
        let eos = tokens.len() as u32;
        tokens.push(Vec::new());
        let vocab = Arc::new(Vocabulary::from_tokens(tokens.clone(), vec![eos]));
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "string", "pattern": "^[a-c]*$", "maxLength": 5},
            "n": {"type": "integer", "minimum": -5, "maximum": 120},
            "l": {"type": "array", "items": {"enum": [true, null, "x"]}}},
            "required": ["a", "n", "l"]});
        let grammar = Arc::new(Grammar::from_schema(&schema).unwrap());
        let mut rng = Rng::new(7);
        let mut c = Constraint::new(grammar, vocab.clone());
        for _ in 0..60 {
            let logits: Vec<f32> = (0..=eos).map(|_| rng.next_f64() as f32).collect();
            let reference: Vec<u32> = (0..=eos)
                .filter(|&id| {
                    if id == eos {
                        c.is_complete()
                    } else {
                        !c.is_finished()
                            && !tokens[id as usize].is_empty()
                            && c.matcher.accepts(&tokens[id as usize])
                    }
                })
                .collect();
            for need in [0, 1, 3, 1000] {
                let mut l = logits.clone();
                let n = c.mask(&mut l, need);
                let mut kept: Vec<u32> = (0..=eos).filter(|&i| l[i as usize].is_finite()).collect();
                let mut want = reference.clone();
                want.sort_by(|a, b| logits[*b as usize].total_cmp(&logits[*a as usize]));
                if need > 0 {
                    want.truncate(need);
                }
                want.sort_unstable();
                kept.sort_unstable();
                assert_eq!(n, want.len(), "need {need}");
                if !want.is_empty() {
                    assert_eq!(kept, want, "need {need}");
                }
            }
            if reference.is_empty() || c.is_finished() {
                break;
            }
            let pick = reference[(rng.next_u64() % reference.len() as u64) as usize];
            if pick == eos {
                break;
            }
            assert!(c.advance(pick));
        }
    }
}
