//! Speculative decoding and context shift through the `oxinfer` binary, on the real SmolLM2:
//! `run --lookup` prints the plain greedy tokens (with the default kernels and the scalar ones:
//! a row's logits do not depend on how many rows run together), and `chat` drops its oldest turns when the context fills (or
//! stops with an error under `--no-context-shift`).

mod cli_process;
#[path = "../../oxinfer/tests/common/mod.rs"]
mod common;

use cli_process::{oxinfer_env, stderr, stdout};
use common::real_model;

const EDIT_PROMPT: &str = "Repeat this code exactly, but rename add to plus:\n\
fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\nfn main() {\n    println!(\"{}\", add(2, 3));\n}\n";

#[test]
fn run_with_lookup_prints_the_plain_greedy_tokens() {
    let Some(model) = real_model("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let m = model.to_str().unwrap();
    let run = |extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec![
            "run",
            "-m",
            m,
            "-p",
            EDIT_PROMPT,
            "--temp",
            "0",
            "-n",
            "48",
            "--show-tokens",
        ];
        args.extend_from_slice(extra);
        let o = oxinfer_env(&args, env);
        assert!(o.status.success(), "{}", stderr(&o));
        o
    };
    for env in [&[][..], &[("OXINFER_KERNELS", "scalar")][..]] {
        let plain = run(&[], env);
        let spec = run(&["--lookup", "8"], env);
        assert_eq!(
            stdout(&spec),
            stdout(&plain),
            "lookup vs plain greedy ({env:?})"
        );
        assert!(stderr(&spec).contains("accepted"), "{}", stderr(&spec));
    }
}

/// `run --draft DIR` with a Gemma 4 drafter folder (`gemma4_assistant`) drafts from the Gemma 4
/// model's own state: the plain greedy tokens, and the acceptance on the stats line (the
/// fixture's drafter accepts 21 of 33, as in crates/oxinfer/tests/gemma4_assistant_tiny.rs);
/// a drafter for a model that is not Gemma 4 is an error saying so.
#[test]
fn run_with_a_gemma4_drafter_prints_the_plain_greedy_tokens() {
    let fixtures = common::fixtures();
    let target = fixtures.join("gemma4-tiny-dense");
    let drafter = fixtures.join("gemma4-assistant-tiny");
    let run = |model: &std::path::Path, extra: &[&str]| {
        let mut args = vec![
            "run",
            "-m",
            model.to_str().unwrap(),
            "--tokens",
            "2,220,102,149,189,197,8,32,105,70,155,188",
            "--temp",
            "0",
            "-n",
            "32",
            "--show-tokens",
        ];
        args.extend_from_slice(extra);
        oxinfer_env(&args, &[])
    };
    let plain = run(&target, &[]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let d = drafter.to_str().unwrap();
    let spec = run(&target, &["--draft", d, "--draft-max", "4"]);
    assert!(spec.status.success(), "{}", stderr(&spec));
    assert_eq!(stdout(&spec), stdout(&plain));
    assert!(
        stderr(&spec).contains("draft 21 of 33 accepted"),
        "{}",
        stderr(&spec)
    );
    let other = run(&fixtures.join("llama-tiny-a"), &["--draft", d]);
    assert!(!other.status.success());
    assert!(stderr(&other).contains("not Gemma 4"), "{}", stderr(&other));
}

/// Pipes `turns` into `oxinfer chat` with a small context; returns (stdout, stderr).
fn chat(model: &str, turns: &str, extra: &[&str]) -> (String, String) {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_oxinfer"))
        .args(["chat", "-m", model, "--temp", "0", "-n", "24", "-c", "160"])
        .args(extra)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(turns.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    (stdout(&o), stderr(&o))
}

#[test]
fn chat_shifts_its_context_or_says_it_is_full() {
    let Some(model) = real_model("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let m = model.to_str().unwrap();
    let turns = "Name a color.\nName an animal.\nName a country.\nName a fruit.\nName a city.\n";
    let (out, err) = chat(m, turns, &[]);
    assert!(err.contains("context shift: dropped"), "{err}");
    assert!(out.lines().filter(|l| !l.is_empty()).count() >= 5, "{out}");
    assert!(!err.contains("error"), "{err}");
    let (_, err) = chat(m, turns, &["--no-context-shift"]);
    assert!(err.contains("outgrew the context"), "{err}");
}
