//! The matcher against serde_json (the reference parser): documents serde_json writes are
//! accepted byte by byte, random walks through what the matcher allows always end in text
//! serde_json parses and that holds the schema's shape, and texts serde_json rejects are never
//! complete documents.

use super::*;
use crate::engine::sampler::Rng;
use serde_json::{json, Value};

fn matcher(schema: &Value) -> JsonMatcher {
    JsonMatcher::new(Arc::new(Grammar::from_schema(schema).unwrap()))
}

fn complete(m: &JsonMatcher, text: &str) -> bool {
    let mut m = m.clone();
    m.push_bytes(text.as_bytes()) && m.is_complete()
}

/// Picks random accepted bytes (from a pool of JSON-ish bytes) until the document completes.
fn random_walk(m: &JsonMatcher, rng: &mut Rng, limit: usize) -> Option<String> {
    let pool: &[u8] = b"{}[],:\" \n0123456789-.eE+truefalsnmabcxyzAgkindcatdogp\\/u";
    let mut m = m.clone();
    let mut out = Vec::new();
    for _ in 0..limit {
        if m.is_complete() && rng.next_f64() < 0.3 {
            return Some(String::from_utf8(out).unwrap());
        }
        let ok: Vec<u8> = pool.iter().copied().filter(|&b| m.accepts(&[b])).collect();
        if ok.is_empty() {
            return m.is_complete().then(|| String::from_utf8(out).unwrap());
        }
        let b = ok[(rng.next_u64() % ok.len() as u64) as usize];
        assert!(m.push(b));
        out.push(b);
    }
    None
}

fn schema_people() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 6},
            "age": {"type": "integer"},
            "kind": {"enum": ["cat", "dog", 3, null]},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
            "ok": {"type": ["boolean", "null"]},
            "score": {"type": "number"}
        },
        "required": ["name", "age", "kind"]
    })
}

#[test]
fn serde_json_documents_are_accepted() {
    let m = matcher(&schema_people());
    for doc in [
        json!({"name": "Ann", "age": 7, "kind": "cat"}),
        json!({"age": -12, "kind": 3, "name": "", "tags": ["a", "b"], "ok": null, "score": 1.5e-3}),
        json!({"kind": null, "name": "é\"\\x", "age": 0, "ok": true}),
    ] {
        for text in [
            serde_json::to_string(&doc).unwrap(),
            serde_json::to_string_pretty(&doc).unwrap(),
        ] {
            assert!(complete(&m, &text), "rejected {text}");
        }
    }
    let any = JsonMatcher::new(Arc::new(Grammar::any_object()));
    let doc = json!({"a": [1, 2.5, -0.0, true, null, {"b": "c\u{1F600}"}], "d": {}});
    assert!(complete(&any, &serde_json::to_string_pretty(&doc).unwrap()));
}

#[test]
fn invalid_texts_are_never_complete() {
    let m = matcher(&schema_people());
    for text in [
        r#"{"name": "Ann", "age": 7}"#,                  // missing required
        r#"{"name": "Ann", "age": 7.5, "kind": "cat"}"#, // not an integer
        r#"{"name": "Annabelle", "age": 7, "kind": "cat"}"#, // too long
        r#"{"name": "A", "age": 7, "kind": "cow"}"#,     // not in enum
        r#"{"name": "A", "age": 7, "kind": "cat", "x": 1}"#, // closed object
        r#"{"name": "A", "name": "B", "age": 7, "kind": "cat"}"#, // duplicate key
        r#"{"name": "A", "age": 07, "kind": "cat"}"#,    // leading zero
        r#"{"name": "A", "age": 7, "kind": "cat",}"#,    // trailing comma
        r#"{"name": "A", "age": 7, "kind": "cat", "tags": [1]}"#, // wrong item type
    ] {
        assert!(!complete(&m, text), "accepted {text}");
    }
    let any = JsonMatcher::new(Arc::new(Grammar::any_object()));
    for text in [
        "[1]",
        "{\"a\":}",
        "{\"a\" 1}",
        "{'a': 1}",
        "{\"a\": tru}",
        "{\"a\": 1} x",
    ] {
        assert!(serde_json::from_str::<Value>(text).is_err() || !text.starts_with('{'));
        assert!(!complete(&any, text), "accepted {text}");
    }
}

