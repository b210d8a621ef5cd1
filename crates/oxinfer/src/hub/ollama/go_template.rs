//! A parser for the part of Go's `text/template` language that Ollama's chat templates use:
//! text; `{{ pipeline }}`; `{{ if }}` / `{{ else if }}` / `{{ else }}` / `{{ end }}`;
//! `{{ range }}` (with `$i, $x :=` or `$x :=`, and `{{ else }}`); `{{ with }}`;
//! `{{ $x := … }}` and `{{ $x = … }}`; `{{ break }}` / `{{ continue }}`; comments; the `{{-` and
//! `-}}` trim markers. Pipelines hold `.`, `.Field.Chain`, `$`, `$var.Field`, string, raw-string
//! and number literals, `true` / `false` / `nil`, function calls, parentheses and `|`.
//! `define`, `template` and `block` (templates calling templates) are refused with an error
//! naming them.

/// One node of a parsed template.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// Literal text (already trimmed by the neighbouring markers).
    Text(String),
    /// `{{ pipeline }}`: prints the value.
    Print(Pipe),
    /// `{{ $x := pipeline }}` or `{{ $x = pipeline }}`: sets a variable, prints nothing.
    Assign { var: String, pipe: Pipe },
    /// `{{ if }}`; an `{{ else if }}` is an `If` alone in `otherwise`, as Go parses it.
    If {
        cond: Pipe,
        then: Vec<Node>,
        otherwise: Vec<Node>,
    },
    /// `{{ range [$k, ][$v :=] pipeline }}`; `otherwise` runs when there is nothing to range over.
    Range {
        key: Option<String>,
        value: Option<String>,
        pipe: Pipe,
        body: Vec<Node>,
        otherwise: Vec<Node>,
    },
    /// `{{ with [$v :=] pipeline }}`: runs `body` with the value as `.` when it is not empty.
    With {
        var: Option<String>,
        pipe: Pipe,
        body: Vec<Node>,
        otherwise: Vec<Node>,
    },
    /// `{{ break }}`.
    Break,
    /// `{{ continue }}`.
    Continue,
}

/// Commands joined by `|` (each command's value is passed as the last argument of the next).
#[derive(Clone, Debug, PartialEq)]
pub struct Pipe(pub Vec<Cmd>);

/// A command: one operand, or a function name followed by its arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct Cmd(pub Vec<Arg>);

/// An operand.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// `.` (empty chain) or `.A.B`: fields of the current value.
    Dot(Vec<String>),
    /// `$` (empty name) or `$x`, with a field chain: `$.Messages`, `$m.Role`.
    Var(String, Vec<String>),
    /// A function name (`eq`, `len`, `json`, ...).
    Func(String),
    /// A string literal, unescaped.
    Str(String),
    /// A number literal as written.
    Num(String),
    /// `true` or `false`.
    Bool(bool),
    /// `nil`.
    Nil,
    /// `( pipeline )`.
    Paren(Pipe),
}

/// Parses `src`; the error says what is not understood and where.
pub fn parse(src: &str) -> Result<Vec<Node>, String> {
    let items = lex(src)?;
    let mut p = Parser { items, pos: 0 };
    let (nodes, end) = p.list()?;
    match end {
        Closer::Eof => Ok(nodes),
        Closer::End => Err("{{ end }} without an opening if/range/with".into()),
        Closer::Else(_) => Err("{{ else }} outside if/range/with".into()),
    }
}

/// Text and actions of the source, trim markers applied.
enum Item {
    Text(String),
    /// The words of an action, with its source for error messages.
    Action(Vec<Tok>, String),
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Word(String),
    Field(Vec<String>),
    Var(String, Vec<String>),
    Str(String),
    Num(String),
    Open,
    Close,
    Pipe,
    Declare,
    Assign,
    Comma,
}

