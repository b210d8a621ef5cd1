//! Ollama's chat templates (Go `text/template`, the manifest's
//! `application/vnd.ollama.image.template` layer) translated to one Jinja template that the
//! engine's chat-template path renders ([`crate::chat_template::ChatTemplate`]) to the same text
//! Ollama's `template.Execute` (ollama/template/template.go) produces:
//!
//! * the conversation is collated as Ollama does (consecutive turns of one role joined by a
//!   blank line, except tool turns; every system turn also joined into `.System`), after the
//!   `application/vnd.ollama.image.system` layer is put first as a system turn when the
//!   conversation has none (Ollama's chat handler);
//! * a template that mentions `.Messages` runs once over `.System`, `.Messages`, `.Tools`
//!   (`.Response` empty, `.Think` false);
//! * an older one (`.System`, `.Prompt`, `.Response` only) runs once per completed exchange and
//!   a last time cut after its first `.Response` (and gets a `{{ .Response }}` appended when it
//!   names none), exactly as Ollama's legacy path.
//!
//! Go field names become the keys the engine's messages carry: `.Role` → `role`, `.ToolCalls`
//! → `tool_calls`, `.Function.Arguments` → `function.arguments` (snake case; `.ToolName` →
//! `name`). A mapping (a tool, a tool function, tool-call arguments) prints as compact JSON, as
//! the `String` methods of Ollama's types do (arguments, a Go map, with sorted keys). Supported functions: `and`, `or`, `not`,
//! `eq`, `ne`, `lt`, `le`, `gt`, `ge`, `len`, `index`, `slice`, `json`, `currentDate`; others,
//! and `define` / `template` / `block`, are refused with an error naming them.
//!
//! Known differences: Go prints booleans as `true` / `false` (Jinja: `True` / `False`), `json`
//! does not escape `<`, `>`, `&` as Go does, a variable assigned inside a `range` keeps its
//! value after the loop even when it shadowed an outer one, and `add_generation_prompt` is
//! ignored (Ollama's templates always open the assistant turn after a user turn).

use super::go_template::{self, Arg, Cmd, Node, Pipe};
use std::collections::BTreeSet;

const SUPPORTED_FUNCTIONS: &str =
    "and, or, not, eq, ne, lt, le, gt, ge, len, index, slice, json, currentDate";

/// The Jinja chat template equivalent to Ollama's Go template `go_src`, with `system` (the
/// system layer) as the default system turn. The error names what is not supported.
pub fn to_jinja(go_src: &str, system: Option<&str>) -> Result<String, String> {
    let mut nodes = go_template::parse(go_src)?;
    let mut vars = BTreeSet::new();
    identifiers(&nodes, &mut vars);
    let messages_mode = vars.contains("messages") || vars.contains("document");
    if !messages_mode && !vars.contains("response") {
        nodes.push(Node::Print(Pipe(vec![Cmd(vec![Arg::Dot(vec![
            "Response".into(),
        ])])])));
    }
    let mut e = Emitter::default();
    let mut out = String::new();
    out.push_str("{% set ox_in = messages %}");
    if let Some(sys) = system.filter(|s| !s.is_empty()) {
        out.push_str(&format!(
            "{{% if not ox_in or ox_in[0].role != 'system' %}}{{% set ox_in = [{{'role': \
             'system', 'content': {}}}] + ox_in %}}{{% endif %}}",
            jinja_str(sys)
        ));
    }
    out.push_str(COLLATE);
    if messages_mode {
        out.push_str(
            "{% set ox_root = {'System': ox_c.system|join('\\n\\n'), 'Messages': ox_c.msgs, \
             'Tools': tools, 'Response': '', 'Think': false, 'IsThinkSet': false} %}\
             {% set ox_v = namespace() %}",
        );
        out.push_str(&e.nodes(&nodes, &Dot::root())?);
    } else {
        let last = Cutter::default().list(nodes.clone());
        out.push_str("{% macro ox_turn(ox_root) %}{% set ox_v = namespace() %}");
        out.push_str(&e.nodes(&nodes, &Dot::root())?);
        out.push_str("{% endmacro %}{% macro ox_last(ox_root) %}{% set ox_v = namespace() %}");
        out.push_str(&e.nodes(&last, &Dot::root())?);
        out.push_str("{% endmacro %}");
        out.push_str(LEGACY_DRIVER);
    }
    Ok(out)
}

