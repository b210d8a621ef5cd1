//! The subset of JSON Schema that constrained decoding enforces, compiled into a flat arena of
//! nodes the [`super::JsonMatcher`] walks.
//!
//! Enforced exactly: `type` (one or several), `properties` with `required` (an object with
//! `properties` is closed: no other keys are generated), `additionalProperties`, `items`,
//! `prefixItems` (and draft-7 array `items` with `additionalItems`), `minItems`, `maxItems`,
//! `minLength`, `maxLength`, `pattern` (see [`super::regex`]), `format` (`date`, `time`,
//! `date-time`, `email`, `uuid`, `ipv4`, `hostname`, `uri`, as patterns stricter than the
//! formats), `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf` (see
//! [`super::numeric`]: bounded numbers are written without exponent, ≤ 15 digits), `enum`,
//! `const`, `anyOf` (every alternative that still fits is followed), `allOf` (merged, see
//! [`super::merge`]), `$ref` into `$defs` / `definitions` / any local pointer, recursive
//! schemas included. `oneOf` exactly (see [`super::oneof`]: alternatives proven disjoint, or
//! enums narrowed to the values in exactly one; otherwise refused). `not` with just `type`, `const` or `enum` (see
//! [`super::negate`]). Refused with an error naming the keyword: other `not`s,
//! `if`/`then`/`else`, `patternProperties` (but for one pattern with
//! `additionalProperties: false` and no `properties`: keys follow the pattern), `propertyNames`, `dependentRequired`,
//! `dependentSchemas`, `contains`, `uniqueItems` other than on arrays of enum/const/boolean/null
//! elements (see [`super::unique`]), `minProperties`, `maxProperties`,
//! `unevaluated*`, other formats. Annotations and unknown
//! keywords are ignored (validators ignore them too).

use super::analysis::{self, min_depths};
use super::budget::{Budget, CompileLimits};
use super::keywords::{format_pattern, path_keyword, REFUSED};
use super::merge::{self, ANNOTATIONS};
use super::negate;
use super::node::{Grammar, Node, NodeId, MAX_ENUM_VALUES};
use super::numeric::Bounds;
use super::oneof;
use super::regex::Dfa;
use super::unique;
use super::JsonMatcher;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// A schema construct that cannot be enforced.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[error("JSON schema at {path}: {what}")]
pub struct SchemaError {
    /// JSON-pointer-like location in the schema (`#/properties/name`).
    pub path: String,
    pub what: String,
}

/// Deepest nesting of schema objects (not counting `$ref`s, which are shared).
const MAX_DEPTH: usize = 64;

impl Grammar {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    pub fn any_object() -> Grammar {
        let g = Grammar::with_helpers(Vec::new(), 0, Vec::new());
        Grammar {
            root: g.any_object,
            ..g
        }
    }

    /// Appends the helper nodes to `nodes` and computes the depths.
    fn with_helpers(mut nodes: Vec<Node>, root: NodeId, patterns: Vec<Dfa>) -> Grammar {
        let any = nodes.len();
        nodes.push(Node::Any);
        nodes.push(Node::Object {
            props: Vec::new(),
            extra: Some(any),
            keys: None,
        });
        nodes.push(Node::Array {
            prefix: Vec::new(),
            items: any,
            min: 0,
            max: None,
            unique: None,
        });
        nodes.push(Node::Literal(vec![b"true".to_vec(), b"false".to_vec()]));
        nodes.push(Node::Literal(vec![b"null".to_vec()]));
        let min_depth = min_depths(&nodes, None).unwrap_or_default();
        Grammar {
            nodes,
            root,
            patterns,
            min_depth,
            any_object: any + 1,
            any_array: any + 2,
            boolean: any + 3,
            null: any + 4,
        }
    }

    /// Compiles a JSON schema within the default [`CompileLimits`].
    pub fn from_schema(schema: &Value) -> Result<Grammar, SchemaError> {
        Self::from_schema_with(schema, CompileLimits::default())
    }

