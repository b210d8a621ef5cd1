//! The `oxinfer` binary as a process: generation on tiny fixtures (ids, --dump-logits against
//! transformers), `info`, and bad input (corrupt files, unsupported architectures, missing
//! tokenizer, unreadable paths) giving one clear error line and a non-zero exit, never a panic.

mod cli_process;
#[path = "../../oxinfer/tests/common/mod.rs"]
mod common;
mod first_hour;

use std::path::PathBuf;

use cli_process::{assert_fails_with, oxinfer, oxinfer_env, stderr, stdout};
use common::{fixture_json, fixtures, ids, max_abs_diff, read_npy_f32, real_model, scratch_dir};

fn reference(name: &str) -> serde_json::Value {
    common::reference(&fixtures().join(name))
}

#[test]
fn show_tokens_on_a_folder_without_tokenizer_matches_transformers() {
    let r = reference("llama-tiny-a");
    let p = &r["prompts"][0];
    let prompt: Vec<String> = ids(&p["ids"]).iter().map(|i| i.to_string()).collect();
    let want: Vec<String> = ids(&p["greedy_ids"])
        .iter()
        .map(|i| i.to_string())
        .collect();
    let dir = fixtures().join("llama-tiny-a");
    let o = oxinfer(&[
        "run",
        "-m",
        dir.to_str().unwrap(),
        "--tokens",
        &prompt.join(","),
        "--temp",
        "0",
        "--max-tokens",
        &want.len().to_string(),
        "--show-tokens",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), want.join(" "));
    assert!(
        stderr(&o).contains("tok/s"),
        "stats line on stderr: {}",
        stderr(&o)
    );
}

