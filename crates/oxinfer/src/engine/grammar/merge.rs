//! `allOf`: the members are merged into one schema whose instances satisfy every member.
//!
//! Objects merge key by key (a key forbidden by one member's `additionalProperties: false` is
//! left out; a required one is an error), `required` is the union, bounds take the tighter
//! value, `type`s intersect, `enum`s intersect, `anyOf`/`oneOf` in a member distribute over
//! the others. Two different `pattern`s or `format`s, or any other keyword stated differently
//! by two members, are refused with an error naming it.

use super::budget::Budget;
use serde_json::{Map, Value};

/// Keywords that only annotate (kept from the first member stating them).
pub const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "$schema",
    "$id",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$defs",
    "definitions",
    "discriminator",
    "strict",
    "name",
];

type Obj = Map<String, Value>;

/// Merges the member schemas (already `$ref`-resolved objects or booleans), charging every
/// pairwise merge to `budget` (a member's `anyOf` multiplies them).
pub fn merge_all(members: &[Value], budget: &Budget) -> Result<Value, String> {
    let mut acc = Value::Object(Obj::new());
    for m in members {
        acc = merge(&acc, m, budget)?;
    }
    Ok(acc)
}

fn alts(o: &Obj) -> Option<(&'static str, &Vec<Value>)> {
    for k in ["anyOf", "oneOf"] {
        if let Some(Value::Array(a)) = o.get(k) {
            return Some((k, a));
        }
    }
    None
}

/// How many JSON values `v` holds (itself included): what cloning it costs.
pub fn weight(v: &Value) -> u64 {
    match v {
        Value::Object(o) => 1 + o.values().map(weight).sum::<u64>(),
        Value::Array(a) => 1 + a.iter().map(weight).sum::<u64>(),
        _ => 1,
    }
}

/// The merge of two schemas; charges `budget` for the values it may copy.
pub fn merge(a: &Value, b: &Value, budget: &Budget) -> Result<Value, String> {
    budget
        .charge(weight(a) + weight(b), "allOf")
        .map_err(|e| e.to_string())?;
    let (a, b) = match (a, b) {
        (Value::Bool(true), x) | (x, Value::Bool(true)) => return Ok(x.clone()),
        (Value::Bool(false), _) | (_, Value::Bool(false)) => return Ok(Value::Bool(false)),
        (Value::Object(a), Value::Object(b)) => (a, b),
        _ => return Err("allOf members must be schemas (objects or booleans)".into()),
    };
    if a.contains_key("allOf")
        || b.contains_key("allOf")
        || a.contains_key("$ref")
        || b.contains_key("$ref")
    {
        return Err("allOf member with an unresolved $ref/allOf".into());
    }
    // anyOf distributes: allOf[A, anyOf[B1, B2]] = anyOf[allOf[A, B1], allOf[A, B2]].
    for (x, y) in [(a, b), (b, a)] {
        if let Some((k, list)) = alts(x) {
            let mut rest = x.clone();
            rest.remove(k);
            let base = merge(&Value::Object(rest), &Value::Object(y.clone()), budget)?;
            if list.len() > 16 {
                return Err("allOf over an anyOf of more than 16 alternatives".into());
            }
            // Alternatives that contradict the rest drop out.
            let mut out = Vec::new();
            let mut first_err = None;
            for alt in list {
                match merge(&base, alt, budget) {
                    Ok(v) => out.push(v),
                    Err(e) => first_err = first_err.or(Some(e)),
                }
                // A spent budget is not an alternative that contradicts: stop.
                if let Some(k) = budget.spent_in() {
                    return Err(budget.message(k));
                }
            }
            if out.is_empty() {
                return Err(first_err.unwrap_or_else(|| "allOf: empty anyOf".into()));
            }
            // oneOf stays oneOf: its alternatives, each merged with the rest, must still be
            // told apart (checked where it is compiled).
            let mut o = Obj::new();
            o.insert(k.into(), Value::Array(out));
            return Ok(Value::Object(o));
        }
    }
    let mut out = a.clone();
    for (k, vb) in b {
        let va = a.get(k);
        let merged = match (k.as_str(), va) {
            (_, None) => vb.clone(),
            (k, Some(va)) if ANNOTATIONS.contains(&k) => va.clone(),
            (_, Some(va)) if va == vb => va.clone(),
            ("type", Some(va)) => merge_types(va, vb)?,
            ("required", Some(va)) => {
                let mut r: Vec<Value> = va.as_array().cloned().unwrap_or_default();
                for x in vb.as_array().into_iter().flatten() {
                    if !r.contains(x) {
                        r.push(x.clone());
                    }
                }
                Value::Array(r)
            }
            ("properties" | "additionalProperties", _) => continue,
            ("items", Some(va)) => merge(va, vb, budget)?,
            ("minimum" | "exclusiveMinimum" | "minLength" | "minItems", Some(va)) => {
                pick(va, vb, true, k)?
            }
            ("maximum" | "exclusiveMaximum" | "maxLength" | "maxItems", Some(va)) => {
                pick(va, vb, false, k)?
            }
            ("enum", Some(va)) => {
                let keep: Vec<Value> = va
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|x| vb.as_array().is_some_and(|b| b.contains(x)))
                    .cloned()
                    .collect();
                if keep.is_empty() {
                    return Err("allOf: the enums have no value in common".into());
                }
                Value::Array(keep)
            }
            (k, Some(_)) => return Err(format!("allOf: members state '{k}' differently")),
        };
        out.insert(k.clone(), merged);
    }
    if ["properties", "additionalProperties"]
        .iter()
        .any(|k| a.contains_key(*k) || b.contains_key(*k))
    {
        merge_objects(a, b, &mut out, budget)?;
    }
    Ok(Value::Object(out))
}

