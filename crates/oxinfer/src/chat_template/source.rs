//! Adapting a template's source to minijinja where Jinja2 (as transformers runs it) reads it
//! differently:
//! * transformers' `{% generation %}` ... `{% endgeneration %}` block (it only marks assistant
//!   text) becomes an always-true `if` block, keeping the tags' whitespace control;
//! * string literals are unescaped by Python's `unicode-escape` codec in Jinja2, which drops a
//!   backslash-newline, reads `\a`, `\v` and `\UXXXXXXXX`, and keeps `\/` as two characters;
//!   these are rewritten to what minijinja reads the same way.

/// Where the scanner is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Text,
    /// Inside `{{ ... }}` (`b'}'`) or `{% ... %}` (`b'%'`), with the depth of `{` brackets
    /// (dict literals) opened inside.
    Tag(u8, u32),
    /// Inside a string literal of a tag, with its quote and the tag's state to return to.
    Str(char, u8, u32),
    Comment,
    /// Inside `{% raw %}` ... `{% endraw %}`.
    Raw,
}

/// The words of a block tag (`{%- generation -%}` gives `generation`), with its whitespace-control
/// markers.
fn tag_parts(tag: &str) -> (&str, &str, &str) {
    let body = &tag[2..tag.len() - 2];
    let lead = if body.starts_with(['-', '+']) {
        &body[..1]
    } else {
        ""
    };
    let trail = if body.len() > lead.len() && body.ends_with(['-', '+']) {
        &body[body.len() - 1..]
    } else {
        ""
    };
    (
        lead,
        body[lead.len()..body.len() - trail.len()].trim(),
        trail,
    )
}

/// The source minijinja should compile for a transformers chat template.
pub(crate) fn adapt(source: &str) -> String {
    let mut out = String::with_capacity(source.len() + 16);
    let mut state = State::Text;
    let mut tag_start = 0usize;
    let mut i = 0usize;
    let bytes = source.as_bytes();
    while i < source.len() {
        let rest = &source[i..];
        match state {
            State::Text => {
                if rest.starts_with("{#") {
                    state = State::Comment;
                    out.push_str("{#");
                    i += 2;
                    continue;
                }
                if rest.starts_with("{{") || rest.starts_with("{%") {
                    state = State::Tag(if bytes[i + 1] == b'{' { b'}' } else { b'%' }, 0);
                    tag_start = out.len();
                    out.push_str(&rest[..2]);
                    i += 2;
                    continue;
                }
            }
            State::Comment => {
                if rest.starts_with("#}") {
                    state = State::Text;
                    out.push_str("#}");
                    i += 2;
                    continue;
                }
            }
            State::Raw => {
                if rest.starts_with("{%") {
                    if let Some(end) = rest.find("%}") {
                        let tag = &rest[..end + 2];
                        if tag_parts(tag).1 == "endraw" {
                            out.push_str(tag);
                            i += tag.len();
                            state = State::Text;
                            continue;
                        }
                    }
                }
            }
            State::Tag(close, depth) => {
                let c = rest.chars().next().unwrap_or(' ');
                if c == '\'' || c == '"' {
                    state = State::Str(c, close, depth);
                } else if c == '{' {
                    state = State::Tag(close, depth + 1);
                } else if c == '}' && depth > 0 {
                    state = State::Tag(close, depth - 1);
                } else if rest.len() >= 2 && bytes[i] == close && bytes[i + 1] == b'}' {
                    out.push_str(&rest[..2]);
                    i += 2;
                    state = State::Text;
                    if close == b'%' {
                        let tag = out[tag_start..].to_string();
                        let (lead, words, trail) = tag_parts(&tag);
                        let replacement = match words {
                            "generation" => Some("if true"),
                            "endgeneration" => Some("endif"),
                            "raw" => {
                                state = State::Raw;
                                None
                            }
                            _ => None,
                        };
                        if let Some(word) = replacement {
                            out.truncate(tag_start);
                            out.push_str(&format!("{{%{lead} {word} {trail}%}}"));
                        }
                    }
                    continue;
                }
            }
            State::Str(quote, close, depth) => {
                let c = rest.chars().next().unwrap_or(' ');
                if c == quote {
                    state = State::Tag(close, depth);
                } else if c == '\\' {
                    let mut chars = rest.chars();
                    chars.next();
                    match chars.next() {
                        Some('\n') => {
                            i += 2;
                            continue;
                        }
                        Some('\r') => {
                            i += if rest[2..].starts_with('\n') { 3 } else { 2 };
                            continue;
                        }
                        Some('/') => {
                            out.push_str("\\\\/");
                            i += 2;
                            continue;
                        }
                        Some('a') => {
                            out.push_str("\\x07");
                            i += 2;
                            continue;
                        }
                        Some('v') => {
                            out.push_str("\\x0b");
                            i += 2;
                            continue;
                        }
                        Some('U') => {
                            let hex = rest.get(2..10).unwrap_or("");
                            if let Some(ch) =
                                u32::from_str_radix(hex, 16).ok().and_then(char::from_u32)
                            {
                                out.push(ch);
                                i += 10;
                                continue;
                            }
                        }
                        Some(other) => {
                            // Any other escape: copy both characters (so an escaped quote does not
                            // end the literal).
                            out.push('\\');
                            out.push(other);
                            i += 1 + other.len_utf8();
                            continue;
                        }
                        None => {}
                    }
                }
            }
        }
        let c = rest.chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8().max(1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_tags_become_if_blocks() {
        assert_eq!(
            adapt("a{%- generation -%}b{% endgeneration %}c{{ x }}"),
            "a{%- if true -%}b{% endif %}c{{ x }}"
        );
        assert_eq!(adapt("{% if x %}y{% endif %}"), "{% if x %}y{% endif %}");
    }

    #[test]
    fn python_string_escapes() {
        assert_eq!(adapt("{{ 'a\\\nb' }}"), "{{ 'ab' }}");
        assert_eq!(
            adapt("{{ \"x\\/\\a\\U0001F600\\\"}}\" }}"),
            "{{ \"x\\\\/\\x07😀\\\"}}\" }}"
        );
        // Outside tags and inside comments and raw blocks, text is left alone.
        let text = "a\\\nb {# '\\\n' #}{% raw %}{{ 'x\\\n' }}{% endraw %}";
        assert_eq!(
            adapt("{{ {'a': {'b': 'c\\\n'}} }}"),
            "{{ {'a': {'b': 'c'}} }}"
        );
        assert_eq!(adapt(text), text);
    }
}
