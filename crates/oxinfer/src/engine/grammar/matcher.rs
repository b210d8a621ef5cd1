//! A byte-at-a-time matcher of JSON text against a compiled [`Grammar`]: a set of pushdown
//! automata paths whose stacks mirror the nesting of the value being written. `anyOf` forks a
//! path per alternative that fits the next byte; paths that cannot take a byte die. It accepts
//! exactly the prefixes of texts that parse as JSON and validate against the grammar (and that
//! can still be completed), so a decoder that only picks tokens the matcher accepts always
//! ends with a valid document.

use super::node::{Grammar, Node, NodeId, MAX_STACK};
use super::numeric::{Bounds, MAX_DIGITS};
use super::regex::{DEAD, UNBOUNDED};
use super::unique::canonical_text;
use std::sync::Arc;

/// Longest run of whitespace allowed between two JSON tokens (keeps a small model from
/// spinning in newlines forever).
const MAX_WS_RUN: u8 = 8;
/// Most characters of an unbounded number (integer part plus fraction plus exponent).
const MAX_NUMBER_LEN: u8 = 24;
/// Most alternative paths followed at once (more are dropped, which only narrows the output).
const MAX_PATHS: usize = 32;

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
    /// Inside `\uXXXX`: hex digits still to come and the value so far.
    Hex {
        left: u8,
        val: u32,
    },
}

/// A string being written.
#[derive(Clone, Debug, PartialEq)]
struct Str {
    /// An object key (bytes kept in `buf` when `known`: checked against the known keys).
    key: bool,
    known: bool,
    min: usize,
    max: Option<usize>,
    /// Pattern index and DFA state.
    pattern: Option<(usize, u32)>,
    chars: usize,
    esc: Esc,
    /// A UTF-8 sequence in progress: code point bits so far, bytes still to come, total length.
    utf8: (u32, u8, u8),
    buf: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq)]
struct Num {
    integer: bool,
    st: NumState,
    /// Bytes so far.
    len: u8,
    /// Digits of the current part (integer, fraction or exponent).
    part: u8,
    bounds: Option<Bounds>,
    neg: bool,
    /// Digits (bounded numbers only).
    digits: Vec<u8>,
    /// Integer-part digit count once the dot is written.
    int_digits: Option<u32>,
}

impl Num {
    fn in_range(&self) -> bool {
        match &self.bounds {
            None => true,
            Some(b) => {
                let int = self.int_digits.unwrap_or(self.digits.len() as u32);
                b.contains(Bounds::value(self.neg, &self.digits, int))
            }
        }
    }

    fn done(&self) -> bool {
        self.st.complete() && self.in_range()
    }
}

#[derive(Clone, Debug, PartialEq)]
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
        /// `uniqueItems`: canonical texts of the elements written.
        done: Vec<Vec<u8>>,
    },
    Str(Str),
    Number(Num),
    /// One of several exact texts: `alive` are the indices still matching, `pos` bytes read.
    Literal {
        node: NodeId,
        alive: Vec<u32>,
        pos: usize,
    },
}

/// One way of reading the text so far.
#[derive(Clone, Debug, PartialEq)]
struct Path {
    stack: Vec<Frame>,
    ws_run: u8,
}

/// Incremental JSON matcher. Cheap to clone (a few small stacks), so token candidates are
/// tried on clones.
#[derive(Clone, Debug)]
pub struct JsonMatcher {
    grammar: Arc<Grammar>,
    paths: Vec<Path>,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\t' | b'\r')
}

/// The valid code points among `lo..=hi` for a UTF-8 sequence of `total` bytes; `None` if
/// there are none.
fn valid_cps(lo: u32, hi: u32, total: u8) -> Option<(u32, u32)> {
    let (a, b) = match total {
        1 => (0, 0x7F),
        2 => (0x80, 0x7FF),
        3 => (0x800, 0xFFFF),
        _ => (0x10000, 0x10FFFF),
    };
    let (lo, hi) = (lo.max(a), hi.min(b));
    (lo <= hi && !(lo >= 0xD800 && hi <= 0xDFFF)).then_some((lo, hi))
}

impl JsonMatcher {
    /// A matcher at the start of a document of `grammar`'s root.
    pub fn new(grammar: Arc<Grammar>) -> Self {
        let root = grammar.root;
        Self::at(grammar, root)
    }