#[test]
fn random_walks_parse_and_hold_the_shape() {
    let mut rng = Rng::new(42);
    let m = matcher(&schema_people());
    let mut done = 0;
    for _ in 0..300 {
        let Some(text) = random_walk(&m, &mut rng, 400) else {
            continue;
        };
        done += 1;
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let o = v.as_object().unwrap();
        assert!(o["name"].as_str().unwrap().chars().count() <= 6, "{text}");
        assert!(o["age"].is_i64() || o["age"].is_u64(), "{text}");
        assert!(["\"cat\"", "\"dog\"", "3", "null"].contains(&o["kind"].to_string().as_str()));
        if let Some(t) = o.get("tags") {
            let t = t.as_array().unwrap();
            assert!(t.len() <= 2 && t.iter().all(Value::is_string), "{text}");
        }
        assert!(o
            .keys()
            .all(|k| schema_people()["properties"].get(k).is_some()));
    }
    assert!(done > 50, "only {done} walks completed");
    let any = JsonMatcher::new(Arc::new(Grammar::any_object()));
    for _ in 0..200 {
        if let Some(text) = random_walk(&any, &mut rng, 300) {
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert!(v.is_object());
        }
    }
}

/// An independent validator for the keywords the grammar enforces (patterns through the
/// `regex` crate, formats by parsing), written from the JSON Schema text, not from the
/// matcher: the reference the random walks are checked against.
mod reference {
    use serde_json::Value;

