//! Schemas built to make compilation blow up (multiplying `allOf` over `anyOf`, `$ref` with
//! siblings, all-pairs `oneOf`, huge enums, expensive patterns) stop at the compilation
//! budget with an error naming the keyword; formats and ordinary schemas stay far inside it.

use super::budget::CompileLimits;
use super::*;
use serde_json::{json, Value};
use std::time::Duration;

fn refused(schema: &Value, limits: CompileLimits) -> String {
    Grammar::from_schema_with(schema, limits)
        .expect_err("the schema should exceed the budget")
        .to_string()
}

fn assert_budget(e: &str, keyword: &str) {
    assert!(
        e.contains("compilation budget") && e.contains(&format!("'{keyword}'")),
        "expected a budget error naming '{keyword}': {e}"
    );
}

/// `allOf` of 8 members, each an `anyOf` of 16 compatible alternatives: 16^8 merges.
fn all_of_any_of() -> Value {
    all_of_any_of_members(8)
}

#[test]
fn all_of_over_any_of_stops_at_the_budget() {
    assert_budget(
        &refused(&all_of_any_of(), CompileLimits::default()),
        "allOf",
    );
    // The clock alone stops it too.
    let clock = CompileLimits {
        work: u64::MAX,
        time: Duration::from_millis(50),
    };
    assert_budget(&refused(&all_of_any_of(), clock), "allOf");
}

#[test]
fn ref_with_siblings_chains_stop_at_the_budget() {
    // D_k = allOf[D_{k+1}, D_{k+1}] with a sibling: inlining doubles per level (2^40).
    let mut defs = serde_json::Map::new();
    for k in 0..40 {
        let next = format!("#/$defs/D{}", k + 1);
        defs.insert(
            format!("D{k}"),
            json!({"allOf": [{"$ref": next}, {"$ref": next}], "minLength": 1}),
        );
    }
    defs.insert("D40".into(), json!({"type": "string"}));
    let schema = json!({"$defs": defs, "$ref": "#/$defs/D0", "maxLength": 9});
    let e = refused(&schema, CompileLimits::default());
    assert!(e.contains("compilation budget"), "{e}");
}

#[test]
fn all_pairs_one_of_stops_at_the_budget() {
    let alts: Vec<Value> = (0..6000)
        .map(|i| json!({"type": "object", "properties": {"k": {"const": i}}, "required": ["k"]}))
        .collect();
    assert_budget(
        &refused(&json!({"oneOf": alts}), CompileLimits::default()),
        "oneOf",
    );
}

#[test]
fn enums_are_capped_and_their_checks_charged() {
    let huge: Vec<Value> = (0..60_000).map(|i| json!(i)).collect();
    let e = Grammar::from_schema(&json!({"enum": huge}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("'enum' has 60000 values"), "{e}");
    // The largest allowed enum keeps every value (no truncated index).
    let max: Vec<Value> = (0..MAX_ENUM_VALUES).map(|i| json!(i)).collect();
    let g = Arc::new(Grammar::from_schema(&json!({"enum": max})).unwrap());
    let mut m = JsonMatcher::new(g);
    assert!(m.push_bytes(format!("{}", MAX_ENUM_VALUES - 1).as_bytes()) && m.is_complete());
    // Each value checked against its sibling keywords is charged.
    let words: Vec<Value> = (0..1000).map(|i| json!(format!("w{i:0>200}"))).collect();
    let small = CompileLimits {
        work: 100_000,
        time: Duration::from_secs(60),
    };
    let schema = json!({"enum": words, "type": "string", "maxLength": 300});
    assert_budget(&refused(&schema, small), "enum");
    assert!(Grammar::from_schema(&schema).is_ok());
}

#[test]
fn patterns_are_charged_and_formats_fit_well_inside_the_budget() {
    let quarter = CompileLimits {
        work: DEFAULT_WORK / 4,
        time: Duration::from_secs(60),
    };
    for f in [
        "date",
        "time",
        "date-time",
        "email",
        "uuid",
        "ipv4",
        "hostname",
        "uri",
    ] {
        let s = json!({"type": "string", "format": f});
        Grammar::from_schema_with(&s, quarter).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    let small = CompileLimits {
        work: 300,
        time: Duration::from_secs(60),
    };
    let s = json!({"type": "object", "properties": {
        "p": {"type": "string", "pattern": "^[a-f]{3}[0-9]{5}(x|y|z){4}$"}}});
    assert_budget(&refused(&s, small), "pattern");
}

#[test]
fn hostile_pattern_in_a_schema_is_an_error_on_a_worker_sized_stack() {
    let deep = "(".repeat(200_000) + &")".repeat(200_000);
    let schema = json!({"type": "string", "pattern": deep});
    let e = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || Grammar::from_schema(&schema).unwrap_err().to_string())
        .unwrap()
        .join()
        .unwrap();
    assert!(e.contains("pattern") && e.contains("more than"), "{e}");
}

#[test]
fn left_recursive_any_of_is_refused_instead_of_recursing_forever() {
    let schema = json!({"$defs": {"A": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "null"}]}},
                        "$ref": "#/$defs/A"});
    let e = Grammar::from_schema(&schema).unwrap_err().to_string();
    assert!(e.contains("left recursion"), "{e}");
    // Recursion through an array consumes input and stays allowed.
    let ok = json!({"$defs": {"A": {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/A"}},
                                              {"type": "null"}]}},
                    "$ref": "#/$defs/A"});
    assert!(Grammar::from_schema(&ok).is_ok());
}

#[test]
fn alternatives_tried_at_once_are_capped() {
    // 16 x 16 alternatives after allOf distribution: at the cap; a third member exceeds it,
    // and so do 16 x 16 untyped ones (each an anyOf of the 6 JSON types).
    let two = all_of_any_of_members(2);
    assert!(Grammar::from_schema(&two).is_ok());
    let e = Grammar::from_schema(&all_of_any_of_members(3))
        .unwrap_err()
        .to_string();
    assert!(e.contains("more than 256 alternatives"), "{e}");
    let untyped = json!({"allOf": [
        {"anyOf": (0..16).map(|i| json!({"minimum": i})).collect::<Vec<_>>()},
        {"anyOf": (0..16).map(|i| json!({"maximum": 100 + i})).collect::<Vec<_>>()}]});
    let e = Grammar::from_schema(&untyped).unwrap_err().to_string();
    assert!(e.contains("more than 256 alternatives"), "{e}");
}

/// `allOf` of `members` anyOfs of 16 compatible integer alternatives.
fn all_of_any_of_members(members: usize) -> Value {
    let member = |m: usize| {
        let alts: Vec<Value> = (0..16)
            .map(|i| json!({"type": "integer", "minimum": m * 16 + i}))
            .collect();
        json!({"anyOf": alts})
    };
    json!({"allOf": (0..members).map(member).collect::<Vec<_>>()})
}

#[test]
fn long_literal_runs_cost_work_in_proportion_to_their_states() {
    // A run of 848 characters after the implicit `.*`: the DFA's states hold up to 848 NFA
    // states each. A pass over the whole set per alphabet class and a sorted closure per class
    // cost ~10 M units (1.8 s under the fuzzer's sanitizer); one pass per state, one closure
    // per distinct target set and closures read off a bitset need ~5 M (0.45 s there).
    let p = "\\-{848}65{342~5\u{fffd}%\u{fffd}\u{4}";
    let limits = CompileLimits {
        work: 6_000_000,
        time: Duration::from_secs(60),
    };
    let s = json!({"type": "string", "pattern": p});
    Grammar::from_schema_with(&s, limits).unwrap_or_else(|e| panic!("{e}"));
}
