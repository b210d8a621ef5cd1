//! The subset of JSON Schema that constrained decoding enforces, compiled into a flat arena of
//! nodes the [`super::JsonMatcher`] walks.
//!
//! Enforced: `type` (one of object, array, string, integer, number, boolean, null), `properties`
//! with `required` (an object with `properties` is closed: no other keys are generated),
//! `additionalProperties` (a schema, or `true`/absent for free objects without `properties`),
//! `items`, `minItems`, `maxItems`, `minLength`, `maxLength`, `enum`, `const`, `anyOf`/`oneOf`
//! (the first alternative whose first character fits is taken), and local `$ref`s into `$defs`
//! / `definitions`. Accepted but not enforced: `pattern`, `format`, `minimum`, `maximum`,
//! `description`, `title`, `default`. Anything else (`allOf`, `not`, several types, recursive
//! references) is refused with an error naming where it is.

use serde_json::Value;

/// Index of a node in [`Grammar::nodes`].
pub type NodeId = usize;

/// One compiled schema node.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// Any JSON value.
    Any,
    /// An object. `props` are the known keys with their value nodes and whether each is
    /// required; `extra` is the node of values under other keys (`None`: no other keys).
    Object {
        props: Vec<(String, NodeId, bool)>,
        extra: Option<NodeId>,
    },
    /// An array of `items`, between `min` and `max` elements.
    Array {
        items: NodeId,
        min: usize,
        max: Option<usize>,
    },
    /// A string of `min ..= max` characters.
    String { min: usize, max: Option<usize> },
    /// A number; `integer` forbids a fraction and an exponent.
    Number { integer: bool },
    /// `true` or `false`.
    Boolean,
    /// `null`.
    Null,
    /// One of these exact JSON texts (from `enum` / `const`, serialized compactly).
    Literal(Vec<Vec<u8>>),
    /// The first of these alternatives whose first character fits.
    AnyOf(Vec<NodeId>),
}

/// A compiled schema: the nodes and the root.
#[derive(Clone, Debug, PartialEq)]
pub struct Grammar {
    pub nodes: Vec<Node>,
    pub root: NodeId,
    /// Helper nodes for values of [`Node::Any`]: a free object, a free array, `true`/`false`,
    /// `null`.
    pub any_object: NodeId,
    pub any_array: NodeId,
    pub boolean: NodeId,
    pub null: NodeId,
}

/// A schema construct that cannot be enforced.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[error("JSON schema at {path}: {what}")]
pub struct SchemaError {
    /// JSON-pointer-like location in the schema (`#/properties/name`).
    pub path: String,
    pub what: String,
}

/// Deepest `$ref` chain or nesting followed before giving up (recursive schemas).
const MAX_DEPTH: usize = 32;

impl Grammar {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    pub fn any_object() -> Grammar {
        let g = Grammar::with_helpers(Vec::new(), 0);
        Grammar {
            root: g.any_object,
            ..g
        }
    }

    /// Appends the helper nodes to `nodes`.
    fn with_helpers(mut nodes: Vec<Node>, root: NodeId) -> Grammar {
        let any = nodes.len();
        nodes.push(Node::Any);
        nodes.push(Node::Object {
            props: Vec::new(),
            extra: Some(any),
        });
        nodes.push(Node::Array {
            items: any,
            min: 0,
            max: None,
        });
        nodes.push(Node::Literal(vec![b"true".to_vec(), b"false".to_vec()]));
        nodes.push(Node::Literal(vec![b"null".to_vec()]));
        Grammar {
            nodes,
            root,
            any_object: any + 1,
            any_array: any + 2,
            boolean: any + 3,
            null: any + 4,
        }
    }

    /// Compiles a JSON schema.
    pub fn from_schema(schema: &Value) -> Result<Grammar, SchemaError> {
        let mut c = Compiler {
            root: schema,
            nodes: Vec::new(),
        };
        let root = c.node(schema, "#", 0)?;
        Ok(Grammar::with_helpers(c.nodes, root))
    }
}