#[test]
fn dump_logits_matches_transformers() {
    let r = reference("llama-tiny-b");
    let p = &r["prompts"][1];
    let prompt: Vec<String> = ids(&p["ids"]).iter().map(|i| i.to_string()).collect();
    let out = scratch_dir("dump").join("logits.npy");
    let gguf = fixtures().join("llama-tiny-b/model.gguf");
    let o = oxinfer(&[
        "run",
        "-m",
        gguf.to_str().unwrap(),
        "--tokens",
        &prompt.join(","),
        "--temp",
        "0",
        "--max-tokens",
        "1",
        "--show-tokens",
        "--dump-logits",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Both float32 C-order .npy files of the same shape, values within 1e-4.
    let (got_shape, got) = read_npy_f32(&out);
    let (want_shape, want) = read_npy_f32(
        &fixtures()
            .join("llama-tiny-b")
            .join(p["logits_file"].as_str().unwrap()),
    );
    assert_eq!(got_shape, want_shape);
    let d = max_abs_diff(&got, &want);
    assert!(d <= 1e-4, "max abs diff {d}");
}

#[test]
fn info_describes_the_model() {
    let o = oxinfer(&[
        "info",
        fixtures().join("llama-tiny-b/model.gguf").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s = stdout(&o);
    for needle in [
        "architecture:    llama",
        "container:       gguf",
        "F32",
        "context length:  512",
        "chat template:   no",
    ] {
        assert!(s.contains(needle), "{needle:?} missing in:\n{s}");
    }
    let o = oxinfer(&["info", fixtures().join("llama-tiny-b").to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("container:       safetensors"));
}

#[test]
fn text_prompt_without_tokenizer_is_a_clear_error() {
    let dir = fixtures().join("llama-tiny-a");
    let o = oxinfer(&["run", "-m", dir.to_str().unwrap(), "-p", "hello", "--raw"]);
    assert_fails_with(&o, &["llama-tiny-a", "no tokenizer"]);
}

#[test]
fn out_of_vocabulary_token_ids_are_refused() {
    let dir = fixtures().join("llama-tiny-a");
    let o = oxinfer(&["run", "-m", dir.to_str().unwrap(), "--tokens", "1,99999"]);
    assert_fails_with(&o, &["99999", "vocabulary"]);
}

#[test]
fn missing_path_is_a_clear_error() {
    let o = oxinfer(&["run", "-m", "/nonexistent/model.gguf", "-p", "hi"]);
    assert_fails_with(&o, &["/nonexistent/model.gguf"]);
    let o = oxinfer(&[
        "perplexity",
        "-m",
        fixtures().join("llama-tiny-a/model.gguf").to_str().unwrap(),
        "-f",
        "/nonexistent/text.txt",
    ]);
    assert_fails_with(&o, &["/nonexistent/text.txt"]);
}

fn corrupt_gguf(tag: &str, f: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    let mut b = std::fs::read(fixtures().join("llama-tiny-a/model.gguf")).unwrap();
    f(&mut b);
    let p = scratch_dir(tag).join("model.gguf");
    std::fs::write(&p, b).unwrap();
    p
}

#[test]
fn corrupt_gguf_files_are_refused() {
    let truncated = corrupt_gguf("trunc", |b| b.truncate(b.len() / 2));
    let o = oxinfer(&["info", truncated.to_str().unwrap()]);
    assert_fails_with(&o, &[truncated.to_str().unwrap(), "past the end"]);

    let header_cut = corrupt_gguf("hcut", |b| b.truncate(100));
    let o = oxinfer(&["info", header_cut.to_str().unwrap()]);
    assert_fails_with(&o, &[header_cut.to_str().unwrap(), "truncated"]);

    let bad_magic = corrupt_gguf("magic", |b| b[..4].copy_from_slice(b"GGUX"));
    let o = oxinfer(&["run", "-m", bad_magic.to_str().unwrap(), "--tokens", "1"]);
    assert_fails_with(&o, &[bad_magic.to_str().unwrap()]);

    // Tensor count claiming 2^60 entries: refused before any allocation.
    let absurd = corrupt_gguf("absurd", |b| {
        b[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes())
    });
    let o = oxinfer(&["info", absurd.to_str().unwrap()]);
    assert_fails_with(&o, &[absurd.to_str().unwrap(), "tensor count"]);

    // A different architecture name (same length, so the file stays valid).
    let arch = corrupt_gguf("arch", |b| {
        let key = b"general.architecture";
        let at = b.windows(key.len()).position(|w| w == key).unwrap();
        let val = at + key.len() + 4 + 8; // type u32, string length u64
        assert_eq!(&b[val..val + 5], b"llama");
        b[val..val + 5].copy_from_slice(b"mamba");
    });
    let o = oxinfer(&["info", arch.to_str().unwrap()]);
    assert_fails_with(&o, &["unsupported architecture 'mamba'"]);

    // A tensor of a type the engine does not know.
    let ty = corrupt_gguf("type", |b| {
        let name = b"token_embd.weight";
        let at = b.windows(name.len()).position(|w| w == name).unwrap();
        let ty_at = at + name.len() + 4 + 2 * 8; // n_dims u32, two dims u64
        b[ty_at..ty_at + 4].copy_from_slice(&77u32.to_le_bytes());
    });
    let o = oxinfer(&["info", ty.to_str().unwrap()]);
    assert_fails_with(&o, &["token_embd.weight", "unsupported tensor type id 77"]);
}

#[test]
fn corrupt_safetensors_folders_are_refused() {
    let src = fixtures().join("llama-tiny-a");
    let make = |tag: &str, f: &dyn Fn(&mut Vec<u8>)| {
        let d = scratch_dir(tag);
        std::fs::copy(src.join("config.json"), d.join("config.json")).unwrap();
        let mut b = std::fs::read(src.join("model.safetensors")).unwrap();
        f(&mut b);
        std::fs::write(d.join("model.safetensors"), b).unwrap();
        d
    };
    let d = make("st-trunc", &|b| b.truncate(b.len() - 1000));
    let o = oxinfer(&["info", d.to_str().unwrap()]);
    assert_fails_with(&o, &["model.safetensors", "past the end"]);

    let d = make("st-header", &|b| {
        b[..8].copy_from_slice(&(u64::MAX / 4).to_le_bytes())
    });
    let o = oxinfer(&["info", d.to_str().unwrap()]);
    assert_fails_with(&o, &["model.safetensors", "header length"]);

    let d = make("st-json", &|b| b[8] = b'#');
    let o = oxinfer(&["info", d.to_str().unwrap()]);
    assert_fails_with(&o, &["model.safetensors", "JSON"]);

    // Unsupported model_type in config.json.
    let d = make("st-arch", &|_| {});
    let cfg = std::fs::read_to_string(d.join("config.json"))
        .unwrap()
        .replace("\"llama\"", "\"falcon_mamba\"");
    std::fs::write(d.join("config.json"), cfg).unwrap();
    let o = oxinfer(&["info", d.to_str().unwrap()]);
    assert_fails_with(
        &o,
        &["config.json", "unsupported architecture 'falcon_mamba'"],
    );

    // A missing shard named by the index.
    let d = scratch_dir("st-shard");
    let srcb = fixtures().join("llama-tiny-b");
    for f in [
        "config.json",
        "model.safetensors.index.json",
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
    ] {
        std::fs::copy(srcb.join(f), d.join(f)).unwrap();
    }
    let o = oxinfer(&["info", d.to_str().unwrap()]);
    assert_fails_with(&o, &["model-00003-of-00003.safetensors"]);
}

fn smollm2() -> Option<PathBuf> {
    real_model("SmolLM2-135M-Instruct.Q4_1.gguf")
}

fn smollm2_reference(file: &str) -> serde_json::Value {
    fixture_json(&format!("smollm2/{file}"))
}

#[test]
fn run_real_model_greedy_text_matches_transformers() {
    let Some(model) = smollm2() else { return };
    let r = smollm2_reference("transformers_ref.json");
    for p in r["prompts"].as_array().unwrap() {
        let text = p["text"].as_str().unwrap();
        let mut args = vec![
            "run",
            "-m",
            model.to_str().unwrap(),
            "-p",
            text,
            "--temp",
            "0",
            "-n",
            "32",
        ];
        if p["kind"] == "raw" {
            args.push("--raw");
        }
        // The reference kernels (f32 activations), as transformers computes.
        let o = oxinfer_env(&args, &[("OXINFER_KERNELS", "scalar")]);
        assert!(o.status.success(), "{}", stderr(&o));
        let want = p["greedy_text_until_eos"].as_str().unwrap();
        assert_eq!(stdout(&o), format!("{want}\n"), "prompt {text:?}");
    }
}

#[test]
fn perplexity_command_matches_llamacpp_running_value() {
    let Some(model) = smollm2() else { return };
    let r = smollm2_reference("llamacpp_ref.json");
    let case = &r["perplexity"][0];
    assert_eq!(case["n_ctx"], 128);
    let want = case["ppl"].as_f64().unwrap();
    let text = fixtures().join("texts/ppl-en.txt");
    let o = oxinfer(&[
        "perplexity",
        "-m",
        model.to_str().unwrap(),
        "-f",
        text.to_str().unwrap(),
        "--ctx",
        "128",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let last = out.lines().last().unwrap();
    let rest = last
        .strip_prefix("PPL = ")
        .unwrap_or_else(|| panic!("last line: {last}"));
    let (v, e) = rest.split_once(" +/- ").unwrap();
    let (v, e): (f64, f64) = (v.parse().unwrap(), e.parse().unwrap());
    assert!(
        (v - want).abs() / want < 0.01,
        "PPL {v} vs llama.cpp {want}"
    );
    assert!(e > 0.0 && e < v);
}

#[test]
fn chat_keeps_history_and_clears_it() {
    use std::io::Write;
    let Some(model) = smollm2() else { return };
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_oxinfer"))
        .args([
            "chat",
            "-m",
            model.to_str().unwrap(),
            "--temp",
            "0",
            "-n",
            "24",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"What is the capital of France?\n/clear\nWhat is the capital of France?\n/exit\nignored\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let replies: Vec<&str> = std::str::from_utf8(&o.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .collect();
    // Greedy, same question after /clear: the same reply twice, and the input after /exit unused.
    assert!(replies.len() >= 2, "{replies:?}");
    let half = replies.len() / 2;
    assert_eq!(replies[..half], replies[half..], "{replies:?}");
    // And the same as `run` gives for that one message.
    let run = oxinfer(&[
        "run",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "What is the capital of France?",
        "--temp",
        "0",
        "-n",
        "24",
    ]);
    let run_lines: Vec<String> = stdout(&run)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    assert_eq!(replies[..half], run_lines[..], "chat vs run");
    assert!(stderr(&o).contains("history cleared"));
}