    /// Compiles a JSON schema; past `limits` the error names the keyword being compiled when
    /// the budget ran out.
    pub fn from_schema_with(schema: &Value, limits: CompileLimits) -> Result<Grammar, SchemaError> {
        let budget = Budget::new(limits);
        let out = Self::compile(schema, &budget);
        match (out, budget.spent_in()) {
            (Err(e), Some(k)) => Err(Compiler::err(&e.path, budget.message(k))),
            (out, _) => out,
        }
    }

    fn compile(schema: &Value, budget: &Budget) -> Result<Grammar, SchemaError> {
        let mut c = Compiler {
            root: schema,
            nodes: Vec::new(),
            patterns: Vec::new(),
            refs: HashMap::new(),
            checks: Vec::new(),
            one_of_literals: Vec::new(),
            unique_arrays: Vec::new(),
            budget,
        };
        let root = c.node(schema, "#", 0)?;
        let checks = std::mem::take(&mut c.checks);
        let mut g = Grammar::with_helpers(c.nodes, root, c.patterns);
        // enum/const values must also satisfy the rest of their schema object. The grammar is
        // shared with the probing matchers, not copied per check.
        for (lit, check, path) in checks {
            let Node::Literal(vals) = g.nodes[lit].clone() else {
                continue;
            };
            let shared = Arc::new(g);
            let mut kept = Vec::with_capacity(vals.len());
            for v in vals {
                budget
                    .charge(v.len() as u64 + 1, "enum")
                    .map_err(|e| Compiler::err(&path, e.to_string()))?;
                let mut m = JsonMatcher::at(shared.clone(), check);
                if m.push_bytes(&v) && m.is_complete() {
                    kept.push(v);
                }
            }
            g = Arc::try_unwrap(shared).unwrap_or_else(|a| (*a).clone());
            if kept.is_empty() {
                g.nodes[lit] = Node::Never;
                if lit == root {
                    return Err(Compiler::err(&path, "no enum/const value fits the schema"));
                }
            } else {
                g.nodes[lit] = Node::Literal(kept);
            }
        }
        for (id, raw, path) in std::mem::take(&mut c.one_of_literals) {
            oneof::exactly_one(&mut g, id, &raw, budget).map_err(|e| Compiler::err(&path, e))?;
        }
        for (id, path) in std::mem::take(&mut c.unique_arrays) {
            unique::resolve(&mut g, id, budget).map_err(|e| Compiler::err(&path, e))?;
        }
        g.min_depth =
            min_depths(&g.nodes, Some(budget)).map_err(|e| Compiler::err("#", e.to_string()))?;
        if g.min_depth[root] == u32::MAX {
            return Err(Compiler::err(
                "#",
                "the schema has no finite instance (unsatisfiable, or recursion without a base case)",
            ));
        }
        analysis::check_alternatives(&g.nodes).map_err(|e| Compiler::err("#", e))?;
        Ok(g)
    }
}

struct Compiler<'a> {
    root: &'a Value,
    /// The work budget of this compilation.
    budget: &'a Budget,
    nodes: Vec<Node>,
    patterns: Vec<Dfa>,
    /// Compiled `$ref` targets (shared, which also makes recursion finite).
    refs: HashMap<String, NodeId>,
    /// (literal node, node of the rest of its schema, path): enum values to filter.
    checks: Vec<(NodeId, NodeId, String)>,
    /// (node, each alternative's stated values, path): `oneOf`s of enums whose values overlap,
    /// narrowed to the values in exactly one alternative once the literals are filtered.
    one_of_literals: Vec<(NodeId, Vec<Vec<Value>>, String)>,
    /// Arrays with `uniqueItems` (values filled in once literals are filtered).
    unique_arrays: Vec<(NodeId, String)>,
}

/// Whether `obj` has keywords beyond annotations and those in `except`.
fn has_validation(obj: &Map<String, Value>, except: &[&str]) -> bool {
    obj.keys()
        .any(|k| !ANNOTATIONS.contains(&k.as_str()) && !except.contains(&k.as_str()))
}

