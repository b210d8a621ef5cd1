//! What a new user meets in the first hour (issue 17): the model named the same way in every
//! command, base models, familiar llama.cpp flags, quiet but informative messages, and the
//! README's usage block agreeing with `--help`. Terminal behaviour (line editing, Ctrl-C, the
//! stdin hint) is driven through tmux in [`terminal`].

mod readme;
mod terminal;

use crate::cli_process::{
    assert_exits_with, assert_fails_with, oxinfer, oxinfer_env, stderr, stdout,
};
use crate::common::{fixtures, ids, scratch_dir};
use std::path::{Path, PathBuf};

/// The tiny GGUF with a tokenizer and no chat template: a stand-in for a base model.
fn tiny_base() -> String {
    fixtures()
        .join("llama-tiny-b/model.gguf")
        .to_string_lossy()
        .into_owned()
}

/// The tiny safetensors folder (no tokenizer) and a prompt of ids with its greedy reply.
fn tiny_ids() -> (String, String, Vec<u32>) {
    let r = crate::common::reference(&fixtures().join("llama-tiny-a"));
    let p = &r["prompts"][0];
    let prompt: Vec<String> = ids(&p["ids"]).iter().map(|i| i.to_string()).collect();
    (
        fixtures()
            .join("llama-tiny-a")
            .to_string_lossy()
            .into_owned(),
        prompt.join(","),
        ids(&p["greedy_ids"]),
    )
}

/// A cache folder whose `models` holds a link to `model` (so the default model resolves
/// without a download).
fn cache_with(tag: &str, model: &Path) -> PathBuf {
    let cache = scratch_dir(tag);
    std::fs::create_dir_all(cache.join("models")).unwrap();
    let link = cache.join("models").join(model.file_name().unwrap());
    #[cfg(unix)]
    std::os::unix::fs::symlink(model, &link).unwrap();
    #[cfg(not(unix))]
    std::fs::copy(model, &link).unwrap();
    cache
}