    /// A matcher at the start of a value of `grammar`'s node `root`.
    pub fn at(grammar: Arc<Grammar>, root: NodeId) -> Self {
        JsonMatcher {
            grammar,
            paths: vec![Path {
                stack: vec![Frame::Value(root)],
                ws_run: 0,
            }],
        }
    }

    /// Whether what was fed is a whole valid document.
    pub fn is_complete(&self) -> bool {
        self.paths.iter().any(|p| p.complete(&self.grammar))
    }

    /// Whether nothing more can follow (the document is complete and cannot grow).
    pub fn is_finished(&self) -> bool {
        !self.paths.is_empty() && self.paths.iter().all(|p| p.stack.is_empty())
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

    /// Feeds one byte.
    pub fn push(&mut self, b: u8) -> bool {
        let g = &*self.grammar;
        let mut next: Vec<Path> = Vec::with_capacity(self.paths.len());
        let add = |p: Path, next: &mut Vec<Path>| {
            if next.len() < MAX_PATHS && !next.contains(&p) {
                next.push(p);
            }
        };
        for mut p in std::mem::take(&mut self.paths) {
            let mut forks = Vec::new();
            if p.push(g, b, &mut forks) {
                add(p, &mut next);
            }
            for f in forks {
                add(f, &mut next);
            }
        }
        self.paths = next;
        !self.paths.is_empty()
    }
}

impl Path {
    fn complete(&self, g: &Grammar) -> bool {
        match self.stack.as_slice() {
            [] => true,
            [Frame::Number(n)] => n.done(),
            [Frame::Literal { node, alive, pos }] => literal_done(g, *node, alive, *pos),
            _ => false,
        }
    }

    /// Whether a value of `node` can be finished within the stack limit from here.
    fn fits(&self, g: &Grammar, node: NodeId) -> bool {
        let d = g.min_depth[node];
        d != u32::MAX && self.stack.len() + d as usize <= MAX_STACK
    }

    fn ws(&mut self, b: u8) -> bool {
        if is_ws(b) && self.ws_run < MAX_WS_RUN {
            self.ws_run += 1;
            true
        } else {
            false
        }
    }

