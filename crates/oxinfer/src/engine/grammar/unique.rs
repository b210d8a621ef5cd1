//! `uniqueItems` on arrays whose elements are enums, consts, booleans or nulls: the matcher
//! keeps the canonical text of every finished element and drops, when the next element opens,
//! the values already written; a new element is only started while an unused value is left,
//! and a schema whose distinct values cannot reach `minItems` is refused, so generation never
//! reaches a dead end. Values compare as validators compare them (`1` equals `1.0`).

use super::budget::Budget;
use super::node::{Grammar, Node, NodeId, MAX_ENUM_VALUES};
use super::oneof::canonical;
use serde_json::Value;

/// The text two equal values share.
pub fn canonical_text(t: &[u8]) -> Vec<u8> {
    let v: Value = serde_json::from_slice(t).unwrap_or(Value::Null);
    serde_json::to_vec(&canonical(&v)).unwrap_or_default()
}

/// Every value a node of literals can take (`None`: not only literals, or more than
/// [`MAX_ENUM_VALUES`]).
fn values(g: &Grammar, n: NodeId, depth: usize, out: &mut Vec<Vec<u8>>) -> Option<()> {
    if depth > 16 || out.len() > MAX_ENUM_VALUES {
        return None;
    }
    let mut add = |t: &[u8]| {
        let c = canonical_text(t);
        if !out.contains(&c) {
            out.push(c);
        }
    };
    match &g.nodes[n] {
        Node::Literal(vals) => vals.iter().for_each(|t| add(t)),
        Node::Boolean => {
            add(b"true");
            add(b"false");
        }
        Node::Null => add(b"null"),
        Node::Never => {}
        Node::AnyOf(alts) => {
            for &a in alts {
                values(g, a, depth + 1, out)?;
            }
        }
        _ => return None,
    }
    Some(())
}

/// Fills in the values of the `uniqueItems` array node `id`; errors when its elements are not
/// literals (at most [`MAX_ENUM_VALUES`] distinct ones) or too few values exist for
/// `minItems`. The (quadratic) deduplication is charged to `budget`.
pub fn resolve(g: &mut Grammar, id: NodeId, budget: &Budget) -> Result<(), String> {
    let Node::Array { items, min, .. } = &g.nodes[id] else {
        return Ok(());
    };
    let (items, min) = (*items, *min);
    let mut vals = Vec::new();
    values(g, items, 0, &mut vals).ok_or_else(|| {
        format!(
            "'uniqueItems' is only supported on arrays whose items are enums, consts, booleans \
             or nulls, with at most {MAX_ENUM_VALUES} distinct values"
        )
    })?;
    budget
        .charge((vals.len() * vals.len()) as u64, "uniqueItems")
        .map_err(|e| e.to_string())?;
    if vals.len() < min {
        return Err(format!(
            "'uniqueItems': the items have {} distinct values, fewer than minItems = {min}",
            vals.len()
        ));
    }
    if let Node::Array { unique, .. } = &mut g.nodes[id] {
        *unique = Some(vals);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_collected_and_impossible_schemas_refused() {
        let g = Grammar::from_schema(&json!({"type": "array", "uniqueItems": true,
            "items": {"anyOf": [{"enum": [1, 1.0, "a"]}, {"type": "boolean"}]}}))
        .unwrap();
        let Node::Array { unique, .. } = &g.nodes[g.root] else {
            panic!("{:?}", g.nodes[g.root]);
        };
        assert_eq!(unique.as_ref().unwrap().len(), 4);
        for (bad, word) in [
            (
                json!({"type": "array", "uniqueItems": true, "items": {"type": "string"}}),
                "enums",
            ),
            (
                json!({"type": "array", "uniqueItems": true, "items": {"type": "boolean"}, "minItems": 3}),
                "minItems",
            ),
            (
                json!({"type": "array", "uniqueItems": true, "prefixItems": [{"const": 1}]}),
                "prefixItems",
            ),
        ] {
            let e = Grammar::from_schema(&bad).unwrap_err().to_string();
            assert!(e.contains("uniqueItems") && e.contains(word), "{bad}: {e}");
        }
    }
}
