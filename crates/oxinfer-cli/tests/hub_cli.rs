//! `oxinfer pull`, `list`, `rm` and `run -m REF` as processes: a Hugging Face reference pulled
//! from the fake Hub (crates/oxinfer/tests/fake_hub) into `$HF_HOME`, then run offline; a fake
//! Ollama store holding the tiny Llama GGUF as a blob, listed and run; greedy tokens equal to
//! transformers' (tests/fixtures/llama-tiny-a/reference.json) either way.

mod cli_process;
#[path = "../../oxinfer/tests/common/mod.rs"]
mod common;
#[path = "../../oxinfer/tests/fake_hub/mod.rs"]
mod fake_hub;

use std::fs;
use std::path::Path;

use cli_process::{assert_fails_with, ok, oxinfer_env};
use common::{fixtures, ids, reference, scratch_dir};
use fake_hub::{FakeFile, FakeHub, FakeRepo};

const COMMIT: &str = "89abcdef0123456789abcdef0123456789abcdef";

/// Greedy tokens of `model` on the fixture's first prompt, checked against transformers.
fn check_greedy(model: &str, env: &[(&str, &str)]) {
    let r = reference(&fixtures().join("llama-tiny-a"));
    let p = &r["prompts"][0];
    let prompt: Vec<String> = ids(&p["ids"]).iter().map(|i| i.to_string()).collect();
    let want: Vec<String> = ids(&p["greedy_ids"])
        .iter()
        .map(|i| i.to_string())
        .collect();
    let n = want.len().to_string();
    let args = [
        "run",
        "-m",
        model,
        "--tokens",
        &prompt.join(","),
        "--temp",
        "0",
        "--max-tokens",
        &n,
        "--show-tokens",
    ];
    let (out, _) = ok(oxinfer_env(&args, env));
    assert_eq!(out.trim(), want.join(" "), "{model}");
}

/// An Ollama store in `store` with `tiny:latest` = the tiny Llama GGUF.
fn fake_ollama_store(store: &Path) {
    let gguf = fs::read(fixtures().join("llama-tiny-a/model.gguf")).unwrap();
    let config = br#"{"model_format":"gguf","model_family":"llama","file_type":"F32"}"#.to_vec();
    let blob = |bytes: &[u8]| {
        let sha = FakeFile::new("b", bytes.to_vec(), true).sha256();
        fs::create_dir_all(store.join("blobs")).unwrap();
        fs::write(store.join("blobs").join(format!("sha256-{sha}")), bytes).unwrap();
        (sha, bytes.len())
    };
    let (model_sha, model_len) = blob(&gguf);
    let (config_sha, config_len) = blob(&config);
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json",
"config":{{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"sha256:{config_sha}","size":{config_len}}},
"layers":[{{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:{model_sha}","size":{model_len}}}]}}"#
    );
    let dir = store.join("manifests/registry.ollama.ai/library/tiny");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("latest"), manifest).unwrap();
}

#[test]
fn pull_list_run_and_rm_across_the_hf_cache_and_ollamas_store() {
    let root = scratch_dir("hub-cli");
    let hub = FakeHub::start("t");
    hub.add_repo(FakeRepo {
        id: "tiny/llama-GGUF".into(),
        commit: COMMIT.into(),
        files: vec![
            FakeFile::new(
                "tiny-Q8_0.gguf",
                fs::read(fixtures().join("llama-tiny-a/model.gguf")).unwrap(),
                true,
            ),
            FakeFile::new("s-Q2_K-00001-of-00002.gguf", vec![1; 1000], true),
            FakeFile::new("s-Q2_K-00002-of-00002.gguf", vec![2; 1000], true),
        ],
        gated: false,
    });
    let store = root.join("ollama");
    fake_ollama_store(&store);
    let hf_home = root.join("hf");
    let ox = root.join("ox");
    let env = [
        ("HF_ENDPOINT", hub.endpoint.as_str()),
        ("HF_HOME", hf_home.to_str().unwrap()),
        ("OLLAMA_MODELS", store.to_str().unwrap()),
        ("OXINFER_CACHE", ox.to_str().unwrap()),
    ];

    let (out, _) = ok(oxinfer_env(&["pull", "tiny/llama-GGUF:Q8_0"], &env));
    let snapshot = hf_home
        .join("hub/models--tiny--llama-GGUF/snapshots")
        .join(COMMIT);
    assert_eq!(
        out.trim(),
        snapshot.join("tiny-Q8_0.gguf").to_str().unwrap()
    );

    let (list, _) = ok(oxinfer_env(&["list"], &env));
    let line = |needle: &str| {
        list.lines()
            .find(|l| l.starts_with(needle))
            .unwrap_or_else(|| panic!("no {needle} in:\n{list}"))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        line("tiny/llama-GGUF/tiny-Q8_0.gguf")[1..4],
        ["huggingface", "gguf", "Q8_0"]
    );
    assert_eq!(line("ollama:tiny:latest")[1..4], ["ollama", "gguf", "F32"]);

    // Offline, from the cache; and Ollama's blob in place.
    let mut offline = env.to_vec();
    offline.push(("HF_HUB_OFFLINE", "1"));
    check_greedy("tiny/llama-GGUF:Q8_0", &offline);
    check_greedy("ollama:tiny", &env);

    let o = oxinfer_env(&["run", "-m", "ollama:absent", "-p", "hi"], &env);
    assert_fails_with(&o, &["ollama:absent:latest", "ollama pull absent:latest"]);
    let o = oxinfer_env(&["rm", "ollama:tiny"], &env);
    assert_fails_with(&o, &["ollama rm tiny:latest"]);
    let (out, _) = ok(oxinfer_env(&["rm", "tiny/llama-GGUF"], &env));
    assert!(out.contains("models--tiny--llama-GGUF"), "{out}");
    assert!(!snapshot.exists());
    let (list, _) = ok(oxinfer_env(&["list"], &env));
    assert!(!list.contains("tiny/llama-GGUF"), "{list}");
    let o = oxinfer_env(&["run", "-m", "tiny/llama-GGUF:Q8_0", "-p", "hi"], &offline);
    assert_fails_with(&o, &["not in the Hugging Face cache", "HF_HUB_OFFLINE"]);
    // A split GGUF is pulled whole; loading it says it is not supported and how to merge.
    let o = oxinfer_env(&["run", "-m", "tiny/llama-GGUF:Q2_K", "-p", "hi"], &env);
    assert_fails_with(
        &o,
        &[
            "part 1 of a GGUF split into 2 files",
            "llama-gguf-split --merge",
        ],
    );
    assert!(snapshot.join("s-Q2_K-00002-of-00002.gguf").is_file());
    let o = oxinfer_env(&["run", "-m", "org/", "-p", "hi"], &env);
    assert_fails_with(
        &o,
        &["org/", "expected a Hugging Face repository as org/repo"],
    );
    fs::remove_dir_all(&root).unwrap();
}
