//! The `pattern` compiler: search semantics, supported and refused constructs, distances,
//! and the limits that keep hostile patterns cheap (length, nesting, multiple repeats, budget,
//! stack depth).

use super::budget::{Budget, CompileLimits};
use super::regex::{Dfa, DEAD, MAX_GROUP_DEPTH, UNBOUNDED};

fn compile(pattern: &str) -> Result<Dfa, String> {
    Dfa::compile(pattern, &Budget::new(CompileLimits::default()), "pattern")
}

/// Runs `f` on a thread with `stack` bytes of stack (tokio's workers have 2 MiB).
fn on_stack<T: Send + 'static>(stack: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(stack)
        .spawn(f)
        .expect("spawning a test thread")
        .join()
        .expect("the test thread panicked")
}

fn matches(d: &Dfa, s: &str) -> bool {
    let mut st = d.start();
    for c in s.chars() {
        st = d.step(st, c as u32);
        if st == DEAD {
            return false;
        }
    }
    d.accepts(st)
}

#[test]
fn search_semantics_and_constructs() {
    let cases: &[(&str, &[&str], &[&str])] = &[
        ("^[a-z]+$", &["abc", "z"], &["", "aB", "ab1"]),
        ("ab", &["ab", "xaby", "ab\n"], &["a", "b", "ba"]),
        ("^(?:cat|dog)s?$", &["cat", "dogs"], &["cats!", "do"]),
        (
            r"^\d{3}-\d{2,4}$",
            &["123-45", "123-4567"],
            &["12-45", "123-45678"],
        ),
        (r"^[^\d]*$", &["abc", ""], &["a1"]),
        (r"^a.c$", &["abc", "a c"], &["a\nc", "ac"]),
        (r"^\w+@\w+\.com$", &["a@b.com"], &["a@b.org"]),
        (r"^(a|b)*c{2,}$", &["cc", "abacc", "ccc"], &["c", "abc"]),
        (r"^[\u0041-\x43]$", &["A", "C"], &["D"]),
        (r"^x?$|^y$", &["", "x", "y"], &["xy"]),
    ];
    for (pat, yes, no) in cases {
        let d = compile(pat).unwrap_or_else(|e| panic!("{pat}: {e}"));
        for s in *yes {
            assert!(matches(&d, s), "{pat} should match {s:?}");
        }
        for s in *no {
            assert!(!matches(&d, s), "{pat} should not match {s:?}");
        }
    }
}

#[test]
fn distances() {
    let d = compile(r"^a{2,4}$").unwrap();
    assert_eq!(d.min_dist(d.start()), 2);
    assert_eq!(d.max_dist(d.start()), 4);
    let d = compile(r"^ab+$").unwrap();
    assert_eq!(d.min_dist(d.start()), 2);
    assert_eq!(d.max_dist(d.start()), UNBOUNDED);
}

#[test]
fn refuses_unsupported() {
    for (pat, what) in [
        (r"(a)\1", "backreference"),
        ("(?=a)", "lookahead"),
        (r"\bword", "word boundary"),
        ("(?i)a", "inline flags"),
        (r"\p{L}", "unicode property"),
        ("a++", "possessive"),
        ("(a", "unclosed"),
        ("^a$b", "matches no string"),
    ] {
        let e = compile(pat).unwrap_err();
        assert!(e.contains(what), "{pat}: {e}");
    }
}

#[test]
fn hostile_patterns_are_refused_on_a_worker_sized_stack() {
    let deep = "(".repeat(200_000) + &")".repeat(200_000);
    let stars = "a".to_string() + &"*".repeat(1_000_000);
    let nested = "(".repeat(2000) + &")".repeat(2000);
    let errors = on_stack(2 << 20, move || {
        [deep, stars, nested]
            .iter()
            .map(|p| compile(p).unwrap_err())
            .collect::<Vec<_>>()
    });
    assert!(errors[0].contains("characters, more than"), "{}", errors[0]);
    assert!(errors[1].contains("characters, more than"), "{}", errors[1]);
    assert!(errors[2].contains("nested more than"), "{}", errors[2]);
    // Messages quote a cut of the pattern, not all of it.
    assert!(errors.iter().all(|e| e.len() < 300), "{errors:?}");
    let ok = "(".repeat(MAX_GROUP_DEPTH) + "a" + &")".repeat(MAX_GROUP_DEPTH);
    assert!(compile(&ok).is_ok());
}

#[test]
fn stacked_quantifiers_are_multiple_repeats_and_lazy_ones_stay() {
    for pat in [
        "a**", "a{2}{3}", "a+*", "a?*", "a*??", "(ab)+{2}", "a{1,2}*",
    ] {
        let e = compile(pat).unwrap_err();
        assert!(e.contains("multiple repeat"), "{pat}: {e}");
    }
    for (pat, yes, no) in [
        ("^a*?b$", "aab", "ac"),
        ("^a{2}?$", "aa", "a"),
        ("^a??$", "", "aa"),
    ] {
        let d = compile(pat).unwrap_or_else(|e| panic!("{pat}: {e}"));
        assert!(matches(&d, yes) && !matches(&d, no), "{pat}");
    }
    // A brace that is not a repetition is a literal after a quantifier.
    assert!(matches(&compile("^a*{$").unwrap(), "aa{"));
}

#[test]
fn long_dfa_chains_need_no_deep_stack() {
    // 3000 states in a row: the longest-path search must not recurse per state.
    let d = on_stack(128 << 10, || compile("^(a{1000}){3}$").unwrap());
    assert_eq!(d.max_dist(d.start()), 3000);
    assert_eq!(d.min_dist(d.start()), 3000);
}

#[test]
fn dfa_construction_is_charged_to_the_budget() {
    let small = Budget::new(CompileLimits {
        work: 5_000,
        time: std::time::Duration::from_secs(60),
    });
    let e = Dfa::compile("^(a|b)*a(a|b){8}$", &small, "format").unwrap_err();
    assert!(e.contains("'format'") && e.contains("budget"), "{e}");
    assert_eq!(small.spent_in(), Some("format"));
    assert!(compile("^(a|b)*a(a|b){8}$").is_ok());
}
