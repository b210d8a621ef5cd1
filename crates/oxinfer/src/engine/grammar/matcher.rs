//! A byte-at-a-time matcher of JSON text against a compiled [`Grammar`]: a pushdown automaton
//! whose stack mirrors the nesting of the value being written. It accepts exactly the prefixes
//! of texts that parse as JSON and validate against the grammar, so a decoder that only picks
//! tokens the matcher accepts always ends with a valid document.

use super::schema::{Grammar, Node, NodeId};
use std::sync::Arc;

/// Longest run of whitespace allowed between two JSON tokens (keeps a small model from
/// spinning in newlines forever).
const MAX_WS_RUN: u8 = 8;
/// Most digits of a number (integer part plus fraction plus exponent).
const MAX_NUMBER_LEN: u8 = 24;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ObjState {
    /// After `{`: a key or `}`.
    Open,
    /// After `,`: a key.
    Key,
    /// After a key: `:`.
    Colon,
    /// After a value: `,` or `}`.
    After,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NumState {
    Sign,
    Zero,
    Int,
    Dot,
    Frac,
    Exp,
    ExpSign,
    ExpDigits,
}

impl NumState {
    fn complete(self) -> bool {
        matches!(
            self,
            NumState::Zero | NumState::Int | NumState::Frac | NumState::ExpDigits
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Esc {
    None,
    /// After a backslash.
    Start,
    /// Inside `\uXXXX`: hex digits still to come, and whether the first one was `d`.
    Hex(u8, bool),
}

#[derive(Clone, Debug)]
enum Frame {
    /// A value of this node is expected next.
    Value(NodeId),
    Object {
        node: NodeId,
        st: ObjState,
        /// Bit per known key: already written.
        seen: u64,
        /// The value node of the key just written.
        pending: NodeId,
    },
    Array {
        node: NodeId,
        count: usize,
        /// After `[` (true) or after an element (false).
        open: bool,
    },
    /// A string value (`key: false`) or an object key (`key: true`, bytes kept in `buf` when
    /// the object has known keys).
    Str {
        key: bool,
        /// Key bytes are checked against the object's known keys.
        known: bool,
        min: usize,
        max: Option<usize>,
        chars: usize,
        esc: Esc,
        buf: Vec<u8>,
    },
    Number {
        integer: bool,
        st: NumState,
        /// Bytes so far.
        len: u8,
        /// Digits of the current part (integer, fraction or exponent).
        part: u8,
    },
    /// One of several exact texts: `alive` are the indices still matching, `pos` bytes read.
    Literal {
        node: NodeId,
        alive: Vec<u16>,
        pos: usize,
    },
}

/// Incremental JSON matcher. Cheap to clone (a small stack), so token candidates are tried on
/// clones.
#[derive(Clone, Debug)]
pub struct JsonMatcher {
    grammar: Arc<Grammar>,
    stack: Vec<Frame>,
    ws_run: u8,
}

impl JsonMatcher {
    /// A matcher at the start of a document of `grammar`'s root.
    pub fn new(grammar: Arc<Grammar>) -> Self {
        let root = grammar.root;
        JsonMatcher {
            grammar,
            stack: vec![Frame::Value(root)],
            ws_run: 0,
        }
    }

    /// Whether what was fed is a whole valid document.
    pub fn is_complete(&self) -> bool {
        match self.stack.as_slice() {
            [] => true,
            [Frame::Number { st, .. }] => st.complete(),
            [Frame::Literal { node, alive, pos }] => self.literal_done(*node, alive, *pos),
            _ => false,
        }
    }

    /// Whether nothing more can follow (the document is complete and cannot grow).
    pub fn is_finished(&self) -> bool {
        self.stack.is_empty()
    }

    /// Feeds `bytes`; false (with the matcher left part-way) when they cannot continue a valid
    /// document.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| self.push(b))
    }

    /// Whether `bytes` would be accepted, without changing the matcher.
    pub fn accepts(&self, bytes: &[u8]) -> bool {
        self.clone().push_bytes(bytes)
    }

    fn node(&self, id: NodeId) -> &Node {
        &self.grammar.nodes[id]
    }

    fn literal_done(&self, node: NodeId, alive: &[u16], pos: usize) -> bool {
        let Node::Literal(opts) = self.node(node) else {
            return false;
        };
        alive.iter().any(|&i| opts[i as usize].len() == pos)
    }

    fn ws(&mut self, b: u8) -> bool {
        if matches!(b, b' ' | b'\n' | b'\t' | b'\r') && self.ws_run < MAX_WS_RUN {
            self.ws_run += 1;
            true
        } else {
            false
        }
    }

    /// Feeds one byte.
    pub fn push(&mut self, b: u8) -> bool {
        loop {
            let Some(top) = self.stack.last_mut() else {
                return false;
            };
            match top {
                Frame::Value(node) => {
                    let node = *node;
                    if matches!(b, b' ' | b'\n' | b'\t' | b'\r') {
                        return self.ws(b);
                    }
                    self.stack.pop();
                    return self.start_value(node, b);
                }
                Frame::Object {
                    node,
                    st,
                    seen,
                    pending,
                } => {
                    let (node, state, seen_now, pend) = (*node, *st, *seen, *pending);
                    if matches!(b, b' ' | b'\n' | b'\t' | b'\r') {
                        return self.ws(b);
                    }
                    self.ws_run = 0;
                    let Node::Object { props, extra } = self.node(node) else {
                        return false;
                    };
                    let all_required = props
                        .iter()
                        .enumerate()
                        .all(|(i, p)| !p.2 || seen_now & (1 << i) != 0);
                    let more_keys =
                        extra.is_some() || (0..props.len()).any(|i| seen_now & (1 << i) == 0);
                    let keep_key = !props.is_empty();
                    match (state, b) {
                        (ObjState::Open, b'}') | (ObjState::After, b'}') if all_required => {
                            self.stack.pop();
                            return true;
                        }
                        (ObjState::Open | ObjState::Key, b'"') if more_keys => {
                            self.stack.push(Frame::Str {
                                key: true,
                                known: keep_key,
                                min: 0,
                                max: None,
                                chars: 0,
                                esc: Esc::None,
                                buf: Vec::new(),
                            });
                            return true;
                        }
                        (ObjState::Colon, b':') => {
                            self.set_obj_state(ObjState::After);
                            self.stack.push(Frame::Value(pend));
                            return true;
                        }
                        (ObjState::After, b',') if more_keys => {
                            self.set_obj_state(ObjState::Key);
                            return true;
                        }
                        _ => return false,
                    }
                }
                Frame::Array { node, count, open } => {
                    let (node, n, was_open) = (*node, *count, *open);
                    if matches!(b, b' ' | b'\n' | b'\t' | b'\r') {
                        return self.ws(b);
                    }
                    self.ws_run = 0;
                    let Node::Array { items, min, max } = *self.node(node) else {
                        return false;
                    };
                    let room = max.is_none_or(|m| n < m);
                    if b == b']' {
                        if n >= min {
                            self.stack.pop();
                            return true;
                        }
                        return false;
                    }
                    if was_open {
                        if !room {
                            return false;
                        }
                        if let Some(Frame::Array { count, open, .. }) = self.stack.last_mut() {
                            *count += 1;
                            *open = false;
                        }
                        self.stack.push(Frame::Value(items));
                        // Re-feed b as the element's first byte.
                        continue;
                    }
                    if b == b',' && room {
                        if let Some(Frame::Array { count, .. }) = self.stack.last_mut() {
                            *count += 1;
                        }
                        self.stack.push(Frame::Value(items));
                        return true;
                    }
                    return false;
                }
                Frame::Str {
                    key,
                    known,
                    min,
                    max,
                    chars,
                    esc,
                    buf,
                } => {
                    self.ws_run = 0;
                    match *esc {
                        Esc::Start => {
                            *esc = match b {
                                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Esc::None,
                                b'u' => Esc::Hex(4, false),
                                _ => return false,
                            };
                            if *esc == Esc::None {
                                *chars += 1;
                            }
                            return max.is_none_or(|m| *chars <= m);
                        }
                        Esc::Hex(n, first_d) => {
                            // No surrogates (D800-DFFF): a lone one is not valid JSON text.
                            let surrogate = n == 3 && first_d && !matches!(b, b'0'..=b'7');
                            if !b.is_ascii_hexdigit() || surrogate {
                                return false;
                            }
                            let d = n == 4 && matches!(b, b'd' | b'D');
                            *esc = if n == 1 {
                                Esc::None
                            } else {
                                Esc::Hex(n - 1, d)
                            };
                            if n == 1 {
                                *chars += 1;
                            }
                            return max.is_none_or(|m| *chars <= m);
                        }
                        Esc::None => {}
                    }
                    if b == b'"' {
                        if *chars < *min {
                            return false;
                        }
                        let (is_key, name) = (*key, std::mem::take(buf));
                        self.stack.pop();
                        if is_key {
                            return self.key_done(&name);
                        }
                        return true;
                    }
                    if b < 0x20 {
                        return false;
                    }
                    if b == b'\\' {
                        *esc = Esc::Start;
                        // Keys with escapes never match a known key.
                        return !*known;
                    }
                    // Count characters, not UTF-8 continuation bytes.
                    if b & 0xC0 != 0x80 {
                        *chars += 1;
                        if max.is_some_and(|m| *chars > m) {
                            return false;
                        }
                    }
                    if *known {
                        buf.push(b);
                        let prefix = buf.clone();
                        return self.key_prefix_ok(&prefix);
                    }
                    return true;
                }
                Frame::Number {
                    integer,
                    st,
                    len,
                    part,
                } => {
                    let (int_only, s) = (*integer, *st);
                    let next = match (s, b) {
                        (NumState::Sign, b'0') => Some(NumState::Zero),
                        (NumState::Sign, b'1'..=b'9') => Some(NumState::Int),
                        (NumState::Int, b'0'..=b'9') => Some(NumState::Int),
                        (NumState::Zero | NumState::Int, b'.') if !int_only => Some(NumState::Dot),
                        (NumState::Dot | NumState::Frac, b'0'..=b'9') => Some(NumState::Frac),
                        (NumState::Zero | NumState::Int | NumState::Frac, b'e' | b'E')
                            if !int_only =>
                        {
                            Some(NumState::Exp)
                        }
                        (NumState::Exp, b'+' | b'-') => Some(NumState::ExpSign),
                        (NumState::Exp | NumState::ExpSign | NumState::ExpDigits, b'0'..=b'9') => {
                            Some(NumState::ExpDigits)
                        }
                        _ => None,
                    };
                    let part_len = match next {
                        Some(n) if n == s => *part + 1,
                        _ => 1,
                    };
                    // Integers stay exact in a double (15 digits), exponents finite (2 digits).
                    let part_ok = match next {
                        Some(NumState::Int) => part_len <= 15,
                        Some(NumState::ExpDigits) => part_len <= 2,
                        _ => true,
                    };
                    match next {
                        Some(n) if *len < MAX_NUMBER_LEN && part_ok => {
                            *st = n;
                            *len += 1;
                            *part = part_len;
                            return true;
                        }
                        Some(_) => return false,
                        None if s.complete() => {
                            // The number ended; b belongs to the enclosing value.
                            self.stack.pop();
                            if self.stack.is_empty() {
                                return false;
                            }
                            continue;
                        }
                        None => return false,
                    }
                }
                Frame::Literal { node, alive, pos } => {
                    let (node, p) = (*node, *pos);
                    let Node::Literal(opts) = &self.grammar.nodes[node] else {
                        return false;
                    };
                    let next: Vec<u16> = alive
                        .iter()
                        .copied()
                        .filter(|&i| opts[i as usize].get(p) == Some(&b))
                        .collect();
                    if next.is_empty() {
                        // A literal that is already complete (a number like `1` among `1`,
                        // `12`) ends here; b belongs to the enclosing value.
                        let done = alive.iter().any(|&i| opts[i as usize].len() == p);
                        if done {
                            self.stack.pop();
                            if self.stack.is_empty() {
                                return false;
                            }
                            continue;
                        }
                        return false;
                    }
                    let finished = next.iter().all(|&i| opts[i as usize].len() == p + 1);
                    if finished {
                        self.stack.pop();
                    } else if let Some(Frame::Literal { alive, pos, .. }) = self.stack.last_mut() {
                        *alive = next;
                        *pos = p + 1;
                    }
                    return true;
                }
            }
        }
    }

    fn set_obj_state(&mut self, to: ObjState) {
        if let Some(Frame::Object { st, .. }) = self.stack.last_mut() {
            *st = to;
        }
    }

    /// Opens a value of `node` whose first byte is `b` (not whitespace).
    fn start_value(&mut self, node: NodeId, b: u8) -> bool {
        self.ws_run = 0;
        match self.node(node).clone() {
            Node::Any => match b {
                b'{' => self.open_object(Some(self.grammar.any_object), b),
                b'[' => self.open_array(Some(self.grammar.any_array)),
                b'"' => self.open_string(0, None),
                b'-' | b'0'..=b'9' => self.open_number(false, b),
                b't' | b'f' => self.open_literal(Some(self.grammar.boolean), b),
                b'n' => self.open_literal(Some(self.grammar.null), b),
                _ => false,
            },
            Node::Object { .. } => b == b'{' && self.open_object(Some(node), b),
            Node::Array { .. } => b == b'[' && self.open_array(Some(node)),
            Node::String { min, max } => b == b'"' && self.open_string(min, max),
            Node::Number { integer } => {
                (b == b'-' || b.is_ascii_digit()) && self.open_number(integer, b)
            }
            Node::Boolean => self.open_literal(Some(self.grammar.boolean), b),
            Node::Null => self.open_literal(Some(self.grammar.null), b),
            Node::Literal(opts) => {
                let alive: Vec<u16> = (0..opts.len() as u16).collect();
                self.stack.push(Frame::Literal {
                    node,
                    alive,
                    pos: 0,
                });
                self.push(b)
            }
            Node::AnyOf(alts) => {
                for a in alts {
                    let mut probe = self.clone();
                    if probe.start_value(a, b) {
                        *self = probe;
                        return true;
                    }
                }
                false
            }
        }
    }

    fn open_object(&mut self, node: Option<NodeId>, _b: u8) -> bool {
        let Some(node) = node else { return false };
        if let Node::Object { props, .. } = self.node(node) {
            if props.len() > 64 {
                return false;
            }
        }
        self.stack.push(Frame::Object {
            node,
            st: ObjState::Open,
            seen: 0,
            pending: node,
        });
        true
    }

    fn open_array(&mut self, node: Option<NodeId>) -> bool {
        let Some(node) = node else { return false };
        self.stack.push(Frame::Array {
            node,
            count: 0,
            open: true,
        });
        true
    }

    fn open_string(&mut self, min: usize, max: Option<usize>) -> bool {
        self.stack.push(Frame::Str {
            key: false,
            known: false,
            min,
            max,
            chars: 0,
            esc: Esc::None,
            buf: Vec::new(),
        });
        true
    }

    fn open_number(&mut self, integer: bool, b: u8) -> bool {
        let st = match b {
            b'-' => NumState::Sign,
            b'0' => NumState::Zero,
            _ => NumState::Int,
        };
        self.stack.push(Frame::Number {
            integer,
            st,
            len: 1,
            part: 1,
        });
        true
    }

    fn open_literal(&mut self, node: Option<NodeId>, b: u8) -> bool {
        let Some(node) = node else { return false };
        let n = match self.node(node) {
            Node::Literal(o) => o.len(),
            _ => return false,
        };
        self.stack.push(Frame::Literal {
            node,
            alive: (0..n as u16).collect(),
            pos: 0,
        });
        self.push(b)
    }

    /// The enclosing object's known key names that are unseen and start with `prefix`.
    fn key_prefix_ok(&self, prefix: &[u8]) -> bool {
        let Some(Frame::Object { node, seen, .. }) = self.stack.iter().rev().nth(1) else {
            return false;
        };
        let Node::Object { props, extra } = self.node(*node) else {
            return false;
        };
        extra.is_some()
            || props
                .iter()
                .enumerate()
                .any(|(i, p)| seen & (1 << i) == 0 && p.0.as_bytes().starts_with(prefix))
    }

    /// A key string ended: records it in the enclosing object, which then expects `:`.
    fn key_done(&mut self, name: &[u8]) -> bool {
        let Some(Frame::Object { node, .. }) = self.stack.last() else {
            return false;
        };
        let node = *node;
        let Node::Object { props, extra } = self.node(node) else {
            return false;
        };
        let known = props
            .iter()
            .position(|p| p.0.as_bytes() == name)
            .map(|i| (i, props[i].1));
        let extra = *extra;
        let Some(Frame::Object {
            st, seen, pending, ..
        }) = self.stack.last_mut()
        else {
            return false;
        };
        match (known, extra) {
            (Some((i, _)), _) if *seen & (1 << i) != 0 => false,
            (Some((i, v)), _) => {
                *seen |= 1 << i;
                *pending = v;
                *st = ObjState::Colon;
                true
            }
            (None, Some(v)) => {
                *pending = v;
                *st = ObjState::Colon;
                true
            }
            (None, None) => false,
        }
    }
}
