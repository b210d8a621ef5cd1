//! `not`, for the cases that rewrite into keywords the matcher enforces exactly:
//! `not: {type: …}` removes those types from the schema's own (`integer` cannot be taken out of
//! `number`: a non-whole number is not enforced), `not: {const: …}` / `not: {enum: […]}` removes
//! values from a schema that is itself an `enum`/`const` or `boolean`/`null`. Anything else is
//! refused with an error naming `not`.

use super::merge::ANNOTATIONS;
use super::oneof::canonical;
use serde_json::{Map, Value};

const TYPES: [&str; 6] = ["object", "array", "string", "number", "boolean", "null"];

/// `obj` with its `not` (already `$ref`-resolved: `negated`) folded into its other keywords.
pub fn apply(obj: &Map<String, Value>, negated: &Value) -> Result<Map<String, Value>, String> {
    let mut out = obj.clone();
    out.remove("not");
    let n = match negated {
        Value::Bool(false) => return Ok(out),
        Value::Bool(true) => return Err("'not': true admits no value".into()),
        Value::Object(n) => n,
        _ => return Err("'not' must be a schema".into()),
    };
    let keys: Vec<&str> = n
        .keys()
        .map(String::as_str)
        .filter(|k| !ANNOTATIONS.contains(k))
        .collect();
    match keys.as_slice() {
        [] => Err("'not': {} admits no value".into()),
        ["type"] => {
            let excluded = type_list(&n["type"])?;
            let mut allowed = match obj.get("type") {
                Some(t) => type_list(t)?,
                None => TYPES.iter().map(|t| t.to_string()).collect(),
            };
            for e in &excluded {
                match e.as_str() {
                    "number" => allowed.retain(|t| t != "number" && t != "integer"),
                    "integer" if allowed.iter().any(|t| t == "number") => {
                        return Err("'not': {type: integer} within numbers (only non-whole \
                                    numbers) is not supported"
                            .into())
                    }
                    e => allowed.retain(|t| t != e),
                }
            }
            if allowed.is_empty() {
                return Err("'not': every type is excluded (no value fits)".into());
            }
            out.insert(
                "type".into(),
                Value::Array(allowed.into_iter().map(Value::String).collect()),
            );
            Ok(out)
        }
        ["const"] | ["enum"] => {
            let excluded: Vec<Value> = match (n.get("const"), n.get("enum")) {
                (Some(c), _) => vec![canonical(c)],
                (_, Some(Value::Array(e))) => e.iter().map(canonical).collect(),
                _ => return Err("'not': enum must be an array".into()),
            };
            let values: Vec<Value> = match (obj.get("const"), obj.get("enum")) {
                (Some(c), _) => vec![c.clone()],
                (_, Some(Value::Array(e))) => e.clone(),
                _ => match obj.get("type").map(type_list).transpose()?.as_deref() {
                    Some(ts) if ts.iter().all(|t| t == "boolean" || t == "null") => ts
                        .iter()
                        .flat_map(|t| match t.as_str() {
                            "boolean" => vec![Value::Bool(true), Value::Bool(false)],
                            _ => vec![Value::Null],
                        })
                        .collect(),
                    _ => {
                        return Err("'not' with const/enum is only supported on a schema that \
                                    is itself an enum, const, boolean or null"
                            .into())
                    }
                },
            };
            let kept: Vec<Value> = values
                .into_iter()
                .filter(|v| !excluded.contains(&canonical(v)))
                .collect();
            if kept.is_empty() {
                return Err("'not' excludes every value (no value fits)".into());
            }
            out.remove("const");
            out.insert("enum".into(), Value::Array(kept));
            Ok(out)
        }
        _ => Err(format!(
            "'not' is only supported with just type, const or enum (here: {})",
            keys.join(", ")
        )),
    }
}

fn type_list(t: &Value) -> Result<Vec<String>, String> {
    match t {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(a) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(String::from)
                    .ok_or_else(|| "type entries must be strings".to_string())
            })
            .collect(),
        _ => Err("type must be a string or an array".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ap(s: Value) -> Result<Value, String> {
        let o = s.as_object().unwrap();
        apply(o, &o["not"]).map(Value::Object)
    }

    #[test]
    fn types_and_values_are_removed() {
        assert_eq!(
            ap(json!({"not": {"type": "null"}, "type": ["string", "null"]})).unwrap(),
            json!({"type": ["string"]})
        );
        assert_eq!(
            ap(json!({"not": {"type": ["object", "array", "string"]}})).unwrap(),
            json!({"type": ["number", "boolean", "null"]})
        );
        assert_eq!(
            ap(json!({"type": ["integer", "string"], "not": {"type": "number"}})).unwrap(),
            json!({"type": ["string"]})
        );
        assert_eq!(
            ap(json!({"enum": ["a", "b", 1], "not": {"enum": ["b", 1.0]}})).unwrap(),
            json!({"enum": ["a"]})
        );
        assert_eq!(
            ap(json!({"type": "boolean", "not": {"const": false}})).unwrap(),
            json!({"type": "boolean", "enum": [true]})
        );
        for (bad, word) in [
            (
                json!({"type": "number", "not": {"type": "integer"}}),
                "integer",
            ),
            (json!({"type": "string", "not": {"const": "x"}}), "enum"),
            (
                json!({"not": {"type": "string", "maxLength": 2}}),
                "maxLength",
            ),
            (
                json!({"type": "null", "not": {"type": "null"}}),
                "every type",
            ),
            (json!({"not": {}}), "no value"),
        ] {
            let e = ap(bad.clone()).unwrap_err();
            assert!(e.contains("not") && e.contains(word), "{bad}: {e}");
        }
    }
}
