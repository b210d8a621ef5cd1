//! Python's spelling of template values: `json.dumps` (transformers' `tojson` filter) and `str()`
//! (what Jinja2 prints for `{{ value }}`), so rendered prompts match transformers byte for byte.

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// Options of Python's `json.dumps` that transformers' `tojson` exposes.
#[derive(Clone, Debug)]
pub(crate) struct JsonOptions {
    /// `ensure_ascii`: escape every non-ASCII character as `\uXXXX`.
    pub ensure_ascii: bool,
    /// `indent`: `None` for one line, else the indentation string per level.
    pub indent: Option<String>,
    /// `separators`: (item separator, key separator).
    pub separators: (String, String),
    /// `sort_keys`.
    pub sort_keys: bool,
}

impl JsonOptions {
    /// transformers' defaults (`ensure_ascii=False`), with Python's separators for `indent`.
    pub fn new(
        ensure_ascii: bool,
        indent: Option<String>,
        separators: Option<(String, String)>,
        sort_keys: bool,
    ) -> Self {
        let separators = separators.unwrap_or_else(|| {
            if indent.is_some() {
                (",".into(), ": ".into())
            } else {
                (", ".into(), ": ".into())
            }
        });
        JsonOptions {
            ensure_ascii,
            indent,
            separators,
            sort_keys,
        }
    }
}

/// Python's `repr(float)` (and `json.dumps` of a float).
pub(crate) fn py_float(x: f64, json: bool) -> String {
    if x.is_nan() {
        return if json { "NaN" } else { "nan" }.into();
    }
    if x.is_infinite() {
        let s = if json { "Infinity" } else { "inf" };
        return if x < 0.0 { format!("-{s}") } else { s.into() };
    }
    // Shortest round-trip digits, in scientific form to read the exponent.
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let mut s = format!("{x}");
        if !s.contains('.') {
            s.push_str(".0");
        }
        s
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    }
}

/// A JSON string literal as Python's encoder writes it.
fn json_str(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ensure_ascii && !(' '..='~').contains(&c) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The key of a JSON object: Python converts str, int, float, bool and None keys to strings.
fn json_key(key: &Value) -> Result<String, Error> {
    Ok(match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_string(),
        ValueKind::Bool => if key.is_true() { "true" } else { "false" }.to_string(),
        ValueKind::None => "null".to_string(),
        ValueKind::Number if key.is_integer() => key.to_string(),
        ValueKind::Number => py_float(f64::try_from(key.clone())?, true),
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!(
                    "tojson: keys must be str, int, float, bool or None, not {}",
                    key.kind()
                ),
            ))
        }
    })
}

/// `json.dumps(value, ...)`.
pub(crate) fn to_json(value: &Value, opts: &JsonOptions) -> Result<String, Error> {
    let mut out = String::new();
    write_json(value, opts, 0, &mut out)?;
    Ok(out)
}

fn newline(opts: &JsonOptions, level: usize, out: &mut String) {
    if let Some(ind) = &opts.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

fn write_json(
    value: &Value,
    opts: &JsonOptions,
    level: usize,
    out: &mut String,
) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: an undefined value is not JSON serializable",
            ))
        }
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number if value.is_integer() => out.push_str(&value.to_string()),
        ValueKind::Number => out.push_str(&py_float(f64::try_from(value.clone())?, true)),
        ValueKind::String => json_str(value.as_str().unwrap_or_default(), opts.ensure_ascii, out),
        ValueKind::Map => {
            let mut items: Vec<(String, Value)> = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                items.push((json_key(&key)?, item));
            }
            if opts.sort_keys {
                items.sort_by(|a, b| a.0.cmp(&b.0));
            }
            if items.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (k, v)) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.separators.0);
                }
                newline(opts, level + 1, out);
                json_str(k, opts.ensure_ascii, out);
                out.push_str(&opts.separators.1);
                write_json(v, opts, level + 1, out)?;
            }
            newline(opts, level, out);
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.separators.0);
                }
                newline(opts, level + 1, out);
                write_json(v, opts, level + 1, out)?;
            }
            newline(opts, level, out);
            out.push(']');
        }
        other => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: a value of type {other} is not JSON serializable"),
            ))
        }
    }
    Ok(())
}

