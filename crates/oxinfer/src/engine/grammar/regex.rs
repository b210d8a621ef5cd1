//! JSON-schema `pattern`s: a regular-expression subset compiled into a DFA over Unicode scalar
//! values, so a string's characters can be masked one at a time.
//!
//! Supported: literals, escapes (`\d \w \s \D \W \S \n \t \r \f \v \0 \xHH \uHHHH`, escaped
//! punctuation), classes `[...]` / `[^...]` with ranges, `.`, groups `(...)`, `(?:...)`,
//! `(?<name>...)`, `(?P<name>...)`, alternation `|`, quantifiers `* + ? {m} {m,} {m,n}` (lazy
//! `?` suffixes accepted: they do not change what matches), anchors `^ $ \A \Z \z`.
//! Refused with an error naming the construct: backreferences, lookaround, word boundaries,
//! `\p{..}`, inline flags, possessive quantifiers, stacked quantifiers (`a**`, `a{2}{3}`:
//! "multiple repeat", as Python and ECMA-262 refuse them).
//!
//! Limits (hostile patterns cost bounded time and stack): at most [`MAX_PATTERN_CHARS`]
//! characters, groups nested at most [`MAX_GROUP_DEPTH`] deep (the parser and the NFA builder
//! recurse once per group, so their stack depth is bounded by it), at most 20 000 NFA states,
//! 4096 DFA states and [`MAX_TRANSITIONS`] DFA transitions, and every step charged to the
//! schema's compilation [`Budget`].
//!
//! Semantics are those of a search (`re.search` / ECMA `RegExp.test`, what JSON Schema
//! specifies): a pattern without `^` may match anywhere. Where Python and ECMA-262 differ the
//! DFA accepts only strings both accept: `\d \w \s` are ASCII, their negations (`\D`, `[^\s]`,
//! ...) stay within ASCII, `.` excludes `\n \r U+2028 U+2029`, `$` only matches at the very end.

use super::budget::Budget;
use std::collections::HashMap;

/// No transition (the character cannot continue a match).
pub const DEAD: u32 = u32::MAX;
/// `max_dist` of a state from which arbitrarily long matches remain.
pub const UNBOUNDED: u32 = u32::MAX;
/// Most DFA states a pattern may need.
const MAX_STATES: usize = 4096;
/// Most NFA states (bounded repetition is expanded).
const MAX_NFA: usize = 20_000;
/// Largest repetition bound `{m,n}`.
const MAX_REPEAT: u32 = 1000;
const MAX_CHAR: u32 = 0x10FFFF;
/// Longest pattern, in characters.
pub const MAX_PATTERN_CHARS: usize = 4096;
/// Deepest nesting of groups `(...)`.
pub const MAX_GROUP_DEPTH: usize = 64;
/// Most DFA transitions (states × character classes).
pub const MAX_TRANSITIONS: usize = 1 << 21;

/// A compiled pattern: a DFA over characters grouped into classes.
#[derive(Clone, Debug, PartialEq)]
pub struct Dfa {
    /// Sorted, disjoint, inclusive code-point ranges covering `0..=0x10FFFF`.
    classes: Vec<(u32, u32)>,
    /// `trans[state * classes.len() + class]`: the next state or [`DEAD`].
    trans: Vec<u32>,
    accept: Vec<bool>,
    /// Fewest characters from each state to a match.
    min_dist: Vec<u32>,
    /// Most characters from each state to a match ([`UNBOUNDED`] when a loop is reachable).
    max_dist: Vec<u32>,
}

#[derive(Clone, Debug)]
enum Ast {
    Empty,
    Class(Vec<(u32, u32)>),
    Start,
    End,
    Concat(Vec<Ast>),
    Alt(Vec<Ast>),
    Repeat(Box<Ast>, u32, Option<u32>),
}

struct Parser<'a> {
    chars: Vec<char>,
    pos: usize,
    src: &'a str,
    /// Groups open at the cursor.
    depth: usize,
}