impl<'a> Compiler<'a> {
    fn push(&mut self, n: Node) -> NodeId {
        self.nodes.push(n);
        self.nodes.len() - 1
    }

    fn err(path: &str, what: impl Into<String>) -> SchemaError {
        SchemaError {
            path: path.to_string(),
            what: what.into(),
        }
    }

    /// Charges `units` of work for `keyword` (an error at `path` once the budget is spent).
    fn charge(&self, units: u64, keyword: &'static str, path: &str) -> Result<(), SchemaError> {
        self.budget
            .charge(units, keyword)
            .map_err(|e| Self::err(path, e.to_string()))
    }

    fn resolve(&self, r: &str, path: &str) -> Result<&'a Value, SchemaError> {
        self.charge(1, "$ref", path)?;
        if r == "#" {
            return Ok(self.root);
        }
        let rest = r
            .strip_prefix("#/")
            .ok_or_else(|| Self::err(path, format!("only local $ref '#/...' is supported: {r}")))?;
        let mut v = self.root;
        for part in rest.split('/') {
            let part = part.replace("~1", "/").replace("~0", "~");
            v = match v {
                Value::Array(a) => part.parse::<usize>().ok().and_then(|i| a.get(i)),
                _ => v.get(&part),
            }
            .ok_or_else(|| Self::err(path, format!("$ref {r} points nowhere")))?;
        }
        Ok(v)
    }

    /// Follows a chain of plain `$ref`s (for `allOf` members and alternatives).
    fn deref(&self, v: &Value, path: &str) -> Result<Value, SchemaError> {
        fn plain_ref(v: &Value) -> Option<&str> {
            match v {
                Value::Object(o) if !has_validation(o, &["$ref"]) => {
                    o.get("$ref").and_then(Value::as_str)
                }
                _ => None,
            }
        }
        let Some(mut r) = plain_ref(v) else {
            return Ok(v.clone());
        };
        for _ in 0..MAX_DEPTH {
            let t = self.resolve(r, path)?;
            match plain_ref(t) {
                Some(next) => r = next,
                None => return Ok(t.clone()),
            }
        }
        Err(Self::err(path, "$ref chain too long (a $ref loop?)"))
    }

    /// `allOf` members (nested `allOf`s and `$ref` siblings flattened), merged.
    fn merged(
        &self,
        obj: &Map<String, Value>,
        path: &str,
        depth: usize,
    ) -> Result<Value, SchemaError> {
        if depth > MAX_DEPTH {
            return Err(Self::err(path, "allOf/$ref nesting too deep"));
        }
        let mut rest = obj.clone();
        let mut parts = Vec::new();
        if let Some(all) = rest.remove("allOf") {
            let all = all
                .as_array()
                .filter(|a| !a.is_empty())
                .ok_or_else(|| Self::err(path, "allOf must be a non-empty array"))?
                .clone();
            parts.extend(all);
        }
        if let Some(r) = rest.remove("$ref") {
            let r = r
                .as_str()
                .ok_or_else(|| Self::err(path, "$ref must be a string"))?;
            parts.push(self.resolve(r, path)?.clone());
        }
        let mut flat = vec![Value::Object(rest)];
        for p in parts {
            let plain = matches!(&p, Value::Object(o) if o.contains_key("$ref") && !has_validation(o, &["$ref"]));
            let p = if plain { self.deref(&p, path)? } else { p };
            match &p {
                Value::Object(o) if o.contains_key("allOf") || o.contains_key("$ref") => {
                    flat.push(self.merged(o, path, depth + 1)?)
                }
                _ => flat.push(p),
            }
        }
        merge::merge_all(&flat, self.budget).map_err(|e| Self::err(path, e))
    }

    /// A schema with `$ref`s followed and `allOf` merged, for reasoning about its instances.
    /// Copying the result is charged to the budget under `keyword`.
    fn real(&self, v: &Value, path: &str, keyword: &'static str) -> Option<Value> {
        let d = self.deref(v, path).ok()?;
        self.budget.charge(merge::weight(&d), keyword).ok()?;
        match &d {
            Value::Object(o) if o.contains_key("allOf") || o.contains_key("$ref") => {
                self.merged(o, path, 0).ok()
            }
            _ => Some(d),
        }
    }

    /// `oneOf`: `None` when no two alternatives can share an instance (followed like `anyOf`);
    /// each alternative's values when they may overlap but all are `enum`/`const`; else an
    /// error naming the pair.
    fn one_of_overlap(
        &self,
        list: &[Value],
        path: &str,
    ) -> Result<Option<Vec<Vec<Value>>>, SchemaError> {
        let resolve = |v: &Value| self.real(v, path, "oneOf");
        let mut overlap = None;
        'pairs: for i in 0..list.len() {
            for j in i + 1..list.len() {
                if !oneof::disjoint(&list[i], &list[j], &resolve, self.budget, 0) {
                    overlap = Some((i, j));
                    break 'pairs;
                }
            }
        }
        let Some((i, j)) = overlap else {
            return Ok(None);
        };
        let raw: Option<Vec<Vec<Value>>> = list
            .iter()
            .map(|a| resolve(a).and_then(|v| v.as_object().and_then(oneof::literal_values)))
            .collect();
        raw.map(Some).ok_or_else(|| {
            Self::err(
                path,
                format!(
                    "'oneOf' alternatives {i} and {j} may overlap (an instance valid against both \
                     fails oneOf), which is not supported: use anyOf, or make them disjoint \
                     (different types, or a required property with different const values)"
                ),
            )
        })
    }

    fn node(&mut self, s: &Value, path: &str, depth: usize) -> Result<NodeId, SchemaError> {
        if depth > MAX_DEPTH {
            return Err(Self::err(path, "schema nested too deep"));
        }
        self.charge(1, path_keyword(path), path)?;
        let obj = match s {
            Value::Bool(true) => return Ok(self.push(Node::Any)),
            Value::Bool(false) => return Ok(self.push(Node::Never)),
            Value::Object(o) => o,
            _ => return Err(Self::err(path, "a schema must be an object or a boolean")),
        };
        if let Some(r) = obj.get("$ref") {
            let r = r
                .as_str()
                .ok_or_else(|| Self::err(path, "$ref must be a string"))?;
            if !has_validation(obj, &["$ref"]) {
                if let Some(&id) = self.refs.get(r) {
                    return Ok(id);
                }
                // Reserve the node first: a recursive reference inside resolves to it.
                let id = self.push(Node::Never);
                self.refs.insert(r.to_string(), id);
                let target = self.resolve(r, path)?;
                let inner = self.node(target, &format!("{path}/$ref({r})"), depth + 1)?;
                // A one-alternative anyOf: an alias of the target's node.
                self.nodes[id] = Node::AnyOf(vec![inner]);
                return Ok(id);
            }
        }
        if obj.contains_key("allOf") || obj.contains_key("$ref") {
            let m = self.merged(obj, path, depth)?;
            return self.node(&m, &format!("{path}/allOf"), depth + 1);
        }
        if let Some(n) = obj.get("not") {
            let n = self
                .real(n, path, "not")
                .ok_or_else(|| Self::err(path, "'not': its $ref/allOf could not be resolved"))?;
            let folded = negate::apply(obj, &n).map_err(|e| Self::err(path, e))?;
            return self.node(&Value::Object(folded), &format!("{path}/not"), depth + 1);
        }
        for k in REFUSED {
            if obj.contains_key(*k) {
                return Err(Self::err(
                    path,
                    format!("'{k}' is not supported (output could not be guaranteed to validate)"),
                ));
            }
        }
        if obj.get("uniqueItems").is_some_and(|v| !v.is_boolean()) {
            return Err(Self::err(path, "'uniqueItems' must be a boolean"));
        }
        if obj.contains_key("const") || obj.contains_key("enum") {
            let vals: Vec<Vec<u8>> = match obj.get("const") {
                Some(c) => vec![compact(c)],
                None => obj["enum"]
                    .as_array()
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| Self::err(path, "enum must be a non-empty array"))?
                    .iter()
                    .map(compact)
                    .collect(),
            };
            if vals.len() > MAX_ENUM_VALUES {
                return Err(Self::err(
                    path,
                    format!(
                        "'enum' has {} values, more than the {MAX_ENUM_VALUES} allowed",
                        vals.len()
                    ),
                ));
            }
            let bytes: usize = vals.iter().map(Vec::len).sum();
            self.charge(bytes as u64, "enum", path)?;
            let lit = self.push(Node::Literal(vals));
            if has_validation(obj, &["const", "enum"]) {
                let mut rest = obj.clone();
                rest.remove("const");
                rest.remove("enum");
                let check = self.node(&Value::Object(rest), path, depth + 1)?;
                self.checks.push((lit, check, path.to_string()));
            }
            return Ok(lit);
        }
        for k in ["anyOf", "oneOf"] {
            if let Some(alts) = obj.get(k) {
                let list = alts
                    .as_array()
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| Self::err(path, format!("{k} must be a non-empty array")))?;
                if has_validation(obj, &[k]) {
                    // Sibling keywords apply to every alternative.
                    let mut rest = obj.clone();
                    rest.remove(k);
                    let list = list
                        .iter()
                        .map(|a| self.deref(a, path))
                        .collect::<Result<Vec<_>, _>>()?;
                    let mut all = Map::new();
                    all.insert(
                        "allOf".into(),
                        Value::Array(vec![Value::Object(rest), json_alts(k, &list)]),
                    );
                    return self.node(&Value::Object(all), path, depth + 1);
                }
                let literals = if k == "oneOf" {
                    self.one_of_overlap(list, path)?
                } else {
                    None
                };
                let ids = list
                    .iter()
                    .enumerate()
                    .map(|(i, a)| self.node(a, &format!("{path}/{k}/{i}"), depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                let id = self.push(Node::AnyOf(ids));
                if let Some(raw) = literals {
                    self.one_of_literals.push((id, raw, path.to_string()));
                }
                return Ok(id);
            }
        }
        let ty = match obj.get("type") {
            None => {
                if obj.contains_key("properties") || obj.contains_key("required") {
                    "object"
                } else if obj.contains_key("items") || obj.contains_key("prefixItems") {
                    "array"
                } else if obj.contains_key("pattern") || obj.contains_key("format") {
                    "string"
                } else if has_validation(obj, &[]) {
                    // Keywords of several types: each applies to its own type.
                    let ids = ["object", "array", "string", "number", "boolean", "null"]
                        .iter()
                        .map(|t| self.typed(obj, t, path, depth))
                        .collect::<Result<Vec<_>, _>>()?;
                    return Ok(self.push(Node::AnyOf(ids)));
                } else {
                    return Ok(self.push(Node::Any));
                }
            }
            Some(Value::String(t)) => t.as_str(),
            Some(Value::Array(ts)) => {
                // ["string", "null"] and the like: alternatives by type.
                let mut ids = Vec::new();
                for t in ts {
                    let t = t
                        .as_str()
                        .ok_or_else(|| Self::err(path, "type entries must be strings"))?;
                    ids.push(self.typed(obj, t, path, depth)?);
                }
                return Ok(self.push(Node::AnyOf(ids)));
            }
            Some(_) => return Err(Self::err(path, "type must be a string or an array")),
        };
        self.typed(obj, ty, path, depth)
    }

    /// The node of a schema object `obj` of one type `ty`.
    fn typed(
        &mut self,
        obj: &Map<String, Value>,
        ty: &str,
        path: &str,
        depth: usize,
    ) -> Result<NodeId, SchemaError> {
        let usize_of = |k: &str| obj.get(k).and_then(Value::as_u64).map(|v| v as usize);
        Ok(match ty {
            "object" => {
                let required: Vec<&str> = obj
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let mut props = Vec::new();
                if let Some(p) = obj.get("properties") {
                    let p = p
                        .as_object()
                        .ok_or_else(|| Self::err(path, "properties must be an object"))?;
                    for (k, v) in p {
                        let id = self.node(v, &format!("{path}/properties/{k}"), depth + 1)?;
                        props.push((k.clone(), id, required.contains(&k.as_str())));
                    }
                }
                if let Some(pp) = obj.get("patternProperties") {
                    // One pattern that every key matches: keys are strings of that pattern.
                    let pp = pp
                        .as_object()
                        .ok_or_else(|| Self::err(path, "patternProperties must be an object"))?;
                    let single = pp.len() == 1
                        && props.is_empty()
                        && required.is_empty()
                        && obj.get("additionalProperties") == Some(&Value::Bool(false));
                    if !single {
                        return Err(Self::err(
                            path,
                            "'patternProperties' is only supported with one pattern, no \
                             properties/required and additionalProperties: false",
                        ));
                    }
                    let (pat, sub) = pp.iter().next().expect("one pattern");
                    let dfa = Dfa::compile(pat, self.budget, "patternProperties")
                        .map_err(|e| Self::err(path, e))?;
                    self.patterns.push(dfa);
                    let keys = Some(self.patterns.len() - 1);
                    let v =
                        self.node(sub, &format!("{path}/patternProperties/{pat}"), depth + 1)?;
                    return Ok(self.push(Node::Object {
                        props,
                        extra: Some(v),
                        keys,
                    }));
                }
                let keys = None;
                let extra = match obj.get("additionalProperties") {
                    Some(Value::Bool(false)) => None,
                    Some(Value::Bool(true)) => Some(self.push(Node::Any)),
                    None if props.is_empty() => Some(self.push(Node::Any)),
                    None => None,
                    Some(v) => {
                        Some(self.node(v, &format!("{path}/additionalProperties"), depth + 1)?)
                    }
                };
                for r in &required {
                    if !props.iter().any(|(k, _, _)| k == r) {
                        // A required key without a property schema takes the extra schema.
                        let v = match extra {
                            Some(v) if !obj.contains_key("properties") => v,
                            _ => {
                                return Err(Self::err(
                                    path,
                                    format!("required key '{r}' is not in properties"),
                                ))
                            }
                        };
                        props.push((r.to_string(), v, true));
                    }
                }
                if props.len() > 64 {
                    return Err(Self::err(path, "more than 64 properties"));
                }
                self.push(Node::Object { props, extra, keys })
            }
            "array" => {
                // Tuples: `prefixItems` + `items` (2020-12) or array `items` + `additionalItems`.
                let (tuple, rest, rest_key) = match (obj.get("prefixItems"), obj.get("items")) {
                    (Some(Value::Array(p)), r) => (p.as_slice(), r, "items"),
                    (Some(_), _) => return Err(Self::err(path, "prefixItems must be an array")),
                    (None, Some(Value::Array(p))) => {
                        (p.as_slice(), obj.get("additionalItems"), "additionalItems")
                    }
                    (None, r) => (&[][..], r, "items"),
                };
                if obj.contains_key("additionalItems") && rest_key != "additionalItems" {
                    return Err(Self::err(
                        path,
                        "'additionalItems' without an array 'items' is not supported",
                    ));
                }
                let key = if obj.contains_key("prefixItems") {
                    "prefixItems"
                } else {
                    "items"
                };
                let prefix = tuple
                    .iter()
                    .enumerate()
                    .map(|(i, v)| self.node(v, &format!("{path}/{key}/{i}"), depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                let items = match rest {
                    Some(v) => self.node(v, &format!("{path}/{rest_key}"), depth + 1)?,
                    None => self.push(Node::Any),
                };
                let (min, max) = (usize_of("minItems").unwrap_or(0), usize_of("maxItems"));
                if max.is_some_and(|m| m < min) {
                    return Err(Self::err(path, "maxItems < minItems"));
                }
                let unique = obj.get("uniqueItems").and_then(Value::as_bool) == Some(true);
                if unique && !prefix.is_empty() {
                    return Err(Self::err(
                        path,
                        "'uniqueItems' with prefixItems/tuple items is not supported",
                    ));
                }
                let id = self.push(Node::Array {
                    prefix,
                    items,
                    min,
                    max,
                    unique: unique.then(Vec::new),
                });
                if unique {
                    self.unique_arrays.push((id, path.to_string()));
                }
                id
            }
            "string" => {
                let (min, mut max) = (usize_of("minLength").unwrap_or(0), usize_of("maxLength"));
                if obj.get("format").and_then(Value::as_str) == Some("hostname") {
                    // RFC 1123: at most 253 characters.
                    max = Some(max.map_or(253, |m| m.min(253)));
                }
                if max.is_some_and(|m| m < min) {
                    return Err(Self::err(path, "maxLength < minLength"));
                }
                let pat = match (obj.get("pattern"), obj.get("format")) {
                    (Some(_), Some(_)) => {
                        return Err(Self::err(
                            path,
                            "both 'pattern' and 'format' is not supported",
                        ))
                    }
                    (Some(p), None) => Some(
                        p.as_str()
                            .ok_or_else(|| Self::err(path, "pattern must be a string"))?
                            .to_string(),
                    ),
                    (None, Some(f)) => {
                        let f = f.as_str().unwrap_or("");
                        Some(format_pattern(f).ok_or_else(|| {
                            Self::err(
                                path,
                                format!(
                                    "format '{f}' is not supported (supported: date, time, \
                                     date-time, email, uuid, ipv4, hostname, uri)"
                                ),
                            )
                        })?)
                    }
                    (None, None) => None,
                };
                let pattern = match pat {
                    Some(p) => {
                        let keyword = if obj.contains_key("pattern") {
                            "pattern"
                        } else {
                            "format"
                        };
                        let dfa = Dfa::compile(&p, self.budget, keyword)
                            .map_err(|e| Self::err(path, e))?;
                        self.patterns.push(dfa);
                        Some(self.patterns.len() - 1)
                    }
                    None => None,
                };
                self.push(Node::String { min, max, pattern })
            }
            "integer" | "number" => {
                let bounds = Bounds::from_schema(obj).map_err(|e| Self::err(path, e))?;
                self.push(Node::Number {
                    integer: ty == "integer",
                    bounds,
                })
            }
            "boolean" => self.push(Node::Boolean),
            "null" => self.push(Node::Null),
            other => return Err(Self::err(path, format!("unknown type '{other}'"))),
        })
    }
}

fn json_alts(k: &str, list: &[Value]) -> Value {
    let mut o = Map::new();
    o.insert(k.to_string(), Value::Array(list.to_vec()));
    Value::Object(o)
}

/// A JSON value as compact text (the bytes a literal must match).
fn compact(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn compiles_refs_and_rejects_unsupported() {
        let g = Grammar::from_schema(&json!({
            "$defs": {"Pet": {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}},
                              "required": ["kind"]}},
            "type": "object",
            "properties": {"pet": {"$ref": "#/$defs/Pet"}, "n": {"type": ["integer", "null"]}},
            "required": ["pet"]
        }))
        .unwrap();
        let Node::Object { props, extra, .. } = &g.nodes[g.root] else {
            panic!("root is not an object: {:?}", g.nodes[g.root]);
        };
        assert_eq!(extra, &None);
        assert_eq!(props.len(), 2);
        assert!(props[0].2 && !props[1].2);
        let e = Grammar::from_schema(&json!({"allOf": []})).unwrap_err();
        assert!(e.to_string().contains("allOf"), "{e}");
        let e = Grammar::from_schema(
            &json!({"$defs": {"A": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"}),
        )
        .unwrap_err();
        assert!(e.to_string().contains("finite instance"), "{e}");
    }
}