/// Ollama's `collate`: `ox_c.msgs` (consecutive turns of a role joined, tool turns apart) and
/// `ox_c.system` (every system turn's text).
const COLLATE: &str = "{% set ox_c = namespace(system=[], msgs=[]) %}{% for m in ox_in %}\
{% if m.role == 'system' %}{% set ox_c.system = ox_c.system + [m.content] %}{% endif %}\
{% if ox_c.msgs and ox_c.msgs[-1].role == m.role and m.role != 'tool' %}\
{% set ox_p = ox_c.msgs[-1] %}{% set ox_c.msgs = ox_c.msgs[:-1] + [{'role': ox_p.role, \
'content': ox_p.content ~ '\\n\\n' ~ m.content, 'tool_calls': ox_p.tool_calls or none, \
'name': ox_p.name or none, 'tool_call_id': ox_p.tool_call_id or none}] %}\
{% else %}{% set ox_c.msgs = ox_c.msgs + [m] %}{% endif %}{% endfor %}";

/// Ollama's legacy loop: one `ox_turn` per completed exchange, then `ox_last` (the template
/// cut after `.Response`) with what is left.
const LEGACY_DRIVER: &str = "{% set ox_l = namespace(system='', prompt='', response='') %}\
{% for m in ox_c.msgs %}\
{% if (m.role == 'system' and (ox_l.prompt or ox_l.response)) or (m.role == 'user' and ox_l.response) %}\
{{ ox_turn({'System': ox_l.system, 'Prompt': ox_l.prompt, 'Response': ox_l.response, 'Think': false, 'IsThinkSet': false}) }}\
{% set ox_l.system = '' %}{% set ox_l.prompt = '' %}{% set ox_l.response = '' %}{% endif %}\
{% if m.role == 'system' %}{% set ox_l.system = m.content %}\
{% elif m.role == 'user' %}{% set ox_l.prompt = m.content %}\
{% elif m.role == 'assistant' %}{% set ox_l.response = m.content %}{% endif %}\
{% endfor %}\
{{ ox_last({'System': ox_l.system, 'Prompt': ox_l.prompt, 'Response': ox_l.response, 'Think': false, 'IsThinkSet': false}) }}";

/// Every field and variable name of the template, lower-cased (Ollama's `Template.Vars`).
fn identifiers(nodes: &[Node], out: &mut BTreeSet<String>) {
    fn pipe(p: &Pipe, out: &mut BTreeSet<String>) {
        for arg in p.0.iter().flat_map(|c| &c.0) {
            match arg {
                Arg::Dot(f) => out.extend(f.iter().map(|s| s.to_lowercase())),
                Arg::Var(v, f) => {
                    out.insert(format!("${}", v.to_lowercase()));
                    out.extend(f.iter().map(|s| s.to_lowercase()));
                }
                Arg::Paren(p) => pipe(p, out),
                _ => {}
            }
        }
    }
    for n in nodes {
        match n {
            Node::Print(p) | Node::Assign { pipe: p, .. } => pipe(p, out),
            Node::If {
                cond: p,
                then: body,
                otherwise,
            }
            | Node::Range {
                pipe: p,
                body,
                otherwise,
                ..
            }
            | Node::With {
                pipe: p,
                body,
                otherwise,
                ..
            } => {
                pipe(p, out);
                identifiers(body, out);
                identifiers(otherwise, out);
            }
            _ => {}
        }
    }
}