#[test]
fn run_takes_the_model_as_its_first_word_as_ollama_does() {
    let (dir, prompt, want) = tiny_ids();
    let o = oxinfer(&[
        "run",
        &dir,
        "--tokens",
        &prompt,
        "--temp",
        "0",
        "-n",
        "3",
        "--show-tokens",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got: Vec<u32> = stdout(&o)
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    assert_eq!(got, want[..3]);
    // -m and a positional model at once, or words beside -p, are refused clearly.
    let o = oxinfer(&["run", "-m", &dir, "--tokens", &prompt, "other"]);
    assert_fails_with(&o, &["given twice"]);
    let o = oxinfer(&["run", &dir, "-p", "hi", "there"]);
    assert_fails_with(&o, &["only the model may be positional"]);
    // A near miss of a model name is not sent to the default model as a prompt.
    let o = oxinfer(&["run", "gemma3-270n"]);
    assert_fails_with(&o, &["did you mean gemma3-270m"]);
}

#[test]
fn info_takes_m_a_positional_model_or_none() {
    let path = tiny_base();
    for args in [vec!["info", "-m", &path], vec!["info", &path]] {
        let o = oxinfer(&args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        assert!(
            stdout(&o).contains("container:       gguf"),
            "{}",
            stdout(&o)
        );
    }
    let o = oxinfer(&["info", "-m", &path, &path]);
    assert_fails_with(&o, &["named twice"]);
    // No model: the default one, as for run (here from a cache that already holds it).
    let Some(model) = crate::smollm2() else {
        return;
    };
    let cache = cache_with("info-default", &model);
    let o = oxinfer_env(&["info"], &[("OXINFER_CACHE", cache.to_str().unwrap())]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("SmolLM2-135M-Instruct.Q4_1.gguf"));
    assert!(stdout(&o).contains("chat template:   yes"));
}

#[test]
fn a_base_model_completes_raw_text_in_run_and_is_refused_by_chat() {
    let path = tiny_base();
    let greedy = [
        "run",
        "-m",
        &path,
        "-p",
        "hello world",
        "--temp",
        "0",
        "-n",
        "4",
    ];
    let o = oxinfer(&greedy);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("no chat template") && err.contains("raw text"),
        "one-line notice: {err}"
    );
    // The same as --raw, which prints no notice.
    let raw = oxinfer(&[&greedy[..], &["--raw"]].concat());
    assert_eq!(stdout(&raw), stdout(&o));
    assert!(!stderr(&raw).contains("no chat template"));

    let o = oxinfer(&["chat", "-m", &path]);
    assert_fails_with(&o, &["base model", "cannot chat", "oxinfer run"]);
    // A built-in base model is refused before anything is downloaded.
    let cache = scratch_dir("chat-base");
    let o = oxinfer_env(
        &["chat", "gemma3-270m"],
        &[("OXINFER_CACHE", cache.to_str().unwrap())],
    );
    assert_fails_with(&o, &["gemma3-270m", "cannot chat", "smollm2-135m-instruct"]);
    assert!(!cache.join("models").exists(), "nothing fetched");
}

#[test]
fn llama_cpp_flags_are_accepted_or_refused_with_a_hint() {
    let (dir, prompt, want) = tiny_ids();
    let o = oxinfer(&[
        "run",
        "-m",
        &dir,
        "--tokens",
        &prompt,
        "--temperature",
        "0",
        "--n-predict",
        "2",
        "--ctx-size",
        "64",
        "-ngl",
        "0",
        "--show-tokens",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).split_whitespace().count(), 2, "{}", stdout(&o));
    assert_eq!(
        stdout(&o).split_whitespace().next().unwrap(),
        want[0].to_string()
    );
    // -ngl 99 asks for the GPU: the device line says which device runs, and why not a GPU.
    let o = oxinfer(&[
        "run", "-m", &dir, "--tokens", &prompt, "-n", "1", "-ngl", "99",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("device: "), "{}", stderr(&o));
    // Flags oxinfer lacks: exit 2 and what to do instead, not a misparse.
    let o = oxinfer(&["run", "-m", &dir, "-fa", "-p", "x"]);
    assert_exits_with(&o, 2, &["-fa", "llama.cpp flag", "flash attention"]);
    let o = oxinfer(&["run", "--ngl"]);
    assert_exits_with(&o, 2, &["--n-gpu-layers"]);
    let o = oxinfer(&[
        "run", "-m", &dir, "--device", "cpu", "-ngl", "1", "--tokens", "1",
    ]);
    assert_exits_with(&o, 2, &["--device"]);
}

#[test]
fn messages_say_what_matters_and_nothing_alarming() {
    let (dir, prompt, want) = tiny_ids();
    assert!(
        want.len() > 2,
        "the reference reply is longer than the limit"
    );
    let o = oxinfer(&[
        "run", "-m", &dir, "--tokens", &prompt, "--temp", "0", "-n", "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    // The CPU is no error: no device line unless asked (a GPU that runs is still named).
    assert!(!err.contains("device: cpu"), "{err}");
    assert!(
        err.contains("cut at 2 tokens"),
        "the --max-tokens note: {err}"
    );
    assert!(
        !err.contains("reading the prompt"),
        "no hint when stdin is no terminal"
    );
    let o = oxinfer(&[
        "run",
        "-m",
        &dir,
        "--tokens",
        &prompt,
        "-n",
        "1",
        "--verbose",
    ]);
    assert!(stderr(&o).contains("device: "), "{}", stderr(&o));
}

/// A fake `pip` (first on PATH) that records how it was called and fails.
fn fake_pip(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join("pip.log");
    let script = format!(
        "#!/bin/sh\n[ \"$1\" = --version ] && exit 0\necho \"cwd=$(pwd) args=$*\" > '{}'\n\
         echo 'fake pip: no index' >&2\nexit 1\n",
        log.display()
    );
    let pip = bin.join("pip");
    std::fs::write(&pip, script).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pip, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    log
}

#[cfg(unix)]
#[test]
fn a_fetch_says_what_it_downloads_and_why_it_falls_back_to_pip() {
    let dir = scratch_dir("fetch-notes");
    let log = fake_pip(&dir);
    let path = format!(
        "{}:{}",
        dir.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let cache = dir.join("cache");
    // A proxy that refuses connections makes the hub unreachable at once.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_oxinfer"))
        .args(["info", "smollm2-135m-instruct"])
        .env("OXINFER_CACHE", &cache)
        .env("PATH", path)
        .env("ALL_PROXY", "http://127.0.0.1:9")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("fetching smollm2-135m-instruct (") && err.contains("94 MiB"),
        "what and how large, before the download: {err}"
    );
    assert!(
        err.contains("hub download failed") && err.contains("trying pip"),
        "{err}"
    );
    // pip runs inside its temporary folder and saves to `.`: no temporary path in its output.
    let call = std::fs::read_to_string(&log).unwrap();
    assert!(call.contains("-d . "), "{call}");
    assert!(call.contains("/.pip."), "{call}");
}