fn lex(src: &str) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    let mut rest = src;
    let mut trim_next = false;
    while !rest.is_empty() {
        let Some(start) = rest.find("{{") else {
            push_text(&mut items, rest, trim_next);
            break;
        };
        let after = &rest[start + 2..];
        let trim_left = after.starts_with("- ")
            || after.starts_with("-\n")
            || after.starts_with("-\t")
            || after.starts_with("-\r");
        let mut text = &rest[..start];
        if trim_left {
            text = text.trim_end_matches([' ', '\t', '\r', '\n']);
        }
        push_text(&mut items, text, trim_next);
        let body_start = if trim_left { 1 } else { 0 };
        let close = find_close(&after[body_start..])
            .ok_or_else(|| format!("unclosed action at {:?}", excerpt(&rest[start..])))?;
        let mut body = &after[body_start..body_start + close];
        rest = &after[body_start + close + 2..];
        trim_next = false;
        if let Some(b) = body.strip_suffix('-') {
            if b.ends_with([' ', '\t', '\r', '\n']) {
                body = b;
                trim_next = true;
            }
        }
        let body = body.trim();
        if body.starts_with("/*") {
            if !body.ends_with("*/") {
                return Err(format!("unclosed comment {:?}", excerpt(body)));
            }
            continue;
        }
        items.push(Item::Action(tokens(body)?, body.to_string()));
    }
    Ok(items)
}

fn push_text(items: &mut Vec<Item>, text: &str, trim_start: bool) {
    let text = if trim_start {
        text.trim_start_matches([' ', '\t', '\r', '\n'])
    } else {
        text
    };
    if !text.is_empty() {
        items.push(Item::Text(text.to_string()));
    }
}

fn excerpt(s: &str) -> String {
    s.chars().take(40).collect()
}

/// Offset of the `}}` closing an action, skipping string literals and comments.
fn find_close(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    let trimmed = s.trim_start();
    if trimmed.starts_with("/*") {
        let open = s.len() - trimmed.len();
        let end = s[open..].find("*/")? + open + 2;
        return s[end..].find("}}").map(|j| end + j);
    }
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'`' => {
                i += 1;
                while i < b.len() && b[i] != b'`' {
                    i += 1;
                }
            }
            b'}' if b.get(i + 1) == Some(&b'}') => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `.A.B` → [A, B] (after the leading dot); stops at anything else.
fn field_chain(chars: &[char], i: &mut usize) -> Vec<String> {
    let mut fields = Vec::new();
    while *i < chars.len() && chars[*i] == '.' {
        let start = *i + 1;
        let mut j = start;
        while j < chars.len() && is_ident(chars[j]) {
            j += 1;
        }
        if j == start {
            break;
        }
        fields.push(chars[start..j].iter().collect());
        *i = j;
    }
    fields
}

fn tokens(body: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = body.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' | '\r' | '\n' => i += 1,
            '(' => {
                out.push(Tok::Open);
                i += 1;
            }
            ')' => {
                out.push(Tok::Close);
                i += 1;
            }
            '|' => {
                out.push(Tok::Pipe);
                i += 1;
            }
            ',' => {
                out.push(Tok::Comma);
                i += 1;
            }
            ':' if chars.get(i + 1) == Some(&'=') => {
                out.push(Tok::Declare);
                i += 2;
            }
            '=' => {
                out.push(Tok::Assign);
                i += 1;
            }
            '"' => {
                let mut s = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(format!("unclosed string in {{{{ {body} }}}}")),
                        Some('"') => break,
                        Some('\\') => {
                            i += 1;
                            s.push(match chars.get(i) {
                                Some('n') => '\n',
                                Some('t') => '\t',
                                Some('r') => '\r',
                                Some('\\') => '\\',
                                Some('"') => '"',
                                Some('\'') => '\'',
                                other => {
                                    return Err(format!(
                                        "string escape \\{} in {{{{ {body} }}}} is not supported",
                                        other.copied().unwrap_or(' ')
                                    ))
                                }
                            });
                        }
                        Some(&ch) => s.push(ch),
                    }
                    i += 1;
                }
                i += 1;
                out.push(Tok::Str(s));
            }
            '`' => {
                let start = i + 1;
                let end = chars[start..]
                    .iter()
                    .position(|&ch| ch == '`')
                    .ok_or_else(|| format!("unclosed raw string in {{{{ {body} }}}}"))?;
                out.push(Tok::Str(chars[start..start + end].iter().collect()));
                i = start + end + 1;
            }
            '.' => {
                let fields = field_chain(&chars, &mut i);
                if fields.is_empty() {
                    i += 1;
                }
                out.push(Tok::Field(fields));
            }
            '$' => {
                let start = i + 1;
                let mut j = start;
                while j < chars.len() && is_ident(chars[j]) {
                    j += 1;
                }
                let name: String = chars[start..j].iter().collect();
                i = j;
                out.push(Tok::Var(name, field_chain(&chars, &mut i)));
            }
            c if c.is_ascii_digit()
                || (c == '-' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) =>
            {
                let start = i;
                i += 1;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
                out.push(Tok::Num(chars[start..i].iter().collect()));
            }
            c if is_ident(c) => {
                let start = i;
                while i < chars.len() && is_ident(chars[i]) {
                    i += 1;
                }
                out.push(Tok::Word(chars[start..i].iter().collect()));
            }
            other => return Err(format!("unexpected {other:?} in {{{{ {body} }}}}")),
        }
    }
    Ok(out)
}