/// Ollama's `deleteNode` for the last turn: everything after the first `.Response` field is
/// removed (an action left without arguments goes too).
#[derive(Default)]
struct Cutter {
    cut: bool,
}

impl Cutter {
    fn list(&mut self, nodes: Vec<Node>) -> Vec<Node> {
        nodes.into_iter().filter_map(|n| self.node(n)).collect()
    }

    fn node(&mut self, n: Node) -> Option<Node> {
        if self.cut {
            return None;
        }
        Some(match n {
            Node::Print(p) => Node::Print(self.pipe(p)?),
            Node::Assign { var, pipe } => Node::Assign {
                var,
                pipe: self.pipe(pipe)?,
            },
            Node::If {
                cond,
                then,
                otherwise,
            } => Node::If {
                cond,
                then: self.list(then),
                otherwise: self.list(otherwise),
            },
            Node::Range {
                key,
                value,
                pipe,
                body,
                otherwise,
            } => Node::Range {
                key,
                value,
                pipe,
                body: self.list(body),
                otherwise: self.list(otherwise),
            },
            Node::With {
                var,
                pipe,
                body,
                otherwise,
            } => Node::With {
                var,
                pipe,
                body: self.list(body),
                otherwise: self.list(otherwise),
            },
            other => other,
        })
    }

    fn pipe(&mut self, p: Pipe) -> Option<Pipe> {
        if self.cut {
            return None;
        }
        let mut cmds = Vec::new();
        for cmd in p.0 {
            let mut args = Vec::new();
            for arg in cmd.0 {
                if self.cut {
                    continue;
                }
                match arg {
                    Arg::Dot(f) => {
                        self.cut |= f.iter().any(|s| s == "Response");
                        args.push(Arg::Dot(f));
                    }
                    // A parenthesised pipeline cut to nothing is dropped, as Go's walk does.
                    Arg::Paren(p) => args.extend(self.pipe(p).map(Arg::Paren)),
                    other => args.push(other),
                }
            }
            if args.is_empty() {
                return None;
            }
            cmds.push(Cmd(args));
        }
        Some(Pipe(cmds))
    }
}

/// The Jinja expression of Go's `.` where a node runs.
#[derive(Clone)]
struct Dot {
    expr: String,
    /// Whether `.` is the template's data (fields keep Go's names) or a value inside it
    /// (fields become snake-case keys).
    root: bool,
}

impl Dot {
    fn root() -> Dot {
        Dot {
            expr: "ox_root".into(),
            root: true,
        }
    }
}

/// Writes Jinja for parsed nodes; numbers the loop and `with` variables it introduces.
#[derive(Default)]
struct Emitter {
    next: usize,
}

impl Emitter {
    fn fresh(&mut self) -> usize {
        self.next += 1;
        self.next
    }

    fn nodes(&mut self, nodes: &[Node], dot: &Dot) -> Result<String, String> {
        let mut out = String::new();
        for n in nodes {
            out.push_str(&self.node(n, dot)?);
        }
        Ok(out)
    }