/// A pattern as error messages quote it (long ones cut).
fn shown(src: &str) -> String {
    const MAX_SHOWN: usize = 60;
    match src.char_indices().nth(MAX_SHOWN) {
        Some((cut, _)) => format!("{:?}...", &src[..cut]),
        None => format!("{src:?}"),
    }
}

fn ranges(list: &[(char, char)]) -> Vec<(u32, u32)> {
    list.iter().map(|&(a, b)| (a as u32, b as u32)).collect()
}

/// Sorts and merges ranges, dropping surrogates (never valid characters).
fn normalize(mut r: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    let mut split = Vec::with_capacity(r.len() + 1);
    for (a, b) in r.drain(..) {
        if a <= 0xD7FF {
            split.push((a, b.min(0xD7FF)));
        }
        if b >= 0xE000 {
            split.push((a.max(0xE000), b));
        }
    }
    split.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::new();
    for (a, b) in split {
        match out.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// The complement of `r` within `0..=limit`.
fn complement(r: &[(u32, u32)], limit: u32) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut next = 0u32;
    for &(a, b) in &normalize(r.to_vec()) {
        if a > limit {
            break;
        }
        if a > next {
            out.push((next, a - 1));
        }
        next = b.saturating_add(1);
    }
    if next <= limit {
        out.push((next, limit));
    }
    normalize(out)
}

fn digit() -> Vec<(u32, u32)> {
    ranges(&[('0', '9')])
}
fn word() -> Vec<(u32, u32)> {
    ranges(&[('0', '9'), ('A', 'Z'), ('_', '_'), ('a', 'z')])
}
fn space() -> Vec<(u32, u32)> {
    ranges(&[('\t', '\r'), (' ', ' ')])
}
/// What Python's `\s` also matches in ASCII (kept out of `\S`).
fn space_wide() -> Vec<(u32, u32)> {
    ranges(&[('\t', '\r'), ('\x1c', ' ')])
}

impl<'a> Parser<'a> {
    fn err(&self, what: &str) -> String {
        format!("pattern {}: {what} at offset {}", shown(self.src), self.pos)
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn alt(&mut self) -> Result<Ast, String> {
        let mut alts = vec![self.concat()?];
        while self.eat('|') {
            alts.push(self.concat()?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap_or(Ast::Empty)
        } else {
            Ast::Alt(alts)
        })
    }

    fn concat(&mut self) -> Result<Ast, String> {
        let mut items = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            let atom = self.atom()?;
            items.push(self.quantified(atom)?);
        }
        Ok(Ast::Concat(items))
    }

    /// Parses `{m}`, `{m,}` or `{m,n}` at the cursor; `None` (cursor unchanged) if it is not one.
    fn braces(&mut self) -> Result<Option<(u32, Option<u32>)>, String> {
        let start = self.pos;
        if !self.eat('{') {
            return Ok(None);
        }
        let num = |p: &mut Self| {
            let s = p.pos;
            while p.peek().is_some_and(|c| c.is_ascii_digit()) {
                p.pos += 1;
            }
            let t: String = p.chars[s..p.pos].iter().collect();
            t.parse::<u32>().ok()
        };
        let Some(m) = num(self) else {
            self.pos = start;
            return Ok(None);
        };
        let n = if self.eat(',') { num(self) } else { Some(m) };
        if !self.eat('}') {
            self.pos = start;
            return Ok(None);
        }
        if m > MAX_REPEAT || n.is_some_and(|n| n > MAX_REPEAT) {
            return Err(self.err(&format!("repetition bound above {MAX_REPEAT}")));
        }
        if n.is_some_and(|n| n < m) {
            return Err(self.err("repetition {m,n} with n < m"));
        }
        Ok(Some((m, n)))
    }

    /// Parses one quantifier at the cursor, if any: `(min, max)`.
    fn quantifier(&mut self) -> Result<Option<(u32, Option<u32>)>, String> {
        let q = match self.peek() {
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('?') => (0, Some(1)),
            Some('{') => return self.braces(),
            _ => return Ok(None),
        };
        self.pos += 1;
        Ok(Some(q))
    }

    fn quantified(&mut self, atom: Ast) -> Result<Ast, String> {
        let Some((m, n)) = self.quantifier()? else {
            return Ok(atom);
        };
        if matches!(atom, Ast::Start | Ast::End) {
            return Err(self.err("quantified anchor"));
        }
        // Lazy quantifiers match the same strings.
        self.eat('?');
        if self.peek() == Some('+') {
            return Err(self.err("possessive quantifier is not supported"));
        }
        if self.quantifier()?.is_some() {
            return Err(self.err("multiple repeat (a quantifier after a quantifier)"));
        }
        Ok(Ast::Repeat(Box::new(atom), m, n))
    }

    fn atom(&mut self) -> Result<Ast, String> {
        let c = self.peek().ok_or_else(|| self.err("unexpected end"))?;
        self.pos += 1;
        Ok(match c {
            '(' => {
                if self.eat('?') {
                    if self.eat(':') {
                    } else if self.eat('P') || self.peek() == Some('<') {
                        if !self.eat('<') {
                            return Err(self.err("'(?P' other than a named group"));
                        }
                        if matches!(self.peek(), Some('=' | '!')) {
                            return Err(self.err("lookbehind is not supported"));
                        }
                        while self.peek().is_some_and(|c| c.is_alphanumeric() || c == '_') {
                            self.pos += 1;
                        }
                        if !self.eat('>') {
                            return Err(self.err("malformed group name"));
                        }
                    } else if matches!(self.peek(), Some('=' | '!')) {
                        return Err(self.err("lookahead is not supported"));
                    } else {
                        return Err(self.err("inline flags / '(?' groups are not supported"));
                    }
                }
                if self.depth >= MAX_GROUP_DEPTH {
                    return Err(
                        self.err(&format!("groups nested more than {MAX_GROUP_DEPTH} deep"))
                    );
                }
                self.depth += 1;
                let inner = self.alt()?;
                self.depth -= 1;
                if !self.eat(')') {
                    return Err(self.err("unclosed '('"));
                }
                inner
            }
            ')' => return Err(self.err("unbalanced ')'")),
            '[' => Ast::Class(self.class()?),
            '.' => Ast::Class(complement(
                &ranges(&[('\n', '\n'), ('\r', '\r'), ('\u{2028}', '\u{2029}')]),
                MAX_CHAR,
            )),
            '^' => Ast::Start,
            '$' => Ast::End,
            '*' | '+' | '?' => return Err(self.err("nothing to repeat")),
            '\\' => self.escape(false)?,
            c => Ast::Class(vec![(c as u32, c as u32)]),
        })
    }

    fn hex(&mut self, n: usize) -> Result<u32, String> {
        let s: String = self
            .chars
            .get(self.pos..self.pos + n)
            .unwrap_or(&[])
            .iter()
            .collect();
        if s.len() != n {
            return Err(self.err("truncated hex escape"));
        }
        self.pos += n;
        u32::from_str_radix(&s, 16).map_err(|_| self.err("bad hex escape"))
    }

    /// An escape after `\`: a class (as an [`Ast::Class`]) or an anchor.
    fn escape(&mut self, in_class: bool) -> Result<Ast, String> {
        let c = self
            .peek()
            .ok_or_else(|| self.err("pattern ends with '\\'"))?;
        self.pos += 1;
        let one = |c: u32| Ast::Class(vec![(c, c)]);
        Ok(match c {
            'd' => Ast::Class(digit()),
            'w' => Ast::Class(word()),
            's' => Ast::Class(space()),
            'D' => Ast::Class(complement(&digit(), 0x7F)),
            'W' => Ast::Class(complement(&word(), 0x7F)),
            'S' => Ast::Class(complement(&space_wide(), 0x7F)),
            'n' => one(0x0A),
            't' => one(0x09),
            'r' => one(0x0D),
            'f' => one(0x0C),
            'v' => one(0x0B),
            '0' => one(0),
            'b' if in_class => one(0x08),
            'x' => one(self.hex(2)?),
            'u' => one(self.hex(4)?),
            'A' if !in_class => Ast::Start,
            'Z' | 'z' if !in_class => Ast::End,
            'b' | 'B' => return Err(self.err("word boundary '\\b' is not supported")),
            'p' | 'P' => return Err(self.err("unicode property '\\p' is not supported")),
            '1'..='9' => return Err(self.err("backreferences are not supported")),
            c if c.is_ascii_alphanumeric() => {
                return Err(self.err(&format!("unknown escape '\\{c}'")))
            }
            c => one(c as u32),
        })
    }

    /// A bracket class after `[`.
    fn class(&mut self) -> Result<Vec<(u32, u32)>, String> {
        let negated = self.eat('^');
        let mut set = Vec::new();
        let mut shorthand = false;
        let mut first = true;
        loop {
            let c = self.peek().ok_or_else(|| self.err("unclosed '['"))?;
            if c == ']' && !first {
                self.pos += 1;
                break;
            }
            first = false;
            self.pos += 1;
            let lo = if c == '\\' {
                match self.escape(true)? {
                    Ast::Class(r) if r.len() == 1 && r[0].0 == r[0].1 => r[0].0,
                    Ast::Class(r) => {
                        shorthand = true;
                        set.extend(r);
                        continue;
                    }
                    _ => return Err(self.err("anchor inside a class")),
                }
            } else {
                c as u32
            };
            if self.peek() == Some('-') && self.chars.get(self.pos + 1).is_some_and(|&c| c != ']') {
                self.pos += 1;
                let h = self.peek().ok_or_else(|| self.err("unclosed '['"))?;
                self.pos += 1;
                let hi = if h == '\\' {
                    match self.escape(true)? {
                        Ast::Class(r) if r.len() == 1 && r[0].0 == r[0].1 => r[0].0,
                        _ => return Err(self.err("class range ending in a class")),
                    }
                } else {
                    h as u32
                };
                if hi < lo {
                    return Err(self.err("class range out of order"));
                }
                set.push((lo, hi));
            } else {
                set.push((lo, lo));
            }
        }
        Ok(if negated {
            // Python's `\d \w \s` are Unicode-aware: a negated class holding one stays ASCII.
            if shorthand {
                let mut s = set.clone();
                if s.iter()
                    .any(|&(a, b)| a <= 9 && b >= 9 || a <= 32 && b >= 32)
                {
                    s.extend(space_wide());
                }
                complement(&s, 0x7F)
            } else {
                complement(&set, MAX_CHAR)
            }
        } else {
            normalize(set)
        })
    }
}

enum Edge {
    Eps(usize),
    Class(usize, usize),
    Start(usize),
    End(usize),
}

struct Nfa<'b> {
    edges: Vec<Vec<Edge>>,
    classes: Vec<Vec<(u32, u32)>>,
    budget: &'b Budget,
    /// The schema keyword the pattern comes from (charged to the budget).
    keyword: &'static str,
}

