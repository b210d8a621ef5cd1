//! `oneOf`: an instance must match exactly one alternative. The matcher follows the
//! alternatives like `anyOf`, which is exact when no instance can match two of them; this
//! module proves that on the schemas themselves, with their full validator semantics (not on
//! the compiled nodes, which may be narrower: objects closed, stricter formats): different
//! `type`s, `const`/`enum` values that differ, disjoint numeric or length ranges, a key both
//! require whose values cannot coincide (a discriminator), a key one requires and the other
//! forbids, array lengths or elements that cannot coincide. Alternatives that are all
//! `enum`/`const` become the values found in exactly one of them. Anything else that may
//! overlap is refused with an error naming `oneOf`.

use super::budget::Budget;
use super::node::{Grammar, Node, NodeId};
use serde_json::{Map, Value};

/// How deep the proof follows nested schemas before giving up (treating them as overlapping).
const MAX_DEPTH: usize = 12;

const CLASSES: [&str; 6] = ["object", "array", "string", "number", "boolean", "null"];

/// A value as a validator compares it: numbers by value (`1` equals `1.0`).
pub fn canonical(v: &Value) -> Value {
    match v.as_f64() {
        Some(f) if v.is_number() => serde_json::json!(f),
        _ => v.clone(),
    }
}

fn class_of(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "object",
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "boolean",
        Value::Null => "null",
    }
}

/// Resolves `$ref`s and merges `allOf` of a schema (`None` when that fails).
pub type Resolve<'a> = dyn Fn(&Value) -> Option<Value> + 'a;

/// The type classes a schema's instances can have (`integer` counts as `number`).
fn classes(
    s: &Map<String, Value>,
    resolve: &Resolve<'_>,
    budget: &Budget,
    depth: usize,
) -> Vec<&'static str> {
    if depth > MAX_DEPTH || budget.charge(1, "oneOf").is_err() {
        return CLASSES.to_vec();
    }
    let mut out: Vec<&'static str> = match s.get("type") {
        Some(Value::String(t)) => vec![norm(t)],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).map(norm).collect(),
        _ => CLASSES.to_vec(),
    };
    if let Some(vals) = literal_values(s) {
        let lit: Vec<&'static str> = vals.iter().map(class_of).collect();
        out.retain(|c| lit.contains(c));
    }
    for k in ["anyOf", "oneOf"] {
        if let Some(Value::Array(alts)) = s.get(k) {
            let mut any = Vec::new();
            for a in alts {
                for c in resolve(a)
                    .as_ref()
                    .and_then(Value::as_object)
                    .map_or(CLASSES.to_vec(), |o| classes(o, resolve, budget, depth + 1))
                {
                    if !any.contains(&c) {
                        any.push(c);
                    }
                }
            }
            out.retain(|c| any.contains(c));
        }
    }
    out
}

fn norm(t: &str) -> &'static str {
    CLASSES
        .iter()
        .copied()
        .find(|c| *c == t)
        .unwrap_or(if t == "integer" { "number" } else { "object" })
}

/// `const` / `enum` values, if the schema states them.
pub fn literal_values(s: &Map<String, Value>) -> Option<Vec<Value>> {
    match (s.get("const"), s.get("enum")) {
        (Some(c), _) => Some(vec![c.clone()]),
        (None, Some(Value::Array(e))) => Some(e.clone()),
        _ => None,
    }
}

/// Inclusive-or-exclusive numeric range as (lo, lo_strict, hi, hi_strict).
fn range(
    s: &Map<String, Value>,
    min: &str,
    xmin: &str,
    max: &str,
    xmax: &str,
) -> [Option<(f64, bool)>; 2] {
    let f = |k: &str| s.get(k).and_then(Value::as_f64);
    let lo = match (f(min), f(xmin)) {
        (Some(a), Some(b)) if b >= a => Some((b, true)),
        (Some(a), _) => Some((a, false)),
        (None, Some(b)) => Some((b, true)),
        _ => None,
    };
    let hi = match (f(max), f(xmax)) {
        (Some(a), Some(b)) if b <= a => Some((b, true)),
        (Some(a), _) => Some((a, false)),
        (None, Some(b)) => Some((b, true)),
        _ => None,
    };
    [lo, hi]
}