    fn node(&mut self, n: &Node, dot: &Dot) -> Result<String, String> {
        Ok(match n {
            Node::Text(t) => format!("{{{{ {} }}}}", jinja_str(t)),
            Node::Print(p) => self.printed(p, dot)?,
            Node::Assign { var, pipe } => {
                format!("{{% set ox_v.v_{var} = {} %}}", self.pipe(pipe, dot)?)
            }
            Node::If {
                cond,
                then,
                otherwise,
            } => format!(
                "{{% if {} %}}{}{{% else %}}{}{{% endif %}}",
                self.pipe(cond, dot)?,
                self.nodes(then, dot)?,
                self.nodes(otherwise, dot)?
            ),
            Node::With {
                var,
                pipe,
                body,
                otherwise,
            } => {
                let n = self.fresh();
                let inner = Dot {
                    expr: format!("ox_d{n}"),
                    root: false,
                };
                let set_var = var.as_ref().map_or(String::new(), |v| {
                    format!("{{% set ox_v.v_{v} = ox_d{n} %}}")
                });
                format!(
                    "{{% set ox_d{n} = {} %}}{{% if ox_d{n} %}}{set_var}{}{{% else %}}{}{{% endif %}}",
                    self.pipe(pipe, dot)?,
                    self.nodes(body, &inner)?,
                    self.nodes(otherwise, dot)?
                )
            }
            Node::Range {
                key,
                value,
                pipe,
                body,
                otherwise,
            } => {
                let n = self.fresh();
                let inner = Dot {
                    expr: format!("ox_d{n}"),
                    root: false,
                };
                let mut head = format!(
                    "{{% set ox_s{n} = {} %}}{{% set ox_m{n} = ox_s{n} is mapping %}}\
                     {{% for ox_e{n} in ((ox_s{n}|dictsort) if ox_m{n} else (ox_s{n} or [])) %}}\
                     {{% set ox_d{n} = (ox_e{n}[1] if ox_m{n} else ox_e{n}) %}}",
                    self.pipe(pipe, dot)?
                );
                if let Some(k) = key {
                    head.push_str(&format!(
                        "{{% set ox_v.v_{k} = (ox_e{n}[0] if ox_m{n} else loop.index0) %}}"
                    ));
                }
                if let Some(v) = value {
                    head.push_str(&format!("{{% set ox_v.v_{v} = ox_d{n} %}}"));
                }
                format!(
                    "{head}{}{{% else %}}{}{{% endfor %}}",
                    self.nodes(body, &inner)?,
                    self.nodes(otherwise, dot)?
                )
            }
            Node::Break => "{% break %}".into(),
            Node::Continue => "{% continue %}".into(),
        })
    }

    /// A printed pipeline. Ollama's tools, tool functions and tool-call arguments print as
    /// compact JSON (their `String` methods; arguments are a Go map: sorted keys), so a mapping
    /// prints that way.
    fn printed(&mut self, p: &Pipe, dot: &Dot) -> Result<String, String> {
        let expr = self.pipe(p, dot)?;
        let sort = match p.0.as_slice() {
            [Cmd(args)] => matches!(args.as_slice(), [a] if is_go_map(a)),
            _ => false,
        };
        let n = self.fresh();
        Ok(format!(
            "{{% set ox_t{n} = {expr} %}}{{{{ ox_t{n}|tojson(separators=[',', ':'], \
             sort_keys={sort}) if ox_t{n} is mapping else ox_t{n} }}}}"
        ))
    }

    fn pipe(&mut self, p: &Pipe, dot: &Dot) -> Result<String, String> {
        let mut value: Option<String> = None;
        for cmd in &p.0 {
            value = Some(self.cmd(cmd, dot, value)?);
        }
        value.ok_or_else(|| "empty pipeline".to_string())
    }

    fn cmd(&mut self, cmd: &Cmd, dot: &Dot, piped: Option<String>) -> Result<String, String> {
        let Some((first, rest)) = cmd.0.split_first() else {
            return Err("empty command".into());
        };
        let Arg::Func(name) = first else {
            if !rest.is_empty() || piped.is_some() {
                return Err(format!(
                    "{first:?} is not a function but is given arguments"
                ));
            }
            return self.operand(first, dot);
        };
        let mut args = rest
            .iter()
            .map(|a| self.operand(a, dot))
            .collect::<Result<Vec<_>, _>>()?;
        args.extend(piped);
        if name == "json" && args.len() == 1 {
            // Go's json.Marshal sorts a map's keys (tool-call arguments); structs keep order.
            let sort = matches!(rest, [a] if is_go_map(a));
            return Ok(format!(
                "({}|tojson(separators=[',', ':'], sort_keys={sort}))",
                args[0]
            ));
        }
        call(name, &args)
    }