    /// Feeds one byte. On `anyOf` the path splits: the alternatives that take the byte go to
    /// `forks` and this path reports false.
    fn push(&mut self, g: &Grammar, b: u8, forks: &mut Vec<Path>) -> bool {
        loop {
            let Some(top) = self.stack.last_mut() else {
                return false;
            };
            match top {
                Frame::Value(node) => {
                    let node = *node;
                    if is_ws(b) {
                        return self.ws(b);
                    }
                    self.stack.pop();
                    if let Node::AnyOf(alts) = &g.nodes[node] {
                        for &a in alts {
                            if !self.fits(g, a) {
                                continue;
                            }
                            let mut p = self.clone();
                            p.stack.push(Frame::Value(a));
                            if p.push(g, b, forks) {
                                forks.push(p);
                            }
                        }
                        return false;
                    }
                    return self.start_value(g, node, b);
                }
                Frame::Object {
                    node,
                    st,
                    seen,
                    pending,
                } => {
                    let (node, state, seen_now, pend) = (*node, *st, *seen, *pending);
                    if is_ws(b) {
                        return self.ws(b);
                    }
                    self.ws_run = 0;
                    let Node::Object { props, extra, keys } = &g.nodes[node] else {
                        return false;
                    };
                    let key_pattern = keys.map(|p| (p, g.patterns[p].start()));
                    let all_required = props
                        .iter()
                        .enumerate()
                        .all(|(i, p)| !p.2 || seen_now & (1 << i) != 0);
                    let more_keys = extra.is_some_and(|e| self.fits(g, e))
                        || props
                            .iter()
                            .enumerate()
                            .any(|(i, p)| seen_now & (1 << i) == 0 && (p.2 || self.fits(g, p.1)));
                    let known = !props.is_empty();
                    match (state, b) {
                        (ObjState::Open, b'}') | (ObjState::After, b'}') if all_required => {
                            self.stack.pop();
                            return true;
                        }
                        (ObjState::Open | ObjState::Key, b'"') if more_keys => {
                            self.stack.push(Frame::Str(Str {
                                key: true,
                                known,
                                min: 0,
                                max: None,
                                pattern: key_pattern,
                                chars: 0,
                                esc: Esc::None,
                                utf8: (0, 0, 0),
                                buf: Vec::new(),
                            }));
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
                Frame::Array {
                    node,
                    count,
                    open,
                    done,
                } => {
                    let (node, n, was_open) = (*node, *count, *open);
                    let unused = |unique: &Option<Vec<Vec<u8>>>| {
                        unique
                            .as_ref()
                            .is_none_or(|vals| vals.iter().any(|v| !done.contains(v)))
                    };
                    if is_ws(b) {
                        return self.ws(b);
                    }
                    self.ws_run = 0;
                    let Node::Array {
                        prefix,
                        items,
                        min,
                        max,
                        unique,
                    } = &g.nodes[node]
                    else {
                        return false;
                    };
                    let (min, max) = (*min, *max);
                    let fresh = unused(unique);
                    // The node of element n (the next one).
                    let items = prefix.get(n).copied().unwrap_or(*items);
                    let room =
                        max.is_none_or(|m| n < m) && (n < min || self.fits(g, items)) && fresh;
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
                Frame::Str(_) => {
                    self.ws_run = 0;
                    return self.push_str(g, b);
                }
                Frame::Number(_) => match self.push_num(b) {
                    Some(ok) => return ok,
                    None => {
                        // The number ended; b belongs to the enclosing value.
                        self.stack.pop();
                        if self.stack.is_empty() {
                            return false;
                        }
                        continue;
                    }
                },
                Frame::Literal { node, alive, pos } => {
                    let (node, p) = (*node, *pos);
                    let Node::Literal(opts) = &g.nodes[node] else {
                        return false;
                    };
                    let next: Vec<u32> = alive
                        .iter()
                        .copied()
                        .filter(|&i| opts[i as usize].get(p) == Some(&b))
                        .collect();
                    if next.is_empty() {
                        // A literal that is already complete (a number like `1` among `1`,
                        // `12`) ends here; b belongs to the enclosing value.
                        let done = alive.iter().find(|&&i| opts[i as usize].len() == p);
                        if let Some(&i) = done {
                            self.stack.pop();
                            self.element_done(g, &opts[i as usize]);
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
                        self.element_done(g, &opts[next[0] as usize]);
                    } else if let Some(Frame::Literal { alive, pos, .. }) = self.stack.last_mut() {
                        *alive = next;
                        *pos = p + 1;
                    }
                    return true;
                }
            }
        }
    }

    /// Feeds a byte to the number on top: `Some(accepted)`, or `None` when the number is
    /// complete and `b` does not continue it (the caller pops it and re-feeds `b`).
    fn push_num(&mut self, b: u8) -> Option<bool> {
        let Some(Frame::Number(n)) = self.stack.last_mut() else {
            return Some(false);
        };
        let s = n.st;
        let bounded = n.bounds.is_some();
        let next = match (s, b) {
            // `-0` parses as a float in some readers (serde_json): not an integer.
            (NumState::Sign, b'0') if !n.integer => Some(NumState::Zero),
            (NumState::Sign, b'1'..=b'9') => Some(NumState::Int),
            (NumState::Int, b'0'..=b'9') => Some(NumState::Int),
            (NumState::Zero | NumState::Int, b'.') if !n.integer => Some(NumState::Dot),
            (NumState::Dot | NumState::Frac, b'0'..=b'9') => Some(NumState::Frac),
            (NumState::Zero | NumState::Int | NumState::Frac, b'e' | b'E')
                if !n.integer && !bounded =>
            {
                Some(NumState::Exp)
            }
            (NumState::Exp, b'+' | b'-') => Some(NumState::ExpSign),
            (NumState::Exp | NumState::ExpSign | NumState::ExpDigits, b'0'..=b'9') => {
                Some(NumState::ExpDigits)
            }
            _ => None,
        };
        let Some(ns) = next else {
            return if n.done() { None } else { Some(false) };
        };
        let part_len = if ns == s { n.part + 1 } else { 1 };
        // Integers stay exact in a double (15 digits), exponents finite (2 digits).
        let part_ok = match ns {
            NumState::Int => part_len <= 15,
            NumState::ExpDigits => part_len <= 2,
            _ => true,
        };
        if n.len >= MAX_NUMBER_LEN || !part_ok {
            return Some(false);
        }
        if let Some(bounds) = n.bounds {
            let mut digits = n.digits.clone();
            let mut int_digits = n.int_digits;
            if b == b'.' {
                int_digits = Some(digits.len() as u32);
            } else {
                digits.push(b);
            }
            let total = digits.len() as u32 + u32::from(b == b'.');
            if total > MAX_DIGITS || !bounds.reachable(n.neg, &digits, int_digits, n.integer) {
                return Some(false);
            }
            n.digits = digits;
            n.int_digits = int_digits;
        }
        n.st = ns;
        n.len += 1;
        n.part = part_len;
        Some(true)
    }

    /// Whether the string on top may take a character in `lo..=hi` as its `chars`-th.
    fn str_allows(g: &Grammar, s: &Str, chars: usize, lo: u32, hi: u32) -> bool {
        if s.max.is_some_and(|m| chars > m) {
            return false;
        }
        let Some((p, st)) = s.pattern else {
            return true;
        };
        let dfa = &g.patterns[p];
        dfa.any_in(st, lo, hi, |t| {
            s.max.is_none_or(|m| chars + dfa.min_dist(t) as usize <= m)
                && (dfa.max_dist(t) == UNBOUNDED || chars + dfa.max_dist(t) as usize >= s.min)
        })
    }

    /// Records a whole character `c` of the string on top (already allowed).
    fn str_char(g: &Grammar, s: &mut Str, c: u32) {
        s.chars += 1;
        if let Some((p, st)) = &mut s.pattern {
            *st = g.patterns[*p].step(*st, c);
            debug_assert!(*st != DEAD);
        }
    }

    fn push_str(&mut self, g: &Grammar, b: u8) -> bool {
        let Some(Frame::Str(s)) = self.stack.last_mut() else {
            return false;
        };
        let next = s.chars + 1;
        match s.esc {
            Esc::Start => {
                let c = match b {
                    b'"' | b'\\' | b'/' => b as u32,
                    b'b' => 0x08,
                    b'f' => 0x0C,
                    b'n' => 0x0A,
                    b'r' => 0x0D,
                    b't' => 0x09,
                    b'u' => {
                        s.esc = Esc::Hex { left: 4, val: 0 };
                        return true;
                    }
                    _ => return false,
                };
                if !Self::str_allows(g, s, next, c, c) {
                    return false;
                }
                s.esc = Esc::None;
                Self::str_char(g, s, c);
                return true;
            }
            Esc::Hex { left, val } => {
                let Some(d) = (b as char).to_digit(16) else {
                    return false;
                };
                let (left, val) = (left - 1, val * 16 + d);
                let span = 4 * left as u32;
                let (lo, hi) = (val << span, (val << span) | ((1 << span) - 1));
                // No surrogates: a lone one is not valid text.
                if lo >= 0xD800 && hi <= 0xDFFF {
                    return false;
                }
                if !Self::str_allows(g, s, next, lo, hi) {
                    return false;
                }
                if left == 0 {
                    s.esc = Esc::None;
                    Self::str_char(g, s, val);
                } else {
                    s.esc = Esc::Hex { left, val };
                }
                return true;
            }
            Esc::None => {}
        }
        let (cp, need, total) = s.utf8;
        if need > 0 {
            if b & 0xC0 != 0x80 {
                return false;
            }
            let (cp, need) = ((cp << 6) | (b & 0x3F) as u32, need - 1);
            let span = 6 * need as u32;
            let Some((lo, hi)) = valid_cps(cp << span, (cp << span) | ((1 << span) - 1), total)
            else {
                return false;
            };
            if !Self::str_allows(g, s, next, lo, hi) {
                return false;
            }
            s.utf8 = (cp, need, total);
            if need == 0 {
                Self::str_char(g, s, cp);
            }
            return self.key_byte(g, b);
        }
        if b == b'"' {
            let matched = s.pattern.is_none_or(|(p, st)| g.patterns[p].accepts(st));
            if s.chars < s.min || !matched {
                return false;
            }
            let (is_key, name) = (s.key, std::mem::take(&mut s.buf));
            self.stack.pop();
            if is_key {
                return self.key_done(g, &name);
            }
            return true;
        }
        if b < 0x20 {
            return false;
        }
        if b == b'\\' {
            // Keys with escapes never match a known key.
            if s.known || !Self::str_allows(g, s, next, 0, 0xFFFF) {
                return false;
            }
            s.esc = Esc::Start;
            return true;
        }
        let (cp, need, total): (u32, u8, u8) = match b {
            0x00..=0x7F => (b as u32, 0, 1),
            0xC2..=0xDF => ((b & 0x1F) as u32, 1, 2),
            0xE0..=0xEF => ((b & 0x0F) as u32, 2, 3),
            0xF0..=0xF4 => ((b & 0x07) as u32, 3, 4),
            _ => return false,
        };
        let span = 6 * need as u32;
        let Some((lo, hi)) = valid_cps(cp << span, (cp << span) | ((1 << span) - 1), total) else {
            return false;
        };
        if !Self::str_allows(g, s, next, lo, hi) {
            return false;
        }
        s.utf8 = (cp, need, total);
        if need == 0 {
            Self::str_char(g, s, cp);
        }
        self.key_byte(g, b)
    }

    /// Keeps a byte of a known-key string and checks that some key still starts with the bytes.
    fn key_byte(&mut self, g: &Grammar, b: u8) -> bool {
        let Some(Frame::Str(s)) = self.stack.last_mut() else {
            return false;
        };
        if !s.known {
            return true;
        }
        s.buf.push(b);
        let prefix = s.buf.clone();
        self.key_prefix_ok(g, &prefix)
    }

    fn set_obj_state(&mut self, to: ObjState) {
        if let Some(Frame::Object { st, .. }) = self.stack.last_mut() {
            *st = to;
        }
    }

    /// Opens a value of `node` whose first byte is `b` (not whitespace).
    fn start_value(&mut self, g: &Grammar, node: NodeId, b: u8) -> bool {
        self.ws_run = 0;
        if !self.fits(g, node) {
            return false;
        }
        match &g.nodes[node] {
            Node::Never | Node::AnyOf(_) => false,
            Node::Any => match b {
                b'{' => {
                    self.fits(g, g.any_object)
                        && self.open(
                            g.any_object,
                            Frame::Object {
                                node: g.any_object,
                                st: ObjState::Open,
                                seen: 0,
                                pending: g.any_object,
                            },
                        )
                }
                b'[' => self.open(
                    g.any_array,
                    Frame::Array {
                        node: g.any_array,
                        count: 0,
                        open: true,
                        done: Vec::new(),
                    },
                ),
                b'"' => self.open_string(0, None, None),
                b'-' | b'0'..=b'9' => self.open_number(false, None, b),
                b't' | b'f' => self.open_literal(g, g.boolean, b),
                b'n' => self.open_literal(g, g.null, b),
                _ => false,
            },
            Node::Object { props, .. } => {
                b == b'{'
                    && props.len() <= 64
                    && self.open(
                        node,
                        Frame::Object {
                            node,
                            st: ObjState::Open,
                            seen: 0,
                            pending: node,
                        },
                    )
            }
            Node::Array { .. } => {
                b == b'['
                    && self.open(
                        node,
                        Frame::Array {
                            node,
                            count: 0,
                            open: true,
                            done: Vec::new(),
                        },
                    )
            }
            Node::String { min, max, pattern } => {
                b == b'"'
                    && self.open_string(*min, *max, pattern.map(|p| (p, g.patterns[p].start())))
            }
            Node::Number { integer, bounds } => {
                (b == b'-' || b.is_ascii_digit()) && self.open_number(*integer, *bounds, b)
            }
            Node::Boolean => self.open_literal(g, g.boolean, b),
            Node::Null => self.open_literal(g, g.null, b),
            Node::Literal(_) => self.open_literal(g, node, b),
        }
    }

    fn open(&mut self, _node: NodeId, f: Frame) -> bool {
        self.stack.push(f);
        true
    }

    fn open_string(
        &mut self,
        min: usize,
        max: Option<usize>,
        pattern: Option<(usize, u32)>,
    ) -> bool {
        self.stack.push(Frame::Str(Str {
            key: false,
            known: false,
            min,
            max,
            pattern,
            chars: 0,
            esc: Esc::None,
            utf8: (0, 0, 0),
            buf: Vec::new(),
        }));
        true
    }

    fn open_number(&mut self, integer: bool, bounds: Option<Bounds>, b: u8) -> bool {
        let st = match b {
            b'-' => NumState::Sign,
            b'0' => NumState::Zero,
            _ => NumState::Int,
        };
        let neg = b == b'-';
        let digits = if b == b'-' || bounds.is_none() {
            Vec::new()
        } else {
            vec![b]
        };
        if let Some(bd) = bounds {
            if !bd.reachable(neg, &digits, None, integer) {
                return false;
            }
        }
        self.stack.push(Frame::Number(Num {
            integer,
            st,
            len: 1,
            part: 1,
            bounds,
            neg,
            digits,
            int_digits: None,
        }));
        true
    }

    fn open_literal(&mut self, g: &Grammar, node: NodeId, b: u8) -> bool {
        let Node::Literal(opts) = &g.nodes[node] else {
            return false;
        };
        // Literal nodes hold at most MAX_ENUM_VALUES values (the compiler refuses more).
        let Ok(n) = u32::try_from(opts.len()) else {
            return false;
        };
        let mut alive: Vec<u32> = (0..n).collect();
        // An element of a `uniqueItems` array: not a value written before.
        if let Some(done) = self.unique_done(g) {
            if !done.is_empty() {
                alive.retain(|&i| !done.contains(&canonical_text(&opts[i as usize])));
            }
        }
        if alive.is_empty() {
            return false;
        }
        self.stack.push(Frame::Literal {
            node,
            alive,
            pos: 0,
        });
        self.push(g, b, &mut Vec::new())
    }

    /// The elements written so far when the top frame is a `uniqueItems` array.
    fn unique_done(&self, g: &Grammar) -> Option<&Vec<Vec<u8>>> {
        match self.stack.last() {
            Some(Frame::Array { node, done, .. }) => match &g.nodes[*node] {
                Node::Array {
                    unique: Some(_), ..
                } => Some(done),
                _ => None,
            },
            _ => None,
        }
    }

    /// A literal `text` just ended: recorded when it is an element of a `uniqueItems` array.
    fn element_done(&mut self, g: &Grammar, text: &[u8]) {
        if self.unique_done(g).is_none() {
            return;
        }
        if let Some(Frame::Array { done, .. }) = self.stack.last_mut() {
            done.push(canonical_text(text));
        }
    }

    /// Whether the enclosing object has a key starting with `prefix` that may still be written
    /// (unseen, and its value fits), or takes other keys.
    fn key_prefix_ok(&self, g: &Grammar, prefix: &[u8]) -> bool {
        let n = self.stack.len();
        let Some(Frame::Object { node, seen, .. }) = self.stack.get(n.wrapping_sub(2)) else {
            return false;
        };
        let Node::Object { props, extra, .. } = &g.nodes[*node] else {
            return false;
        };
        let fits = |v: NodeId| {
            let d = g.min_depth[v];
            d != u32::MAX && n - 1 + d as usize <= MAX_STACK
        };
        extra.is_some_and(fits)
            || props.iter().enumerate().any(|(i, p)| {
                seen & (1 << i) == 0 && (p.2 || fits(p.1)) && p.0.as_bytes().starts_with(prefix)
            })
    }

    /// A key string ended: records it in the enclosing object, which then expects `:`.
    fn key_done(&mut self, g: &Grammar, name: &[u8]) -> bool {
        let Some(Frame::Object { node, .. }) = self.stack.last() else {
            return false;
        };
        let node = *node;
        let Node::Object { props, extra, .. } = &g.nodes[node] else {
            return false;
        };
        let known = props
            .iter()
            .position(|p| p.0.as_bytes() == name)
            .map(|i| (i, props[i].1, props[i].2));
        let extra = *extra;
        let fits = |p: &Path, v: NodeId| p.fits(g, v);
        let ok_value = match (known, extra) {
            (Some((_, v, req)), _) => req || fits(self, v),
            (None, Some(v)) => fits(self, v),
            (None, None) => false,
        };
        let Some(Frame::Object {
            st, seen, pending, ..
        }) = self.stack.last_mut()
        else {
            return false;
        };
        match (known, extra) {
            _ if !ok_value => false,
            (Some((i, _, _)), _) if *seen & (1 << i) != 0 => false,
            (Some((i, v, _)), _) => {
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

fn literal_done(g: &Grammar, node: NodeId, alive: &[u32], pos: usize) -> bool {
    let Node::Literal(opts) = &g.nodes[node] else {
        return false;
    };
    alive.iter().any(|&i| opts[i as usize].len() == pos)
}