    fn resolve<'a>(root: &'a Value, r: &str) -> &'a Value {
        let mut v = root;
        for part in r
            .trim_start_matches("#")
            .split('/')
            .filter(|p| !p.is_empty())
        {
            v = &v[part];
        }
        v
    }

    fn format_ok(f: &str, s: &str) -> bool {
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        let date = |d: &str| -> bool {
            let p: Vec<&str> = d.split('-').collect();
            if p.len() != 3 || p[0].len() != 4 || p[1].len() != 2 || p[2].len() != 2 {
                return false;
            }
            if !p.iter().all(|x| digits(x)) {
                return false;
            }
            let (y, m, dd): (u32, u32, u32) = (
                p[0].parse().unwrap(),
                p[1].parse().unwrap(),
                p[2].parse().unwrap(),
            );
            let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
            let days = [
                31,
                if leap { 29 } else { 28 },
                31,
                30,
                31,
                30,
                31,
                31,
                30,
                31,
                30,
                31,
            ];
            y >= 1 && (1..=12).contains(&m) && dd >= 1 && dd <= days[m as usize - 1]
        };
        let time = |t: &str| -> bool {
            let (main, off) = if let Some(x) = t.strip_suffix('Z') {
                (x, None)
            } else if t.len() > 6 && matches!(&t[t.len() - 6..t.len() - 5], "+" | "-") {
                (&t[..t.len() - 6], Some(&t[t.len() - 5..]))
            } else {
                return false;
            };
            let (hms, frac) = main.split_once('.').unwrap_or((main, "0"));
            let p: Vec<&str> = hms.split(':').collect();
            let two =
                |x: &str, max: u32| x.len() == 2 && digits(x) && x.parse::<u32>().unwrap() <= max;
            let off_ok = off.is_none_or(|o| {
                let q: Vec<&str> = o.split(':').collect();
                q.len() == 2 && two(q[0], 23) && two(q[1], 59)
            });
            p.len() == 3
                && two(p[0], 23)
                && two(p[1], 59)
                && two(p[2], 59)
                && digits(frac)
                && off_ok
        };
        match f {
            "date" => date(s),
            "time" => time(s),
            "date-time" => s.split_once('T').is_some_and(|(d, t)| date(d) && time(t)),
            "email" => s.contains('@'),
            "uuid" => {
                s.len() == 36
                    && s.char_indices().all(|(i, c)| {
                        if [8, 13, 18, 23].contains(&i) {
                            c == '-'
                        } else {
                            c.is_ascii_hexdigit()
                        }
                    })
            }
            // fqdn's preferred name syntax (what jsonschema's checker uses).
            "hostname" => {
                s.len() <= 253
                    && s.split('.').all(|l| {
                        (1..=63).contains(&l.len())
                            && !l.starts_with('-')
                            && !l.ends_with('-')
                            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    })
            }
            // RFC 3986: a scheme, then unreserved, sub-delims, ':@/?#' or %HH.
            "uri" => {
                let Some((scheme, rest)) = s.split_once(':') else {
                    return false;
                };
                let b = rest.as_bytes();
                let pct = (0..b.len()).all(|i| {
                    b[i] != b'%'
                        || (i + 2 < b.len()
                            && b[i + 1].is_ascii_hexdigit()
                            && b[i + 2].is_ascii_hexdigit())
                });
                scheme
                    .bytes()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic())
                    && scheme
                        .bytes()
                        .all(|c| c.is_ascii_alphanumeric() || b"+.-".contains(&c))
                    && pct
                    && rest
                        .bytes()
                        .all(|c| c.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?#%".contains(&c))
            }
            "ipv4" => {
                let p: Vec<&str> = s.split('.').collect();
                p.len() == 4
                    && p.iter().all(|x| {
                        digits(x)
                            && (x.len() == 1 || !x.starts_with('0'))
                            && x.parse::<u32>().is_ok_and(|v| v <= 255)
                    })
            }
            _ => false,
        }
    }

    fn type_ok(t: &str, v: &Value) -> bool {
        match t {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            "boolean" => v.is_boolean(),
            "null" => v.is_null(),
            _ => false,
        }
    }

    /// Whether `v` validates against `s` (resolving `$ref`s in `root`).
    pub fn valid(root: &Value, s: &Value, v: &Value) -> bool {
        let Some(o) = s.as_object() else {
            return s != &Value::Bool(false);
        };
        if let Some(r) = o.get("$ref").and_then(Value::as_str) {
            if !valid(root, resolve(root, r), v) {
                return false;
            }
        }
        if let Some(all) = o.get("allOf").and_then(Value::as_array) {
            if !all.iter().all(|a| valid(root, a, v)) {
                return false;
            }
        }
        if o.get("not").is_some_and(|n| valid(root, n, v)) {
            return false;
        }
        if let Some(alts) = o.get("anyOf").and_then(Value::as_array) {
            if !alts.iter().any(|a| valid(root, a, v)) {
                return false;
            }
        }
        if let Some(alts) = o.get("oneOf").and_then(Value::as_array) {
            if alts.iter().filter(|a| valid(root, a, v)).count() != 1 {
                return false;
            }
        }
        match o.get("type") {
            Some(Value::String(t)) if !type_ok(t, v) => return false,
            Some(Value::Array(ts)) if !ts.iter().any(|t| type_ok(t.as_str().unwrap(), v)) => {
                return false
            }
            _ => {}
        }
        if o.get("const").is_some_and(|c| c != v) {
            return false;
        }
        if o.get("enum")
            .and_then(Value::as_array)
            .is_some_and(|e| !e.contains(v))
        {
            return false;
        }
        let num = |k: &str| o.get(k).and_then(Value::as_f64);
        if let (Some(d), true) = (o.get("multipleOf"), v.is_number()) {
            // As Python's jsonschema: doubles divided when the divisor is written as a
            // fraction, else an exact remainder.
            let ok = match (d.as_u64(), v.as_i64()) {
                (Some(k), Some(i)) => i % k as i64 == 0,
                (Some(k), None) => v.as_f64().unwrap() % k as f64 == 0.0,
                (None, _) => {
                    let q = v.as_f64().unwrap() / d.as_f64().unwrap();
                    q.is_finite() && q.fract() == 0.0
                }
            };
            if !ok {
                return false;
            }
        }
        if let Some(x) = v.as_f64() {
            if num("minimum").is_some_and(|m| x < m)
                || num("maximum").is_some_and(|m| x > m)
                || num("exclusiveMinimum").is_some_and(|m| x <= m)
                || num("exclusiveMaximum").is_some_and(|m| x >= m)
            {
                return false;
            }
        }
        let count = |k: &str| o.get(k).and_then(Value::as_u64).map(|n| n as usize);
        if let Some(st) = v.as_str() {
            let n = st.chars().count();
            if count("minLength").is_some_and(|m| n < m)
                || count("maxLength").is_some_and(|m| n > m)
            {
                return false;
            }
            if let Some(p) = o.get("pattern").and_then(Value::as_str) {
                if !regex::Regex::new(p).unwrap().is_match(st) {
                    return false;
                }
            }
            if let Some(f) = o.get("format").and_then(Value::as_str) {
                if !format_ok(f, st) {
                    return false;
                }
            }
        }
        if let Some(a) = v.as_array() {
            if count("minItems").is_some_and(|m| a.len() < m)
                || count("maxItems").is_some_and(|m| a.len() > m)
            {
                return false;
            }
            if o.get("uniqueItems") == Some(&Value::Bool(true)) {
                // Numbers by value, as validators compare them.
                let key = |x: &Value| x.as_f64().map_or(x.clone(), |f| serde_json::json!(f));
                for (i, x) in a.iter().enumerate() {
                    if a[..i].iter().any(|y| key(y) == key(x)) {
                        return false;
                    }
                }
            }
            let prefix = o.get("prefixItems").and_then(Value::as_array);
            let n = prefix.map_or(0, |p| p.len());
            if let Some(p) = prefix {
                if !a.iter().zip(p).all(|(x, s)| valid(root, s, x)) {
                    return false;
                }
            }
            if let Some(items) = o.get("items") {
                if !a.iter().skip(n).all(|x| valid(root, items, x)) {
                    return false;
                }
            }
        }
        if let Some(obj) = v.as_object() {
            let props = o.get("properties").and_then(Value::as_object);
            for r in o
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if !obj.contains_key(r.as_str().unwrap()) {
                    return false;
                }
            }
            for (k, x) in obj {
                match props.and_then(|p| p.get(k)) {
                    Some(ps) => {
                        if !valid(root, ps, x) {
                            return false;
                        }
                    }
                    None if o.get("patternProperties").is_some_and(|pp| {
                        pp.as_object()
                            .unwrap()
                            .keys()
                            .any(|p| regex::Regex::new(p).unwrap().is_match(k))
                    }) =>
                    {
                        for (p, ps) in o["patternProperties"].as_object().unwrap() {
                            if regex::Regex::new(p).unwrap().is_match(k) && !valid(root, ps, x) {
                                return false;
                            }
                        }
                    }
                    None => match o.get("additionalProperties") {
                        Some(Value::Bool(false)) => return false,
                        Some(ap) if !valid(root, ap, x) => return false,
                        _ => {}
                    },
                }
            }
        }
        true
    }
}

