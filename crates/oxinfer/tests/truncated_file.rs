//! A weight file truncated while the model is loaded (issue 24 item 8): the next prompt is
//! refused with an error naming the file instead of the process dying of SIGBUS. The loading
//! and truncating run in a child process (this test binary run again), so that a crash is
//! reported as a failure rather than taking the test harness down.

mod common;

use std::process::Command;

use common::{fixtures, scratch_dir};
use oxinfer::{GenerateOptions, Model};

const CHILD: &str = "OXINFER_TRUNCATION_CHILD";

/// Loads a copy of a fixture, truncates it, and prints what tokenizing and generating return.
fn child() {
    let dir = scratch_dir("truncated");
    let path = dir.join("model.gguf");
    std::fs::copy(fixtures().join("qwen2-tiny/model.gguf"), &path).expect("copy");
    let model = Model::load(&path).expect("load");
    let ids = model
        .tokenize("hello world", false)
        .expect("tokenize before truncation");
    let len = std::fs::metadata(&path).expect("stat").len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open");
    file.set_len(len / 2).expect("truncate");
    match model.tokenize("hello world", false) {
        Ok(_) => println!("TOKENIZE OK"),
        Err(e) => println!("TOKENIZE ERR {e}"),
    }
    let opts = GenerateOptions {
        max_tokens: 4,
        ..GenerateOptions::default()
    };
    match model.session(Some(64)).generate(&ids, &opts, |_| true) {
        Ok(_) => println!("GENERATE OK"),
        Err(e) => println!("GENERATE ERR {e}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn truncated_model_file_is_refused() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new(exe)
        .args(["--exact", "truncated_model_file_is_refused", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .expect("run child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the child died ({:?}; SIGBUS is signal 7):\n{stdout}\n{stderr}",
        out.status
    );
    for what in ["TOKENIZE", "GENERATE"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(what))
            .unwrap_or_else(|| panic!("no {what} line:\n{stdout}\n{stderr}"));
        assert!(
            line.contains("model.gguf") && line.contains("shrank from"),
            "{what}: expected a clear error naming the file, got {line:?}"
        );
    }
}