impl Nfa<'_> {
    /// Charges `units` to the budget.
    fn charge(&self, units: usize) -> Result<(), String> {
        self.budget
            .charge(units as u64, self.keyword)
            .map_err(|e| self.budget.message(e.keyword))
    }

    fn state(&mut self) -> Result<usize, String> {
        if self.edges.len() >= MAX_NFA {
            return Err(
                "pattern too large (bounded repetition expands beyond 20000 states)".into(),
            );
        }
        self.charge(1)?;
        self.edges.push(Vec::new());
        Ok(self.edges.len() - 1)
    }

    /// Adds `ast` starting at state `from`; returns its end state.
    fn emit(&mut self, ast: &Ast, from: usize) -> Result<usize, String> {
        Ok(match ast {
            Ast::Empty => from,
            Ast::Class(r) => {
                let to = self.state()?;
                self.classes.push(r.clone());
                let c = self.classes.len() - 1;
                self.edges[from].push(Edge::Class(c, to));
                to
            }
            Ast::Start | Ast::End => {
                let to = self.state()?;
                let e = if matches!(ast, Ast::Start) {
                    Edge::Start(to)
                } else {
                    Edge::End(to)
                };
                self.edges[from].push(e);
                to
            }
            Ast::Concat(items) => {
                let mut cur = from;
                for a in items {
                    cur = self.emit(a, cur)?;
                }
                cur
            }
            Ast::Alt(alts) => {
                let end = self.state()?;
                for a in alts {
                    let s = self.state()?;
                    self.edges[from].push(Edge::Eps(s));
                    let e = self.emit(a, s)?;
                    self.edges[e].push(Edge::Eps(end));
                }
                end
            }
            Ast::Repeat(a, m, n) => {
                let mut cur = from;
                for _ in 0..*m {
                    cur = self.emit(a, cur)?;
                }
                match n {
                    None => {
                        let s = self.state()?;
                        self.edges[cur].push(Edge::Eps(s));
                        let e = self.emit(a, s)?;
                        self.edges[e].push(Edge::Eps(s));
                        let end = self.state()?;
                        self.edges[s].push(Edge::Eps(end));
                        end
                    }
                    Some(n) => {
                        let end = self.state()?;
                        self.edges[cur].push(Edge::Eps(end));
                        for _ in *m..*n {
                            cur = self.emit(a, cur)?;
                            self.edges[cur].push(Edge::Eps(end));
                        }
                        end
                    }
                }
            }
        })
    }

    /// The states reachable from `set` without consuming a character, in increasing order;
    /// `^` edges are followed only with `start`, `$` edges only with `end`.
    fn closure(&self, set: &[usize], start: bool, end: bool) -> Vec<usize> {
        // A bit per NFA state: reading the set bits back gives the states sorted, without a
        // sort (the scratch the budget charges as `edges / 64`).
        let mut seen = vec![0u64; self.edges.len().div_ceil(64)];
        let mut stack: Vec<usize> = set.to_vec();
        let mut count = 0;
        while let Some(s) = stack.pop() {
            let (word, bit) = (s / 64, 1u64 << (s % 64));
            if seen[word] & bit != 0 {
                continue;
            }
            seen[word] |= bit;
            count += 1;
            for e in &self.edges[s] {
                match *e {
                    Edge::Eps(t) => stack.push(t),
                    Edge::Start(t) if start => stack.push(t),
                    Edge::End(t) if end => stack.push(t),
                    _ => {}
                }
            }
        }
        let mut out = Vec::with_capacity(count);
        for (w, &bits) in seen.iter().enumerate() {
            let mut b = bits;
            while b != 0 {
                out.push(w * 64 + b.trailing_zeros() as usize);
                b &= b - 1;
            }
        }
        out
    }
}