/// Picks random accepted bytes (any of the 256) until the document completes, leaning towards
/// closing brackets and quotes; asserts the matcher is never stuck (some byte is always
/// accepted unless the document is complete).
fn random_doc(m: &JsonMatcher, rng: &mut Rng, limit: usize) -> Option<String> {
    let mut m = m.clone();
    let mut out = Vec::new();
    for _ in 0..limit {
        if m.is_finished() || (m.is_complete() && rng.next_f64() < 0.3) {
            return Some(String::from_utf8(out).expect("matcher let through invalid UTF-8"));
        }
        let ok: Vec<u8> = (0..=255u8).filter(|&b| m.accepts(&[b])).collect();
        assert!(
            !ok.is_empty() || m.is_complete(),
            "stuck after {:?}",
            String::from_utf8_lossy(&out)
        );
        if ok.is_empty() {
            return Some(String::from_utf8(out).unwrap());
        }
        let closers: Vec<u8> = ok.iter().copied().filter(|b| b"\"}]".contains(b)).collect();
        let b = if !closers.is_empty() && rng.next_f64() < 0.35 {
            closers[(rng.next_u64() % closers.len() as u64) as usize]
        } else {
            ok[(rng.next_u64() % ok.len() as u64) as usize]
        };
        assert!(m.push(b));
        out.push(b);
    }
    None
}

