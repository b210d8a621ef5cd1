//! Schema keywords by role: the ones refused, the `format`s enforced as patterns, and the
//! ones that name where a node is compiled (for budget errors).

/// Keywords that name where a node is compiled (the last one in its path is charged).
const PATH_KEYWORDS: &[&str] = &[
    "properties",
    "additionalProperties",
    "patternProperties",
    "items",
    "prefixItems",
    "additionalItems",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
];

/// The keyword a node at `path` is compiled for (`$ref` for an inlined target).
pub fn path_keyword(path: &str) -> &'static str {
    path.rsplit('/')
        .find_map(|part| {
            if part.starts_with("$ref(") {
                return Some("$ref");
            }
            PATH_KEYWORDS.iter().copied().find(|k| *k == part)
        })
        .unwrap_or("schema")
}

/// Validation keywords that are not enforced: refused so output always validates.
pub const REFUSED: &[&str] = &[
    "if",
    "then",
    "else",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedProperties",
    "unevaluatedItems",
    "minProperties",
    "maxProperties",
    "$dynamicRef",
    "$recursiveRef",
];

/// `format`s enforced, as patterns (stricter than the formats: e.g. days 29-31 only in months
/// that always have them, no leap day).
pub fn format_pattern(f: &str) -> Option<String> {
    const DATE: &str = "[1-9][0-9]{3}-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)";
    const TIME: &str =
        "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
    const OCTET: &str = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
    const LABEL: &str = "[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?";
    Some(match f {
        "date" => format!("^{DATE}$"),
        "time" => format!("^{TIME}$"),
        "date-time" => format!("^{DATE}T{TIME}$"),
        "email" => "^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(\\.[a-zA-Z0-9-]+)*\\.[a-zA-Z]{2,}$".into(),
        "uuid" => "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$".into(),
        "ipv4" => format!("^({OCTET}\\.){{3}}{OCTET}$"),
        // RFC 1123 labels (a length cap of 253 is added where the pattern is used).
        "hostname" => format!("^{LABEL}(\\.{LABEL})*$"),
        // http(s) URLs of unreserved characters: a strict subset of RFC 3986 URIs.
        "uri" => format!(
            "^https?://{LABEL}(\\.{LABEL})*(:[0-9]{{1,5}})?(/[a-zA-Z0-9._~-]*)*\
             (\\?[a-zA-Z0-9._~=&-]*)?(#[a-zA-Z0-9._~-]*)?$"
        ),
        _ => return None,
    })
}
