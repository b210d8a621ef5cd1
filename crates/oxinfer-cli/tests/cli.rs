//! The `oxinfer` binary as a process: generation on tiny fixtures (ids, --dump-logits against
//! transformers), `info`, and bad input (corrupt files, unsupported architectures, missing
//! tokenizer, unreadable paths) giving one clear error line and a non-zero exit, never a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn oxinfer(args: &[&str]) -> Output {
    oxinfer_env(args, &[])
}

fn oxinfer_env(args: &[&str], env: &[(&str, &str)]) -> Output {
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

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts a clean failure: non-zero exit, no panic, an `error:` line containing every needle.
fn assert_fails_with(o: &Output, needles: &[&str]) {
    let err = stderr(o);
    assert!(
        !o.status.success(),
        "expected failure, got success; stderr: {err}"
    );
    assert_eq!(o.status.code(), Some(1), "exit code; stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("no error line: {err}"));
    for n in needles {
        assert!(line.contains(n), "error line lacks {n:?}: {line}");
    }
}

fn reference(name: &str) -> serde_json::Value {
    let p = fixtures().join(name).join("reference.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn id_list(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("oxinfer-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn show_tokens_on_a_folder_without_tokenizer_matches_transformers() {
    let r = reference("llama-tiny-a");
    let p = &r["prompts"][0];
    let prompt: Vec<String> = id_list(&p["ids"]).iter().map(|i| i.to_string()).collect();
    let want: Vec<String> = id_list(&p["greedy_ids"])
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
    let prompt: Vec<String> = id_list(&p["ids"]).iter().map(|i| i.to_string()).collect();
    let out = temp_dir("dump").join("logits.npy");
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
    let got = std::fs::read(&out).unwrap();
    let want = std::fs::read(
        fixtures()
            .join("llama-tiny-b")
            .join(p["logits_file"].as_str().unwrap()),
    )
    .unwrap();
    // Same header layout (shape, dtype), then values within 1e-4.
    let body = |b: &[u8]| {
        let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
        (
            String::from_utf8_lossy(&b[10..10 + hlen]).into_owned(),
            b[10 + hlen..].to_vec(),
        )
    };
    let (gh, gb) = body(&got);
    let (wh, wb) = body(&want);
    let shape = |h: &str| {
        h.split("'shape':")
            .nth(1)
            .unwrap()
            .split(')')
            .next()
            .unwrap()
            .replace(' ', "")
    };
    assert_eq!(shape(&gh), shape(&wh));
    assert_eq!(gb.len(), wb.len());
    let f = |b: &[u8]| {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect::<Vec<_>>()
    };
    let d = f(&gb)
        .iter()
        .zip(f(&wb))
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
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
    let p = temp_dir(tag).join("model.gguf");
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
        let d = temp_dir(tag);
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
    let d = temp_dir("st-shard");
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
    let dir = match std::env::var_os("OXINFER_TEST_MODELS") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/oxinfer/models"),
    };
    let p = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if p.is_file() {
        Some(p)
    } else {
        println!(
            "skipped: {} not found (run scripts/fetch-test-models.sh)",
            p.display()
        );
        None
    }
}

fn smollm2_reference(file: &str) -> serde_json::Value {
    let p = fixtures().join("smollm2").join(file);
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_oxinfer"))
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