fn hard_schemas() -> Vec<Value> {
    vec![
        json!({"type": "object", "properties": {
            "code": {"type": "string", "pattern": "^[a-z]{2,5}-\\d{3}$"},
            "free": {"type": "string", "pattern": "ab", "maxLength": 12},
            "alt": {"type": "string", "pattern": "^(foo|bar)+$", "maxLength": 9},
            "short": {"type": "string", "minLength": 2, "maxLength": 4}},
            "required": ["code", "free", "alt", "short"]}),
        json!({"type": "object", "properties": {
            "d": {"type": "string", "format": "date"},
            "t": {"type": "string", "format": "time"},
            "dt": {"type": "string", "format": "date-time"},
            "e": {"type": "string", "format": "email"},
            "u": {"type": "string", "format": "uuid"},
            "ip": {"type": "string", "format": "ipv4"}},
            "required": ["d", "t", "dt", "e", "u", "ip"]}),
        json!({"type": "object", "properties": {
            "i": {"type": "integer", "minimum": -5, "maximum": 17},
            "big": {"type": "integer", "minimum": 100, "exclusiveMaximum": 100000},
            "x": {"type": "number", "exclusiveMinimum": 0.5, "maximum": 3.25},
            "neg": {"type": "number", "maximum": -0.001},
            "pos": {"type": "integer", "exclusiveMinimum": 0}},
            "required": ["i", "big", "x", "neg", "pos"]}),
        json!({"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
               "minItems": 2, "maxItems": 4}),
        json!({"allOf": [
            {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}, "required": ["a"]},
            {"properties": {"a": {"maximum": 5}, "b": {"type": "string", "maxLength": 3}}, "required": ["b"]}]}),
        json!({"$defs": {"node": {"type": "object", "properties": {
                "v": {"type": "integer"},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
                "required": ["v"]}},
               "$ref": "#/$defs/node"}),
        json!({"anyOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "boolean"}},
             "required": ["a", "b"]}]}),
        json!({"type": "array", "items": {"anyOf": [
            {"type": "string", "maxLength": 3}, {"type": "string", "pattern": "^x+$"},
            {"type": "number", "minimum": 10}, {"enum": [1, "one", null]}]}}),
        json!({"type": "object", "properties": {"k": {"type": "string", "enum": ["a", "b", 3]}},
               "required": ["k"]}),
        // 9: tuples, then a rest of another type
        json!({"type": "array", "prefixItems": [
            {"type": "integer", "minimum": 0, "maximum": 9}, {"enum": ["x", "y"]},
            {"type": "boolean"}], "items": {"type": "null"}, "minItems": 2, "maxItems": 5}),
        // 10: a closed tuple
        json!({"type": "array", "prefixItems": [{"type": "string", "maxLength": 2},
               {"type": "integer"}], "items": false}),
        // 11: multiples
        json!({"type": "object", "properties": {
            "k": {"type": "integer", "multipleOf": 7},
            "r": {"type": "integer", "multipleOf": 5, "minimum": 11, "maximum": 29},
            "c": {"type": "number", "multipleOf": 0.01, "minimum": 0, "maximum": 2},
            "h": {"type": "number", "multipleOf": 0.5, "exclusiveMinimum": -3},
            "t": {"type": "number", "multipleOf": 0.1}},
            "required": ["k", "r", "c", "h", "t"]}),
        // 12: host names and URLs
        json!({"type": "object", "properties": {
            "host": {"type": "string", "format": "hostname"},
            "url": {"type": "string", "format": "uri", "maxLength": 60}},
            "required": ["host", "url"]}),
        // 13: not
        json!({"type": "object", "properties": {
            "v": {"not": {"type": ["object", "array", "string", "boolean"]}},
            "s": {"enum": ["red", "green", "blue", 7], "not": {"enum": ["green", 7]}},
            "b": {"type": "boolean", "not": {"const": true}},
            "n": {"type": ["string", "null"], "maxLength": 3, "not": {"type": "string"}}},
            "required": ["v", "s", "b", "n"]}),
        // 14: a discriminated union and overlapping enums
        json!({"type": "object", "properties": {
            "pet": {"oneOf": [
                {"type": "object", "properties": {"kind": {"const": "cat"},
                 "lives": {"type": "integer", "minimum": 1, "maximum": 9}},
                 "required": ["kind", "lives"]},
                {"type": "object", "properties": {"kind": {"const": "dog"},
                 "good": {"type": "boolean"}}, "required": ["kind"]}]},
            "e": {"oneOf": [{"enum": ["a", "b", 1]}, {"enum": ["b", 1.0, "c"]}]}},
            "required": ["pet", "e"]}),
        // 15: uniqueItems over enums (1 and 1.0 are one value)
        json!({"type": "array", "uniqueItems": true, "minItems": 2, "maxItems": 6,
               "items": {"enum": ["a", "b", "c", 1, 1.0, 2]}}),
        // 16: uniqueItems that must use every value
        json!({"type": "object", "properties": {"v": {"type": "array", "uniqueItems": true,
               "items": {"type": ["boolean", "null"]}, "minItems": 3}}, "required": ["v"]}),
        // 17: a map whose keys follow a pattern
        json!({"type": "object", "patternProperties": {"^[a-z]{1,6}_[0-9]$": {
               "type": "integer", "minimum": 0, "maximum": 9}}, "additionalProperties": false}),
    ]
}