/// Whether range `a`'s top is below range `b`'s bottom.
fn below(a: &[Option<(f64, bool)>; 2], b: &[Option<(f64, bool)>; 2]) -> bool {
    match (a[1], b[0]) {
        (Some((h, hs)), Some((l, ls))) => h < l || (h == l && (hs || ls)),
        _ => false,
    }
}

/// Whether no instance can be valid against both schemas `a` and `b` (false: not proven, or
/// `budget` spent: the caller checks it).
pub fn disjoint(
    a: &Value,
    b: &Value,
    resolve: &Resolve<'_>,
    budget: &Budget,
    depth: usize,
) -> bool {
    if depth > MAX_DEPTH || budget.charge(1, "oneOf").is_err() {
        return false;
    }
    match (a, b) {
        (Value::Bool(false), _) | (_, Value::Bool(false)) => return true,
        (Value::Bool(true), _) | (_, Value::Bool(true)) => return false,
        _ => {}
    }
    let (Some(a), Some(b)) = (resolve(a), resolve(b)) else {
        return false;
    };
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return matches!((&a, &b), (Value::Bool(false), _) | (_, Value::Bool(false)));
    };
    // Alternatives on one side: disjoint from the other when each of them is.
    for (x, y) in [(a, b), (b, a)] {
        if let Some(Value::Array(alts)) = x.get("anyOf").or_else(|| x.get("oneOf")) {
            if alts
                .iter()
                .all(|alt| disjoint(alt, &Value::Object(y.clone()), resolve, budget, depth + 1))
            {
                return true;
            }
        }
    }
    let (ca, cb) = (
        classes(a, resolve, budget, depth),
        classes(b, resolve, budget, depth),
    );
    let common: Vec<&str> = ca.iter().copied().filter(|c| cb.contains(c)).collect();
    if common.is_empty() {
        return true;
    }
    if let (Some(x), Some(y)) = (literal_values(a), literal_values(b)) {
        let ys: Vec<Value> = y.iter().map(canonical).collect();
        if x.iter().all(|v| !ys.contains(&canonical(v))) {
            return true;
        }
    }
    // Every common class must be ruled out on its own.
    common.iter().all(|c| match *c {
        "number" => {
            let r = |s| {
                range(
                    s,
                    "minimum",
                    "exclusiveMinimum",
                    "maximum",
                    "exclusiveMaximum",
                )
            };
            let integer = |s: &Map<String, Value>| s.get("type") == Some(&Value::from("integer"));
            below(&r(a), &r(b))
                || below(&r(b), &r(a))
                // An integer above/below every value of the other's range of whole numbers.
                || (integer(a) && integer(b) && int_gap(&r(a), &r(b)))
        }
        "string" => {
            let r = |s| range(s, "minLength", "", "maxLength", "");
            below(&r(a), &r(b)) || below(&r(b), &r(a))
        }
        "object" => {
            objects_disjoint(a, b, resolve, budget, depth)
                || objects_disjoint(b, a, resolve, budget, depth)
        }
        "array" => {
            let r = |s| range(s, "minItems", "", "maxItems", "");
            below(&r(a), &r(b))
                || below(&r(b), &r(a))
                || arrays_disjoint(a, b, resolve, budget, depth)
        }
        _ => false,
    })
}

