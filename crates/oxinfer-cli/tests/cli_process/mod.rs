//! The `oxinfer` binary run as a process by the CLI's integration tests, with its own model
//! cache (`OXINFER_CACHE` in the temp dir) so that nothing is fetched into the user's.
#![allow(dead_code)]

use std::process::{Command, Output};

/// Runs `oxinfer ARGS` to completion.
pub fn oxinfer(args: &[&str]) -> Output {
    oxinfer_env(args, &[])
}

/// Runs `oxinfer ARGS` with the extra environment variables `env`.
pub fn oxinfer_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oxinfer"))
        .args(args)
        .envs(env.iter().copied())
        .env(
            "OXINFER_CACHE",
            std::env::temp_dir().join("oxinfer-cli-test-cache"),
        )
        .output()
        .expect("run oxinfer")
}

/// The process's stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The process's stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts success and returns (stdout, stderr).
pub fn ok(o: Output) -> (String, String) {
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(o.status.success(), "failed: {err}");
    (out, err)
}

/// Asserts a clean failure of the command itself: exit status 1, no panic, an `error:` line
/// containing every needle.
pub fn assert_fails_with(o: &Output, needles: &[&str]) {
    assert_exits_with(o, 1, needles);
}

/// Asserts a clean failure with exit status `code` (1: the command failed; 2: clap refused the
/// arguments), no panic, and an `error:` line containing every needle.
pub fn assert_exits_with(o: &Output, code: i32, needles: &[&str]) {
    let err = stderr(o);
    assert!(
        !o.status.success(),
        "expected failure, got success; stderr: {err}"
    );
    assert_eq!(o.status.code(), Some(code), "exit code; stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("no error line: {err}"));
    for n in needles {
        assert!(line.contains(n), "error line lacks {n:?}: {line}");
    }
}