struct Compiler<'a> {
    root: &'a Value,
    nodes: Vec<Node>,
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

    fn resolve(&self, r: &str, path: &str) -> Result<&'a Value, SchemaError> {
        let rest = r
            .strip_prefix("#/")
            .ok_or_else(|| Self::err(path, format!("only local $ref '#/...' is supported: {r}")))?;
        let mut v = self.root;
        for part in rest.split('/') {
            let part = part.replace("~1", "/").replace("~0", "~");
            v = v
                .get(&part)
                .ok_or_else(|| Self::err(path, format!("$ref {r} points nowhere")))?;
        }
        Ok(v)
    }

    fn node(&mut self, s: &'a Value, path: &str, depth: usize) -> Result<NodeId, SchemaError> {
        if depth > MAX_DEPTH {
            return Err(Self::err(
                path,
                "nesting or $ref chain too deep (recursive?)",
            ));
        }
        let obj = match s {
            Value::Bool(true) => return Ok(self.push(Node::Any)),
            Value::Object(o) => o,
            _ => return Err(Self::err(path, "a schema must be an object or true")),
        };
        if let Some(r) = obj.get("$ref") {
            let r = r
                .as_str()
                .ok_or_else(|| Self::err(path, "$ref must be a string"))?;
            let target = self.resolve(r, path)?;
            return self.node(target, &format!("{path}/$ref({r})"), depth + 1);
        }
        for k in ["allOf", "not", "if", "patternProperties"] {
            if obj.contains_key(k) {
                return Err(Self::err(path, format!("'{k}' is not supported")));
            }
        }
        if let Some(c) = obj.get("const") {
            return Ok(self.push(Node::Literal(vec![compact(c)])));
        }
        if let Some(e) = obj.get("enum") {
            let vals = e
                .as_array()
                .filter(|a| !a.is_empty())
                .ok_or_else(|| Self::err(path, "enum must be a non-empty array"))?;
            return Ok(self.push(Node::Literal(vals.iter().map(compact).collect())));
        }
        for k in ["anyOf", "oneOf"] {
            if let Some(alts) = obj.get(k) {
                let alts = alts
                    .as_array()
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| Self::err(path, format!("{k} must be a non-empty array")))?;
                let ids = alts
                    .iter()
                    .enumerate()
                    .map(|(i, a)| self.node(a, &format!("{path}/{k}/{i}"), depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                return Ok(self.push(Node::AnyOf(ids)));
            }
        }
        let ty = match obj.get("type") {
            None => {
                if obj.contains_key("properties") {
                    "object"
                } else if obj.contains_key("items") {
                    "array"
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
        obj: &'a serde_json::Map<String, Value>,
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
                if props.len() > 64 {
                    return Err(Self::err(path, "more than 64 properties"));
                }
                for r in &required {
                    if !props.iter().any(|(k, _, _)| k == r) && obj.contains_key("properties") {
                        return Err(Self::err(
                            path,
                            format!("required key '{r}' is not in properties"),
                        ));
                    }
                }
                let extra = match obj.get("additionalProperties") {
                    Some(Value::Bool(false)) => None,
                    Some(Value::Bool(true)) => Some(self.push(Node::Any)),
                    None if props.is_empty() => Some(self.push(Node::Any)),
                    None => None,
                    Some(v) => {
                        Some(self.node(v, &format!("{path}/additionalProperties"), depth + 1)?)
                    }
                };
                self.push(Node::Object { props, extra })
            }
            "array" => {
                let items = match obj.get("items") {
                    Some(v) => self.node(v, &format!("{path}/items"), depth + 1)?,
                    None => self.push(Node::Any),
                };
                let (min, max) = (usize_of("minItems").unwrap_or(0), usize_of("maxItems"));
                if max.is_some_and(|m| m < min) {
                    return Err(Self::err(path, "maxItems < minItems"));
                }
                self.push(Node::Array { items, min, max })
            }
            "string" => {
                let (min, max) = (usize_of("minLength").unwrap_or(0), usize_of("maxLength"));
                if max.is_some_and(|m| m < min) {
                    return Err(Self::err(path, "maxLength < minLength"));
                }
                self.push(Node::String { min, max })
            }
            "integer" => self.push(Node::Number { integer: true }),
            "number" => self.push(Node::Number { integer: false }),
            "boolean" => self.push(Node::Boolean),
            "null" => self.push(Node::Null),
            other => return Err(Self::err(path, format!("unknown type '{other}'"))),
        })
    }
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
        let Node::Object { props, extra } = &g.nodes[g.root] else {
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
        assert!(e.to_string().contains("too deep"), "{e}");
    }
}