/// What ended a list of nodes.
enum Closer {
    Eof,
    End,
    /// `{{ else }}` (empty) or `{{ else if … }}` / `{{ else with … }}` (the words after else).
    Else(Vec<Tok>),
}

struct Parser {
    items: Vec<Item>,
    pos: usize,
}

impl Parser {
    fn list(&mut self) -> Result<(Vec<Node>, Closer), String> {
        let mut nodes = Vec::new();
        while self.pos < self.items.len() {
            let item = std::mem::replace(&mut self.items[self.pos], Item::Text(String::new()));
            self.pos += 1;
            let (toks, src) = match item {
                Item::Text(t) => {
                    nodes.push(Node::Text(t));
                    continue;
                }
                Item::Action(toks, src) => (toks, src),
            };
            let word = match toks.first() {
                Some(Tok::Word(w)) => w.as_str(),
                _ => "",
            };
            match word {
                "end" => return Ok((nodes, Closer::End)),
                "else" => return Ok((nodes, Closer::Else(toks[1..].to_vec()))),
                "if" => nodes.push(self.branch("if", &toks[1..], &src)?),
                "with" => nodes.push(self.branch("with", &toks[1..], &src)?),
                "range" => nodes.push(self.branch("range", &toks[1..], &src)?),
                "break" => nodes.push(Node::Break),
                "continue" => nodes.push(Node::Continue),
                "define" | "template" | "block" => {
                    return Err(format!(
                        "{{{{ {src} }}}}: `{word}` (templates calling templates) is not supported"
                    ))
                }
                _ => match toks.as_slice() {
                    [Tok::Var(v, f), Tok::Declare | Tok::Assign, rest @ ..] if f.is_empty() => {
                        nodes.push(Node::Assign {
                            var: v.clone(),
                            pipe: pipe(rest, &src)?,
                        })
                    }
                    _ => nodes.push(Node::Print(pipe(&toks, &src)?)),
                },
            }
        }
        Ok((nodes, Closer::Eof))
    }

    /// The node of an `if` / `with` / `range` action whose words after the keyword are `toks`.
    fn branch(&mut self, kind: &str, toks: &[Tok], src: &str) -> Result<Node, String> {
        let (vars, rest) = declarations(toks);
        if kind == "if" && !vars.is_empty() {
            return Err(format!(
                "{{{{ {src} }}}}: variables declared in `if` are not supported"
            ));
        }
        if (kind == "with" && vars.len() > 1) || (kind == "range" && vars.len() > 2) {
            return Err(format!("{{{{ {src} }}}}: too many variables"));
        }
        let pipe = pipe(rest, src)?;
        let (body, end) = self.list()?;
        let otherwise = match end {
            Closer::Eof => return Err(format!("{{{{ {src} }}}} has no {{{{ end }}}}")),
            Closer::End => Vec::new(),
            Closer::Else(words) if words.is_empty() => match self.list()? {
                (nodes, Closer::End) => nodes,
                _ => {
                    return Err(format!(
                        "{{{{ {src} }}}}: its {{{{ else }}}} has no {{{{ end }}}}"
                    ))
                }
            },
            Closer::Else(words) => match words.first() {
                // `else if` / `else with` nest a node that consumes the shared `end`.
                Some(Tok::Word(w)) if (w == "if" || w == "with") && kind != "range" => {
                    vec![self.branch(w, &words[1..], src)?]
                }
                _ => return Err(format!("{{{{ {src} }}}}: unexpected words after else")),
            },
        };
        Ok(match kind {
            "if" => Node::If {
                cond: pipe,
                then: body,
                otherwise,
            },
            "with" => Node::With {
                var: vars.into_iter().next(),
                pipe,
                body,
                otherwise,
            },
            _ => {
                let (key, value) = match vars.len() {
                    2 => (Some(vars[0].clone()), Some(vars[1].clone())),
                    1 => (None, Some(vars[0].clone())),
                    _ => (None, None),
                };
                Node::Range {
                    key,
                    value,
                    pipe,
                    body,
                    otherwise,
                }
            }
        })
    }
}