/// Integer ranges whose whole numbers do not meet (`maximum: 0.5` vs `minimum: 0.7`).
fn int_gap(a: &[Option<(f64, bool)>; 2], b: &[Option<(f64, bool)>; 2]) -> bool {
    let top = |r: &[Option<(f64, bool)>; 2]| {
        r[1].map(|(h, s)| {
            if s && h.fract() == 0.0 {
                h - 1.0
            } else {
                h.floor()
            }
        })
    };
    let bottom = |r: &[Option<(f64, bool)>; 2]| {
        r[0].map(|(l, s)| {
            if s && l.fract() == 0.0 {
                l + 1.0
            } else {
                l.ceil()
            }
        })
    };
    top(a).zip(bottom(b)).is_some_and(|(h, l)| h < l)
        || top(b).zip(bottom(a)).is_some_and(|(h, l)| h < l)
}

/// A key `a` requires that `b` forbids, or that both require with disjoint values.
fn objects_disjoint(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    resolve: &Resolve<'_>,
    budget: &Budget,
    depth: usize,
) -> bool {
    let required = |s: &Map<String, Value>| -> Vec<String> {
        s.get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(|k| k.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let prop = |s: &Map<String, Value>, k: &str| -> Option<Value> {
        s.get("properties").and_then(|p| p.get(k)).cloned()
    };
    let (ra, rb) = (required(a), required(b));
    ra.iter().any(|k| {
        let in_b = prop(b, k);
        let forbids = in_b.is_none()
            && b.get("additionalProperties") == Some(&Value::Bool(false))
            && !b.contains_key("patternProperties");
        let false_in_b = in_b == Some(Value::Bool(false));
        let both = rb.contains(k)
            && match (prop(a, k), in_b) {
                (Some(x), Some(y)) => disjoint(&x, &y, resolve, budget, depth + 1),
                _ => false,
            };
        forbids || both || false_in_b
    })
}

/// An element both arrays must have (index below both `minItems`) that cannot coincide.
fn arrays_disjoint(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    resolve: &Resolve<'_>,
    budget: &Budget,
    depth: usize,
) -> bool {
    let min =
        |s: &Map<String, Value>| s.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
    let elem = |s: &Map<String, Value>, i: usize| -> Option<Value> {
        let prefix = s
            .get("prefixItems")
            .or_else(|| s.get("items").filter(|v| v.is_array()));
        match prefix.and_then(Value::as_array) {
            Some(p) if i < p.len() => Some(p[i].clone()),
            Some(_) if s.contains_key("prefixItems") => s.get("items").cloned(),
            Some(_) => s.get("additionalItems").cloned(),
            None => s.get("items").cloned(),
        }
    };
    (0..min(a).min(min(b)).min(16)).any(|i| match (elem(a, i), elem(b, i)) {
        (Some(x), Some(y)) => disjoint(&x, &y, resolve, budget, depth + 1),
        _ => false,
    })
}

/// Turns the `oneOf` node `id` (compiled as `anyOf` of literal nodes) into the values that are
/// in exactly one alternative. `raw` holds each alternative's stated values (before the
/// alternative's other keywords filtered its node). The comparisons are charged to `budget`.
pub fn exactly_one(
    g: &mut Grammar,
    id: NodeId,
    raw: &[Vec<Value>],
    budget: &Budget,
) -> Result<(), String> {
    let Node::AnyOf(mut alts) = g.nodes[id].clone() else {
        return Ok(());
    };
    // A plain `$ref` alternative is a one-alternative alias of its target.
    for a in &mut alts {
        while let Node::AnyOf(inner) = &g.nodes[*a] {
            match inner.as_slice() {
                [one] => *a = *one,
                _ => break,
            }
        }
    }
    let raw: Vec<Vec<Value>> = raw
        .iter()
        .map(|l| l.iter().map(canonical).collect())
        .collect();
    let mut keep: Vec<Vec<u8>> = Vec::new();
    let mut kept: Vec<Value> = Vec::new();
    for (i, &a) in alts.iter().enumerate() {
        let vals = match &g.nodes[a] {
            Node::Literal(v) => v.as_slice(),
            Node::Never => &[],
            _ => return Err("'oneOf': an enum alternative did not compile to values".into()),
        };
        let compared: usize = raw.iter().map(Vec::len).sum::<usize>() + keep.len();
        budget
            .charge((vals.len() * (compared + 1)) as u64, "oneOf")
            .map_err(|e| e.to_string())?;
        for t in vals {
            let c = canonical(&serde_json::from_slice(t).unwrap_or(Value::Null));
            let elsewhere = raw
                .iter()
                .enumerate()
                .any(|(j, l)| j != i && l.contains(&c));
            if !elsewhere && !kept.contains(&c) {
                kept.push(c);
                keep.push(t.clone());
            }
        }
    }
    if keep.is_empty() {
        return Err("'oneOf': no value is in exactly one alternative (no instance fits)".into());
    }
    g.nodes[id] = Node::Literal(keep);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn oneof_result(s: Value) -> Result<Grammar, String> {
        Grammar::from_schema(&s).map_err(|e| e.to_string())
    }

    #[test]
    fn disjoint_alternatives_compile_and_overlapping_ones_are_refused() {
        for ok in [
            json!({"oneOf": [{"type": "string"}, {"type": "integer"}]}),
            json!({"oneOf": [{"type": "integer", "maximum": 0}, {"type": "integer", "minimum": 1}]}),
            json!({"oneOf": [
                {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
                 "required": ["kind", "x"]},
                {"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"]}]}),
            json!({"oneOf": [
                {"type": "object", "properties": {"a": {}}, "required": ["a"], "additionalProperties": false},
                {"type": "object", "properties": {"b": {}}, "required": ["b"], "additionalProperties": false}]}),
            json!({"type": "object", "properties": {"n": {"type": "integer"}},
                   "oneOf": [{"properties": {"n": {"maximum": 0}}, "required": ["n"]},
                             {"properties": {"n": {"minimum": 1}}, "required": ["n"]}]}),
            json!({"oneOf": [{"enum": [1, 2]}, {"type": "string"}]}),
            json!({"$defs": {"Cat": {"type": "object", "properties": {"pet": {"const": "cat"}},
                                     "required": ["pet"]},
                             "Dog": {"type": "object", "properties": {"pet": {"const": "dog"},
                                     "bark": {"type": "boolean"}}, "required": ["pet", "bark"]}},
                   "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]}),
            json!({"oneOf": [{"type": "array", "maxItems": 1}, {"type": "array", "minItems": 2}]}),
        ] {
            oneof_result(ok.clone()).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in [
            json!({"oneOf": [{"type": "integer"}, {"type": "number"}]}),
            json!({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}),
            json!({"oneOf": [{"enum": [2.0]}, {"type": "integer"}]}),
            json!({"oneOf": [{}, {"type": "null"}]}),
            // Objects without additionalProperties: false may carry each other's keys.
            json!({"oneOf": [{"type": "object", "properties": {"a": {}}, "required": ["a"]},
                             {"type": "object", "properties": {"b": {}}}]}),
            // Without a type, `properties` does not exclude strings.
            json!({"oneOf": [{"properties": {"a": {"const": 1}}, "required": ["a"]},
                             {"properties": {"a": {"const": 2}}, "required": ["a"]}]}),
        ] {
            let e = oneof_result(bad.clone()).unwrap_err();
            assert!(e.contains("oneOf"), "{bad}: {e}");
        }
    }

    #[test]
    fn literal_alternatives_keep_the_values_in_exactly_one() {
        let g =
            oneof_result(json!({"oneOf": [{"enum": ["a", "b", 1]}, {"enum": ["b", "c", 1.0]}]}))
                .unwrap();
        let Node::Literal(v) = &g.nodes[g.root] else {
            panic!("{:?}", g.nodes[g.root]);
        };
        assert_eq!(v, &vec![b"\"a\"".to_vec(), b"\"c\"".to_vec()]);
        let e = oneof_result(json!({"oneOf": [{"const": 1}, {"const": 1}]})).unwrap_err();
        assert!(e.contains("oneOf"), "{e}");
    }
}