/// The tighter of two bounds (`max` for lower bounds).
fn pick(a: &Value, b: &Value, max: bool, k: &str) -> Result<Value, String> {
    let (Some(x), Some(y)) = (a.as_f64(), b.as_f64()) else {
        return Err(format!("allOf: '{k}' must be numbers to merge"));
    };
    Ok(if (x >= y) == max {
        a.clone()
    } else {
        b.clone()
    })
}

fn types(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    }
}

fn merge_types(a: &Value, b: &Value) -> Result<Value, String> {
    let (ta, tb) = (types(a), types(b));
    let mut out = Vec::new();
    for x in &ta {
        for y in &tb {
            let t = match (x.as_str(), y.as_str()) {
                (p, q) if p == q => p,
                ("integer", "number") | ("number", "integer") => "integer",
                _ => continue,
            };
            if !out.contains(&t.to_string()) {
                out.push(t.to_string());
            }
        }
    }
    match out.len() {
        0 => Err(format!("allOf: types {a} and {b} have nothing in common")),
        1 => Ok(Value::String(out.remove(0))),
        _ => Ok(Value::Array(out.into_iter().map(Value::String).collect())),
    }
}

/// What a member allows under a key it does not list: `None` forbidden, else a schema.
fn extra_of(o: &Obj) -> Option<Value> {
    match o.get("additionalProperties") {
        Some(Value::Bool(false)) => None,
        None | Some(Value::Bool(true)) => Some(Value::Bool(true)),
        Some(v) => Some(v.clone()),
    }
}

fn merge_objects(a: &Obj, b: &Obj, out: &mut Obj, budget: &Budget) -> Result<(), String> {
    let empty = Obj::new();
    let pa = a
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let pb = b
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<String> = out
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let mut props = Obj::new();
    let keys: Vec<&String> = pa
        .keys()
        .chain(pb.keys().filter(|k| !pa.contains_key(*k)))
        .collect();
    for k in keys {
        let sa = pa.get(k).cloned().or_else(|| extra_of(a));
        let sb = pb.get(k).cloned().or_else(|| extra_of(b));
        match (sa, sb) {
            (Some(x), Some(y)) => {
                props.insert(k.clone(), merge(&x, &y, budget)?);
            }
            _ if required.contains(k) => {
                return Err(format!(
                    "allOf: required key '{k}' is forbidden by additionalProperties: false"
                ))
            }
            _ => {}
        }
    }
    out.insert("properties".into(), Value::Object(props));
    match (extra_of(a), extra_of(b)) {
        (Some(x), Some(y)) => {
            let m = merge(&x, &y, budget)?;
            if m == Value::Bool(true) {
                out.remove("additionalProperties");
            } else {
                out.insert("additionalProperties".into(), m);
            }
        }
        _ => {
            out.insert("additionalProperties".into(), Value::Bool(false));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::grammar::budget::CompileLimits;
    use serde_json::json;

    fn merge_all(members: &[Value]) -> Result<Value, String> {
        super::merge_all(members, &Budget::new(CompileLimits::default()))
    }

    #[test]
    fn merges_objects_and_bounds() {
        let m = merge_all(&[
            json!({"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}},
                   "required": ["a"]}),
            json!({"properties": {"a": {"maximum": 9, "minimum": 2}, "b": {"type": "string"}},
                   "required": ["b"]}),
        ])
        .unwrap();
        assert_eq!(
            m["properties"]["a"],
            json!({"type": "integer", "minimum": 2, "maximum": 9})
        );
        assert_eq!(m["required"], json!(["a", "b"]));
        let closed = merge_all(&[
            json!({"properties": {"a": {}}, "additionalProperties": false}),
            json!({"properties": {"b": {}}}),
        ])
        .unwrap();
        assert_eq!(closed["properties"], json!({"a": {}}));
        let e = merge_all(&[
            json!({"properties": {"a": {}}, "additionalProperties": false}),
            json!({"properties": {"b": {}}, "required": ["b"]}),
        ])
        .unwrap_err();
        assert!(e.contains("'b'"), "{e}");
        let e = merge_all(&[json!({"pattern": "a"}), json!({"pattern": "b"})]).unwrap_err();
        assert!(e.contains("pattern"), "{e}");
        let d = merge_all(&[
            json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}),
            json!({"type": ["integer", "null"]}),
        ]);
        assert_eq!(d.unwrap(), json!({"anyOf": [{"type": "integer"}]}));
    }
}