impl Dfa {
    /// Compiles `pattern` (search semantics: unanchored ends match anything), charging the
    /// work to `budget` under the schema keyword `keyword`.
    pub fn compile(pattern: &str, budget: &Budget, keyword: &'static str) -> Result<Dfa, String> {
        let n_chars = pattern.chars().count();
        if n_chars > MAX_PATTERN_CHARS {
            return Err(format!(
                "pattern {}: {n_chars} characters, more than the {MAX_PATTERN_CHARS} allowed",
                shown(pattern)
            ));
        }
        let mut p = Parser {
            chars: pattern.chars().collect(),
            pos: 0,
            src: pattern,
            depth: 0,
        };
        let ast = p.alt()?;
        if p.pos != p.chars.len() {
            return Err(p.err("unbalanced ')'"));
        }
        let any = Ast::Repeat(Box::new(Ast::Class(vec![(0, MAX_CHAR)])), 0, None);
        let whole = Ast::Concat(vec![any.clone(), ast, any]);
        let mut nfa = Nfa {
            edges: Vec::new(),
            classes: Vec::new(),
            budget,
            keyword,
        };
        let start = nfa.state()?;
        let accept = nfa.emit(&whole, start)?;
        for c in &mut nfa.classes {
            *c = normalize(std::mem::take(c));
        }
        Self::determinize(&nfa, start, accept)
            .map_err(|e| format!("pattern {}: {e}", shown(pattern)))
    }