    fn operand(&mut self, arg: &Arg, dot: &Dot) -> Result<String, String> {
        Ok(match arg {
            Arg::Dot(f) => chain(&dot.expr, dot.root, f),
            Arg::Var(v, f) if v.is_empty() => chain("ox_root", true, f),
            Arg::Var(v, f) => chain(&format!("ox_v.v_{v}"), false, f),
            Arg::Str(s) => jinja_str(s),
            Arg::Num(n) => {
                if n.parse::<i64>().is_err() && n.parse::<f64>().is_err() {
                    return Err(format!("number {n} is not supported"));
                }
                n.clone()
            }
            Arg::Bool(b) => b.to_string(),
            Arg::Nil => "none".into(),
            Arg::Paren(p) => format!("({})", self.pipe(p, dot)?),
            Arg::Func(name) => call(name, &[])?,
        })
    }
}

/// Whether `arg` names tool-call arguments, a Go map in Ollama (`.Function.Arguments`).
fn is_go_map(arg: &Arg) -> bool {
    match arg {
        Arg::Dot(f) | Arg::Var(_, f) => f.last().is_some_and(|l| l == "Arguments"),
        _ => false,
    }
}

/// A Go function applied to Jinja argument expressions.
fn call(name: &str, a: &[String]) -> Result<String, String> {
    let arity = |ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(format!("`{name}` given {} arguments", a.len()))
        }
    };
    Ok(match name {
        "eq" => {
            arity(a.len() >= 2)?;
            let alts: Vec<String> = a[1..].iter().map(|b| format!("{} == {b}", a[0])).collect();
            format!("({})", alts.join(" or "))
        }
        "ne" | "lt" | "le" | "gt" | "ge" => {
            arity(a.len() == 2)?;
            let op = match name {
                "ne" => "!=",
                "lt" => "<",
                "le" => "<=",
                "gt" => ">",
                _ => ">=",
            };
            format!("({} {op} {})", a[0], a[1])
        }
        "and" | "or" => {
            arity(!a.is_empty())?;
            format!("({})", a.join(&format!(" {name} ")))
        }
        "not" => {
            arity(a.len() == 1)?;
            format!("(not {})", a[0])
        }
        "len" => {
            arity(a.len() == 1)?;
            format!("({}|length)", a[0])
        }
        "index" => {
            arity(!a.is_empty())?;
            let mut s = a[0].clone();
            for i in &a[1..] {
                s = format!("{s}[{i}]");
            }
            s
        }
        "slice" => match a {
            [x] => x.clone(),
            [x, i] => format!("{x}[{i}:]"),
            [x, i, j] => format!("{x}[{i}:{j}]"),
            _ => return Err(format!("`slice` given {} arguments", a.len())),
        },
        "json" => return Err(format!("`json` given {} arguments", a.len())),
        "currentDate" => {
            arity(a.is_empty())?;
            "strftime_now('%Y-%m-%d')".into()
        }
        other => {
            return Err(format!(
                "function `{other}` is not supported (supported: {SUPPORTED_FUNCTIONS})"
            ))
        }
    })
}

/// `base.a.b` for Go fields `fields` of `base`: the template data's fields keep their names,
/// a value's fields become snake-case keys.
fn chain(base: &str, root: bool, fields: &[String]) -> String {
    let mut s = base.to_string();
    for (i, f) in fields.iter().enumerate() {
        s.push('.');
        if root && i == 0 {
            s.push_str(f);
        } else {
            s.push_str(&snake(f));
        }
    }
    s
}

/// Go's exported field name as the engine's key: `ToolCalls` → `tool_calls`, `ToolCallID` →
/// `tool_call_id`, `ToolName` → `name` (the engine's tool-turn name).
fn snake(go: &str) -> String {
    if go == "ToolName" {
        return "name".into();
    }
    let chars: Vec<char> = go.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() && i > 0 {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            if prev.is_lowercase() || prev.is_ascii_digit() || (prev.is_uppercase() && next_lower) {
                out.push('_');
            }
        }
        out.extend(c.to_lowercase());
    }
    out
}

/// A Jinja string literal of `s`.
fn jinja_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests;