/// Python's `str.isprintable()` for one character: false for control, format, separator (other
/// than the space), private-use and noncharacter code points. Unassigned code points, which
/// Python also escapes, are not known here and print as themselves.
fn py_printable(c: char) -> bool {
    let cp = c as u32;
    !(cp < 0x20
        || (0x7f..=0xa0).contains(&cp)
        || cp == 0xad
        || (0x600..=0x605).contains(&cp)
        || matches!(
            cp,
            0x61c | 0x6dd | 0x70f | 0x890 | 0x891 | 0x8e2 | 0x1680 | 0x180e | 0x3000
        )
        || (0x2000..=0x200f).contains(&cp)
        || (0x2028..=0x202f).contains(&cp)
        || (0x205f..=0x206f).contains(&cp)
        || (0xe000..=0xf8ff).contains(&cp)
        || matches!(cp, 0xfeff | 0xfff9..=0xfffb)
        || matches!(cp, 0x110bd | 0x110cd | 0x13430..=0x1343f | 0x1bca0..=0x1bca3)
        || matches!(cp, 0x1d173..=0x1d17a | 0xe0001 | 0xe0020..=0xe007f)
        || cp >= 0xf0000
        || (cp & 0xfffe) == 0xfffe)
}

/// Python's `repr(str)`: single quotes unless the text has a single quote and no double quote.
fn py_repr_str(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !py_printable(c) => {
                let cp = c as u32;
                if cp < 0x100 {
                    out.push_str(&format!("\\x{cp:02x}"));
                } else if cp < 0x10000 {
                    out.push_str(&format!("\\u{cp:04x}"));
                } else {
                    out.push_str(&format!("\\U{cp:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Python's `str(value)` for what Jinja2 prints: `None`, `True`/`False`, float `repr`, and
/// `repr` of lists and dicts.
pub(crate) fn py_str(value: &Value, out: &mut String) -> Result<(), Error> {
    match value.kind() {
        ValueKind::String => out.push_str(value.as_str().unwrap_or_default()),
        _ => py_repr(value, out)?,
    }
    Ok(())
}

fn py_repr(value: &Value, out: &mut String) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number if value.is_integer() => out.push_str(&value.to_string()),
        ValueKind::Number => out.push_str(&py_float(f64::try_from(value.clone())?, false)),
        ValueKind::String => py_repr_str(value.as_str().unwrap_or_default(), out),
        ValueKind::Seq => {
            out.push('[');
            for (i, v) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(&v, out)?;
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, k) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let v = value.get_item(&k)?;
                py_repr(&k, out)?;
                out.push_str(": ");
                py_repr(&v, out)?;
            }
            out.push('}');
        }
        _ => out.push_str(&value.to_string()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_like_python() {
        assert_eq!(py_float(1.0, true), "1.0");
        assert_eq!(py_float(0.1, true), "0.1");
        assert_eq!(py_float(1e-5, true), "1e-05");
        assert_eq!(py_float(1.5e16, true), "1.5e+16");
        assert_eq!(py_float(1e16, true), "1e+16");
        assert_eq!(py_float(123456789.0, true), "123456789.0");
        assert_eq!(py_float(-0.0, true), "-0.0");
        assert_eq!(py_float(0.0001, true), "0.0001");
        assert_eq!(py_float(f64::NAN, true), "NaN");
    }

    #[test]
    fn json_like_python() {
        let v = Value::from_serialize(
            serde_json::json!({"b": [1, 2.5, "é\n\"x\""], "a": null, "c": {}}),
        );
        let compact = to_json(&v, &JsonOptions::new(false, None, None, false)).unwrap_or_default();
        // Key order follows the map (insertion order with preserve_order, else sorted).
        assert!(
            compact.contains(r#""b": [1, 2.5, "é\n\"x\""]"#),
            "{compact}"
        );
        let ascii = to_json(
            &Value::from("é😀"),
            &JsonOptions::new(true, None, None, false),
        )
        .unwrap_or_default();
        assert_eq!(ascii, r#""\u00e9\ud83d\ude00""#);
        let indented = to_json(
            &Value::from_serialize(serde_json::json!([1, [], {"k": true}])),
            &JsonOptions::new(false, Some("  ".into()), None, false),
        )
        .unwrap_or_default();
        assert_eq!(indented, "[\n  1,\n  [],\n  {\n    \"k\": true\n  }\n]");
    }

    #[test]
    fn str_like_python() {
        let mut s = String::new();
        py_str(
            &Value::from_serialize(serde_json::json!(["a", 1, null, true, "it's"])),
            &mut s,
        )
        .unwrap_or_default();
        assert_eq!(s, r#"['a', 1, None, True, "it's"]"#);
    }
}