    fn determinize(nfa: &Nfa, start: usize, accept: usize) -> Result<Dfa, String> {
        // Alphabet: the boundaries of every class split the code points into classes.
        let mut cuts = vec![0u32, MAX_CHAR + 1];
        for c in &nfa.classes {
            for &(a, b) in c {
                cuts.push(a);
                cuts.push(b + 1);
            }
        }
        cuts.sort_unstable();
        cuts.dedup();
        let classes: Vec<(u32, u32)> = cuts.windows(2).map(|w| (w[0], w[1] - 1)).collect();
        let nc = classes.len();
        nfa.charge(nc * nfa.classes.len())?;
        // The alphabet classes each NFA class covers.
        let covers: Vec<Vec<usize>> = nfa
            .classes
            .iter()
            .map(|r| {
                classes
                    .iter()
                    .enumerate()
                    .filter(|&(_, &(a, _))| r.iter().any(|&(lo, hi)| lo <= a && a <= hi))
                    .map(|(k, _)| k)
                    .collect()
            })
            .collect();
        let scratch = nfa.edges.len() / 64;
        let mut ids: HashMap<(Vec<usize>, bool), u32> = HashMap::new();
        let mut sets: Vec<(Vec<usize>, bool)> = Vec::new();
        let first = (nfa.closure(&[start], true, false), true);
        ids.insert(first.clone(), 0);
        sets.push(first);
        let mut trans = Vec::new();
        let mut acc = Vec::new();
        // Per alphabet class, the NFA states one character of it leads to (reused per state).
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); nc];
        // Per state, the DFA state each distinct `next` set closes to: classes that move alike
        // (most of the alphabet, usually) cost one closure.
        let mut closed: HashMap<Vec<usize>, u32> = HashMap::new();
        let mut i = 0;
        while i < sets.len() {
            let (set, is_start) = sets[i].clone();
            if (i + 1) * nc > MAX_TRANSITIONS {
                return Err(format!("needs more than {MAX_TRANSITIONS} DFA transitions"));
            }
            // The accepting test's closure, and one slot per class.
            nfa.charge(set.len() + scratch + nc)?;
            acc.push(nfa.closure(&set, is_start, true).contains(&accept));
            // One pass over the set's edges: each character edge feeds the classes it covers.
            next.iter_mut().for_each(Vec::clear);
            let mut work = 0;
            for &s in &set {
                for e in &nfa.edges[s] {
                    work += 1;
                    if let Edge::Class(c, t) = *e {
                        work += covers[c].len();
                        for &k in &covers[c] {
                            next[k].push(t);
                        }
                    }
                }
            }
            nfa.charge(work)?;
            closed.clear();
            for targets in &next {
                if targets.is_empty() {
                    trans.push(DEAD);
                    continue;
                }
                if let Some(&id) = closed.get(targets) {
                    trans.push(id);
                    continue;
                }
                let key = (nfa.closure(targets, false, false), false);
                // The closure, its NFA-sized scratch, and hashing the set twice.
                nfa.charge(targets.len() + scratch + 2 * key.0.len())?;
                let id = match ids.get(&key) {
                    Some(&id) => id,
                    None => {
                        if sets.len() >= MAX_STATES {
                            return Err(format!("needs more than {MAX_STATES} DFA states"));
                        }
                        let id = sets.len() as u32;
                        ids.insert(key.clone(), id);
                        sets.push(key);
                        id
                    }
                };
                closed.insert(targets.clone(), id);
                trans.push(id);
            }
            i += 1;
        }
        let n = sets.len();
        // Shortest distance to a match (backwards BFS); unreachable states are dead.
        let mut min_dist = vec![UNBOUNDED; n];
        let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
        for s in 0..n {
            for k in 0..nc {
                let t = trans[s * nc + k];
                if t != DEAD {
                    preds[t as usize].push(s as u32);
                }
            }
        }
        let mut queue: std::collections::VecDeque<usize> = (0..n).filter(|&s| acc[s]).collect();
        for &s in &queue {
            min_dist[s] = 0;
        }
        while let Some(s) = queue.pop_front() {
            for &p in &preds[s] {
                if min_dist[p as usize] == UNBOUNDED {
                    min_dist[p as usize] = min_dist[s] + 1;
                    queue.push_back(p as usize);
                }
            }
        }
        if min_dist[0] == UNBOUNDED {
            return Err("matches no string".into());
        }
        for t in trans.iter_mut() {
            if *t != DEAD && min_dist[*t as usize] == UNBOUNDED {
                *t = DEAD;
            }
        }
        let max_dist = longest(&trans, &acc, nc);
        Ok(Dfa {
            classes,
            trans,
            accept: acc,
            min_dist,
            max_dist,
        })
    }

    /// The state before any character.
    pub fn start(&self) -> u32 {
        0
    }

    /// The state after character `c`, or [`DEAD`].
    pub fn step(&self, s: u32, c: u32) -> u32 {
        let k = self.classes.partition_point(|&(_, hi)| hi < c);
        if s == DEAD || k >= self.classes.len() {
            return DEAD;
        }
        self.trans[s as usize * self.classes.len() + k]
    }

    /// Whether the characters so far match.
    pub fn accepts(&self, s: u32) -> bool {
        s != DEAD && self.accept[s as usize]
    }

    /// Fewest further characters to a match.
    pub fn min_dist(&self, s: u32) -> u32 {
        self.min_dist[s as usize]
    }

    /// Most further characters to a match ([`UNBOUNDED`]: no limit).
    pub fn max_dist(&self, s: u32) -> u32 {
        self.max_dist[s as usize]
    }

    /// Whether some character in `lo..=hi` leads from `s` to a state `ok` accepts.
    pub fn any_in(&self, s: u32, lo: u32, hi: u32, ok: impl Fn(u32) -> bool) -> bool {
        if s == DEAD {
            return false;
        }
        let nc = self.classes.len();
        let first = self.classes.partition_point(|&(_, h)| h < lo);
        self.classes[first..]
            .iter()
            .enumerate()
            .take_while(|&(_, &(a, _))| a <= hi)
            .any(|(i, _)| {
                let t = self.trans[s as usize * nc + first + i];
                t != DEAD && ok(t)
            })
    }
}