/// `$a, $b :=` at the start of `toks`: the names and the rest.
fn declarations(toks: &[Tok]) -> (Vec<String>, &[Tok]) {
    let mut vars = Vec::new();
    let mut i = 0;
    while let Some(Tok::Var(v, f)) = toks.get(i) {
        if !f.is_empty() {
            break;
        }
        vars.push(v.clone());
        match toks.get(i + 1) {
            Some(Tok::Comma) => i += 2,
            Some(Tok::Declare | Tok::Assign) => return (vars, &toks[i + 2..]),
            _ => break,
        }
    }
    (Vec::new(), toks)
}

fn pipe(toks: &[Tok], src: &str) -> Result<Pipe, String> {
    if toks.is_empty() {
        return Err(format!("{{{{ {src} }}}}: missing value"));
    }
    let mut cmds = Vec::new();
    let mut args = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Pipe => {
                if args.is_empty() {
                    return Err(format!("{{{{ {src} }}}}: empty command before |"));
                }
                cmds.push(Cmd(std::mem::take(&mut args)));
            }
            Tok::Open => {
                let mut depth = 1;
                let start = i + 1;
                while depth > 0 {
                    i += 1;
                    match toks.get(i) {
                        None => return Err(format!("{{{{ {src} }}}}: unclosed (")),
                        Some(Tok::Open) => depth += 1,
                        Some(Tok::Close) => depth -= 1,
                        _ => {}
                    }
                }
                args.push(Arg::Paren(pipe(&toks[start..i], src)?));
            }
            Tok::Field(f) => args.push(Arg::Dot(f.clone())),
            Tok::Var(v, f) => args.push(Arg::Var(v.clone(), f.clone())),
            Tok::Str(s) => args.push(Arg::Str(s.clone())),
            Tok::Num(n) => args.push(Arg::Num(n.clone())),
            Tok::Word(w) => args.push(match w.as_str() {
                "true" => Arg::Bool(true),
                "false" => Arg::Bool(false),
                "nil" => Arg::Nil,
                _ => Arg::Func(w.clone()),
            }),
            Tok::Close | Tok::Comma | Tok::Declare | Tok::Assign => {
                return Err(format!("{{{{ {src} }}}}: unexpected token"))
            }
        }
        i += 1;
    }
    if args.is_empty() {
        return Err(format!("{{{{ {src} }}}}: empty command after |"));
    }
    cmds.push(Cmd(args));
    Ok(Pipe(cmds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trim_markers_comments_and_branches() {
        let nodes = parse(
            "a  {{- /* c */ -}}  b {{ if .System }}S{{ else if eq .X \"y\" }}Y{{ else }}N{{ end }}",
        )
        .unwrap();
        assert_eq!(nodes[0], Node::Text("a".into()));
        assert_eq!(nodes[1], Node::Text("b ".into()));
        let Node::If { otherwise, .. } = &nodes[2] else {
            panic!("{nodes:?}")
        };
        let [Node::If {
            cond,
            otherwise: inner,
            ..
        }] = otherwise.as_slice()
        else {
            panic!("{otherwise:?}")
        };
        assert_eq!(
            cond.0[0].0,
            vec![
                Arg::Func("eq".into()),
                Arg::Dot(vec!["X".into()]),
                Arg::Str("y".into())
            ]
        );
        assert_eq!(inner, &vec![Node::Text("N".into())]);
    }

    #[test]
    fn range_variables_and_pipes() {
        let nodes =
            parse("{{ range $i, $m := .Messages }}{{ $last := eq (len (slice $.Messages $i)) 1 }}{{ $m.Content | json }}{{ end }}")
                .unwrap();
        let Node::Range {
            key, value, body, ..
        } = &nodes[0]
        else {
            panic!("{nodes:?}")
        };
        assert_eq!((key.as_deref(), value.as_deref()), (Some("i"), Some("m")));
        assert!(matches!(&body[0], Node::Assign { var, .. } if var == "last"));
        let Node::Print(p) = &body[1] else { panic!() };
        assert_eq!(p.0.len(), 2);
    }

    #[test]
    fn unsupported_and_broken_templates_say_what() {
        let e = parse("{{ define \"x\" }}a{{ end }}").unwrap_err();
        assert!(e.contains("`define`"), "{e}");
        assert!(parse("{{ if .A }}x")
            .unwrap_err()
            .contains("has no {{ end }}"));
        assert!(parse("{{ .A ").unwrap_err().contains("unclosed action"));
        assert!(parse("x{{ end }}")
            .unwrap_err()
            .contains("without an opening"));
    }
}