#[test]
fn random_documents_validate_against_the_reference() {
    let mut rng = Rng::new(7);
    for schema in hard_schemas() {
        let m = matcher(&schema);
        let mut done = 0;
        for _ in 0..60 {
            let Some(text) = random_doc(&m, &mut rng, 3000) else {
                continue;
            };
            done += 1;
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert!(reference::valid(&schema, &schema, &v), "{schema}\n{text}");
        }
        assert!(done >= 20, "{schema}: only {done} walks completed");
    }
}

#[test]
fn overlapping_any_of_keeps_every_alternative() {
    let schema = &hard_schemas()[6];
    // `{"a": "x", "b": true}` fits only the second alternative, `{"a": 1}` only the first:
    // both start the same way, so neither may be cut off at the first byte.
    for text in [r#"{"a": 1}"#, r#"{"a": "x", "b": true}"#] {
        assert!(complete(&matcher(schema), text), "rejected {text}");
    }
    assert!(!complete(&matcher(schema), r#"{"a": "x"}"#));
}

#[test]
fn bounds_patterns_and_formats_reject_invalid_text() {
    let s = hard_schemas();
    for (i, text) in [
        (
            0,
            r#"{"code": "ab-12", "free": "ab", "alt": "foo", "short": "ab"}"#,
        ),
        (
            0,
            r#"{"code": "ab-123", "free": "ba", "alt": "foo", "short": "ab"}"#,
        ),
        (
            0,
            r#"{"code": "ab-123", "free": "ab", "alt": "foofoofoo1", "short": "ab"}"#,
        ),
        (3, "[1, 10]"),
        (3, "[1]"),
        (3, "[1e0, 2]"),
        (4, r#"{"a": 6, "b": "x"}"#),
        (4, r#"{"a": 1}"#),
        (9, r#"[1]"#),
        (9, r#"["x", 1]"#),
        (9, r#"[1, "x", true, 3]"#),
        (10, r#"["a", 1, 2]"#),
        (11, r#"{"k": 8, "r": 15, "c": 0.5, "h": 1, "t": 0.2}"#),
        (11, r#"{"k": 7, "r": 30, "c": 0.5, "h": 1, "t": 0.2}"#),
        (11, r#"{"k": 7, "r": 15, "c": 0.07, "h": 1, "t": 0.2}"#),
        (11, r#"{"k": 7, "r": 15, "c": 0.5, "h": -3, "t": 0.2}"#),
        (11, r#"{"k": 7, "r": 15, "c": 0.5, "h": 1.25, "t": 0.2}"#),
        (11, r#"{"k": 7, "r": 15, "c": 0.5, "h": 1, "t": 0.3}"#),
        (12, r#"{"host": "-a.com", "url": "http://a.b"}"#),
        (12, r#"{"host": "a..com", "url": "http://a.b"}"#),
        (12, r#"{"host": "a.com", "url": "http://a b"}"#),
        (12, r#"{"host": "a.com", "url": "mailto:x"}"#),
        (15, r#"["a", "a"]"#),
        (17, r#"{"ab": 1}"#),
        (17, r#"{"ab_1": 10}"#),
        (17, r#"{"abcdefg_1": 1}"#),
        (15, r#"[1, 1.0]"#),
        (15, r#"["a"]"#),
        (16, r#"{"v": [true, null]}"#),
        (16, r#"{"v": [true, null, false, true]}"#),
    ] {
        assert!(!complete(&matcher(&s[i]), text), "accepted {text}");
    }
    for (i, text) in [
        (
            0,
            r#"{"code": "abc-123", "free": "xxabyy", "alt": "barfoo", "short": "abcd"}"#,
        ),
        (
            1,
            r#"{"d": "2024-02-28", "t": "23:59:59.5+01:00", "dt": "1999-12-31T00:00:00Z", "e": "a.b@example.org", "u": "123e4567-e89b-12d3-a456-426614174000", "ip": "192.168.0.255"}"#,
        ),
        (
            2,
            r#"{"i": -5, "big": 99999, "x": 3.25, "neg": -0.001, "pos": 1}"#,
        ),
        (4, r#"{"a": 5, "b": "xyz"}"#),
        (9, r#"[0, "y"]"#),
        (9, r#"[9, "x", false, null, null]"#),
        (10, r#"["ab", -4]"#),
        (10, r#"[]"#),
        (15, r#"["c", 1, "a", 2]"#),
        (17, r#"{"ab_1": 1, "x_0": 9}"#),
        (17, r#"{}"#),
        (16, r#"{"v": [null, false, true]}"#),
        (11, r#"{"k": -14, "r": 25, "c": 1.99, "h": -2.5, "t": 0.5}"#),
        (11, r#"{"k": 0, "r": 15, "c": 0.06, "h": 2.0, "t": 3}"#),
        (
            12,
            r#"{"host": "a-1.example.org", "url": "https://x.io:8080/p/q.html?a=1&b=2#top"}"#,
        ),
        (5, r#"{"v": 1, "kids": [{"v": 2, "kids": []}, {"v": 3}]}"#),
    ] {
        assert!(complete(&matcher(&s[i]), text), "rejected {text}");
    }
    for (text, why) in [
        (r#""2023-02-30""#, "no Feb 30"),
        (r#""24:00:00Z""#, "hour 24"),
        (r#""256.1.1.1""#, "octet"),
        (r#""01.1.1.1""#, "leading zero"),
    ] {
        let f = match why {
            "no Feb 30" => "date",
            "hour 24" => "time",
            _ => "ipv4",
        };
        assert!(
            !complete(&matcher(&json!({"type": "string", "format": f})), text),
            "{why}"
        );
    }
    let b = matcher(&s[2]);
    for text in [
        r#"{"i": 18"#,
        r#"{"i": -6"#,
        r#"{"i": 1, "big": 100000"#,
        r#"{"i": 1, "big": 99, "#,
        r#"{"i": 1, "big": 100, "x": 0.5,"#,
        r#"{"i": 1, "big": 100, "x": 3.251"#,
        r#"{"i": 1, "big": 100, "x": 1, "neg": 0"#,
        r#"{"i": 1, "big": 100, "x": 1, "neg": -1, "pos": 0,"#,
    ] {
        assert!(!b.accepts(text.as_bytes()), "accepted {text}");
    }
}

#[test]
fn unsupported_keywords_are_refused_by_name() {
    for (schema, word) in [
        (json!({"type": "string", "not": {"pattern": "x"}}), "not"),
        (json!({"type": "string", "not": {"const": "x"}}), "not"),
        (json!({"type": "string", "format": "ipv6"}), "ipv6"),
        (json!({"type": "string", "pattern": "(?=x)"}), "lookahead"),
        (json!({"type": "number", "multipleOf": 1e-20}), "multipleOf"),
        (json!({"type": "integer", "multipleOf": 0}), "multipleOf"),
        (
            json!({"type": "array", "additionalItems": false}),
            "additionalItems",
        ),
        (
            json!({"type": "object", "patternProperties": {"a": {}, "b": {}}}),
            "patternProperties",
        ),
        (
            json!({"type": "object", "patternProperties": {"a": {}}}),
            "patternProperties",
        ),
        (json!({"type": "array", "uniqueItems": true}), "uniqueItems"),
        (
            json!({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}),
            "finite",
        ),
    ] {
        let e = Grammar::from_schema(&schema).unwrap_err().to_string();
        assert!(e.contains(word), "{schema}: {e}");
    }
}

/// Masking over a mock vocabulary of multi-byte tokens and sampling at random (a stand-in for
/// a model at high temperature): every generation ends in a document the reference accepts.
#[test]
fn masked_sampling_over_a_token_vocabulary_validates() {
    let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    for t in [
        "{\"", "\":", "\": \"", "\",", "\"}", "}", "]", "[", ", ", "true", "null", "12", "-3",
        "0.", "e5", "abc", "-12", "T1", ":00", "Z\"", "@x.com", "é", "😀", "\\n", "\\u00e9",
        "code", "free", "alt", "short", "foo", "bar", "\"v\"", "kids", "2024-", "01-",
    ] {
        tokens.push(t.as_bytes().to_vec());
    }
    let eos = tokens.len() as u32;
    tokens.push(Vec::new());
    let vocab = Arc::new(Vocabulary::from_tokens(tokens, vec![eos]));
    let mut rng = Rng::new(99);
    for schema in hard_schemas() {
        let grammar = Arc::new(Grammar::from_schema(&schema).unwrap());
        let mut done = 0;
        for _ in 0..15 {
            let mut c = Constraint::new(grammar.clone(), vocab.clone());
            let mut text = Vec::new();
            for _ in 0..1500 {
                let mut logits: Vec<f32> =
                    (0..=eos).map(|_| (rng.next_f64() * 4.0) as f32).collect();
                // Lean to closing so documents end.
                for t in [b"\"".as_slice(), b"}", b"]", b"\"}"] {
                    if let Some(i) = vocab.bytes.iter().position(|x| x == t) {
                        logits[i] += 1.0;
                    }
                }
                logits[eos as usize] += 2.0;
                let n = c.mask(&mut logits, 0);
                assert!(
                    n > 0,
                    "{schema}: nothing allowed after {:?}",
                    String::from_utf8_lossy(&text)
                );
                let allowed: Vec<usize> = (0..logits.len())
                    .filter(|&i| logits[i].is_finite())
                    .collect();
                let best = allowed
                    .iter()
                    .copied()
                    .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                    .unwrap();
                assert!(c.advance(best as u32));
                text.extend_from_slice(&vocab.bytes[best]);
                if best as u32 == eos || c.is_finished() {
                    break;
                }
            }
            if !c.is_complete() {
                continue;
            }
            done += 1;
            let s = String::from_utf8(text).unwrap();
            let v: Value = serde_json::from_str(&s).unwrap_or_else(|e| panic!("{s:?}: {e}"));
            assert!(reference::valid(&schema, &schema, &v), "{schema}\n{s}");
        }
        assert!(done >= 5, "{schema}: only {done} generations completed");
    }
}