/// Longest path from each state to an accepting one over live transitions; [`UNBOUNDED`]
/// where a cycle is reachable. A depth-first search with an explicit stack (a DFA may be a
/// chain thousands of states long).
fn longest(trans: &[u32], acc: &[bool], nc: usize) -> Vec<u32> {
    // 0: unseen, 1: on the DFS stack, 2: done.
    let n = acc.len();
    let mut mark = vec![0u8; n];
    let mut dist = vec![0u32; n];
    // (state, next class to look at, best distance so far).
    let mut stack: Vec<(usize, usize, u32)> = Vec::new();
    for root in 0..n {
        if mark[root] != 0 {
            continue;
        }
        mark[root] = 1;
        stack.push((root, 0, 0));
        while let Some(top) = stack.last_mut() {
            let (s, k) = (top.0, top.1);
            if k == nc {
                dist[s] = top.2;
                mark[s] = 2;
                stack.pop();
                // Fold the finished state into its parent's best.
                if let Some(parent) = stack.last_mut() {
                    parent.2 = extend(parent.2, dist[s]);
                }
                continue;
            }
            top.1 += 1;
            let t = trans[s * nc + k];
            if t == DEAD {
                continue;
            }
            let t = t as usize;
            match mark[t] {
                0 => {
                    mark[t] = 1;
                    stack.push((t, 0, 0));
                }
                1 => top.2 = UNBOUNDED,
                _ => top.2 = extend(top.2, dist[t]),
            }
        }
    }
    dist
}

/// The better of `best` and one step more than `d` ([`UNBOUNDED`] absorbs).
fn extend(best: u32, d: u32) -> u32 {
    if d == UNBOUNDED || best == UNBOUNDED {
        UNBOUNDED
    } else {
        best.max(d + 1)
    }
}
