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

/// Writes `bytes` as a blob of the Ollama store `store`; returns its `sha256:` digest and size.
fn blob(store: &Path, bytes: &[u8]) -> (String, usize) {
    let sha = FakeFile::new("b", bytes.to_vec(), true).sha256();
    fs::create_dir_all(store.join("blobs")).unwrap();
    fs::write(store.join("blobs").join(format!("sha256-{sha}")), bytes).unwrap();
    (format!("sha256:{sha}"), bytes.len())
}

/// Writes the manifest of `name:tag` in `store`: the tiny Llama GGUF (which has a tokenizer
/// but no chat template) as the model layer, plus `extra` layers (media type, contents).
fn ollama_manifest(store: &Path, name: &str, tag: &str, extra: &[(&str, &[u8])]) {
    let gguf = fs::read(fixtures().join("llama-tiny-a/model.gguf")).unwrap();
    let config = br#"{"model_format":"gguf","model_family":"llama","file_type":"F32"}"#;
    let layer = |media: &str, bytes: &[u8]| {
        let (digest, size) = blob(store, bytes);
        format!(r#"{{"mediaType":"{media}","digest":"{digest}","size":{size}}}"#)
    };
    let (config_digest, config_len) = blob(store, config);
    let mut layers = vec![layer("application/vnd.ollama.image.model", &gguf)];
    layers.extend(extra.iter().map(|(m, b)| layer(m, b)));
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json",
"config":{{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"{config_digest}","size":{config_len}}},
"layers":[{}]}}"#,
        layers.join(",")
    );
    let dir = store
        .join("manifests/registry.ollama.ai/library")
        .join(name);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(tag), manifest).unwrap();
}

/// An Ollama store in `store` with `tiny:latest` = the tiny Llama GGUF.
fn fake_ollama_store(store: &Path) {
    ollama_manifest(store, "tiny", "latest", &[]);
}

#[test]
fn pull_list_run_and_rm_across_the_hf_cache_and_ollamas_store() {
    let root = scratch_dir("hub-cli");
    let hub = FakeHub::start("t");
    hub.add_repo(FakeRepo {
        id: "tiny/llama-GGUF".into(),
        commit: COMMIT.into(),
        files: vec![FakeFile::new(
            "tiny-Q8_0.gguf",
            fs::read(fixtures().join("llama-tiny-a/model.gguf")).unwrap(),
            true,
        )]
        .into_iter()
        .chain((1..=3).map(|i| {
            // The tiny Llama split in three parts as llama.cpp's gguf-split lays them out.
            let part = format!("model-{i:05}-of-00003.gguf");
            let bytes = fs::read(fixtures().join("llama-tiny-split").join(part)).unwrap();
            FakeFile::new(&format!("s-F32-{i:05}-of-00003.gguf"), bytes, true)
        }))
        .collect(),
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
    // A split GGUF is pulled whole and runs as one model.
    check_greedy("tiny/llama-GGUF:F32", &env);
    assert!(snapshot.join("s-F32-00003-of-00003.gguf").is_file());
    let o = oxinfer_env(&["run", "-m", "org/", "-p", "hi"], &env);
    assert_fails_with(
        &o,
        &["org/", "expected a Hugging Face repository as org/repo"],
    );
    fs::remove_dir_all(&root).unwrap();
}

/// An Ollama model whose GGUF has no chat template: its template layer (Go, ChatML) and system
/// layer render the prompt as Go's text/template running Ollama's logic does
/// (tests/fixtures/ollama-templates, case `chatml_legacy_system_layer`); its params layer's
/// temperature 0 and stop string apply unless a flag overrides them.
#[test]
fn ollama_template_system_and_params_layers_are_used() {
    let root = scratch_dir("hub-cli-ollama");
    let store = root.join("ollama");
    let cases: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(fixtures().join("ollama-templates/cases.json")).unwrap(),
    )
    .unwrap();
    let case = cases
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "chatml_legacy_system_layer")
        .unwrap();
    let reference: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(fixtures().join("ollama-templates/reference.json")).unwrap(),
    )
    .unwrap();
    let want_prompt = reference["rendered"]["chatml_legacy_system_layer"]
        .as_str()
        .unwrap();
    let template = case["template"].as_str().unwrap().as_bytes();
    let system = case["system"].as_str().unwrap().as_bytes();
    let user = case["messages"][0]["content"].as_str().unwrap();
    const TEMPLATE: &str = "application/vnd.ollama.image.template";
    const SYSTEM: &str = "application/vnd.ollama.image.system";
    const PARAMS: &str = "application/vnd.ollama.image.params";
    ollama_manifest(
        &store,
        "chatml",
        "plain",
        &[(TEMPLATE, template), (SYSTEM, system)],
    );
    let env = [
        ("OLLAMA_MODELS", store.to_str().unwrap()),
        ("OXINFER_CACHE", root.to_str().unwrap()),
    ];
    let run = |tag: &str, flags: &[&str]| {
        let model = format!("ollama:chatml:{tag}");
        let mut args = vec![
            "run",
            "-m",
            model.as_str(),
            "-p",
            user,
            "--print-prompt",
            "-n",
            "24",
        ];
        args.extend_from_slice(flags);
        ok(oxinfer_env(&args, &env))
    };
    let (full, err) = run("plain", &["--temp", "0"]);
    assert!(err.contains(want_prompt), "rendered prompt not in:\n{err}");
    // A stop string from the middle of the greedy reply, as the params layer's.
    let chars: Vec<char> = full.chars().collect();
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let cut = &full[..full.find(&stop).unwrap()];
    let params = serde_json::json!({"stop": [stop], "temperature": 0, "mirostat": 1}).to_string();
    ollama_manifest(
        &store,
        "chatml",
        "params",
        &[
            (TEMPLATE, template),
            (SYSTEM, system),
            (PARAMS, params.as_bytes()),
        ],
    );
    let (out, _) = run("params", &[]);
    assert_eq!(
        out.trim_end(),
        cut.trim_end(),
        "params' temperature 0 and stop"
    );
    let (out, _) = run("params", &["--stop", "\u{1}"]);
    assert_eq!(out, full, "--stop overrides the params' stop");
    fs::remove_dir_all(&root).unwrap();
}

/// A Hugging Face GGUF of a family whose towers come from projector files (Gemma 4) brings the
/// repository's projector with it (F32 preferred here over a Q8_0 one, which is not fetched);
/// `--no-mmproj` leaves it a text model; offline, the cached projector is found again; a Llama
/// repository's projector is not fetched at all.
#[test]
fn hf_gguf_brings_its_projector_when_the_family_takes_one() {
    let root = scratch_dir("hub-cli-mmproj");
    let hub = FakeHub::start("t");
    let mm = fixtures().join("mmproj-gguf/tiny_gemma4_bidir");
    let junk = |len: usize| (0..len).map(|i| (i * 7) as u8).collect::<Vec<u8>>();
    hub.add_repo(FakeRepo {
        id: "tiny/gemma4-GGUF".into(),
        commit: COMMIT.into(),
        files: vec![
            FakeFile::new("g-F32.gguf", fs::read(mm.join("model.gguf")).unwrap(), true),
            FakeFile::new(
                "mmproj-F32.gguf",
                fs::read(mm.join("mmproj-f32.gguf")).unwrap(),
                true,
            ),
            FakeFile::new("mmproj-Q8_0.gguf", junk(4096), true),
        ],
        gated: false,
    });
    hub.add_repo(FakeRepo {
        id: "tiny/llama-GGUF".into(),
        commit: COMMIT.into(),
        files: vec![
            FakeFile::new(
                "tiny-Q8_0.gguf",
                fs::read(fixtures().join("llama-tiny-a/model.gguf")).unwrap(),
                true,
            ),
            FakeFile::new("mmproj-F16.gguf", junk(4096), true),
        ],
        gated: false,
    });
    let hf_home = root.join("hf");
    let ox = root.join("ox");
    let env = [
        ("HF_ENDPOINT", hub.endpoint.as_str()),
        ("HF_HOME", hf_home.to_str().unwrap()),
        ("OXINFER_CACHE", ox.to_str().unwrap()),
    ];
    let snapshot = |repo: &str| {
        hf_home
            .join(format!("hub/models--tiny--{repo}/snapshots"))
            .join(COMMIT)
    };
    let media = |out: &str| {
        out.lines()
            .find(|l| l.starts_with("media inputs"))
            .map(str::to_string)
    };

    let (out, _) = ok(oxinfer_env(&["pull", "tiny/gemma4-GGUF"], &env));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            snapshot("gemma4-GGUF").join("g-F32.gguf").to_str().unwrap(),
            snapshot("gemma4-GGUF")
                .join("mmproj-F32.gguf")
                .to_str()
                .unwrap()
        ]
    );
    let (out, err) = ok(oxinfer_env(&["info", "-m", "tiny/gemma4-GGUF"], &env));
    let line = media(&out).unwrap_or_else(|| panic!("no media inputs in:\n{out}\n{err}"));
    assert!(
        line.contains("image") && line.contains("mmproj-F32.gguf"),
        "{line}"
    );
    assert!(snapshot("gemma4-GGUF").join("mmproj-F32.gguf").is_file());
    assert!(!snapshot("gemma4-GGUF").join("mmproj-Q8_0.gguf").exists());

    let mut offline = env.to_vec();
    offline.push(("HF_HUB_OFFLINE", "1"));
    let (out, _) = ok(oxinfer_env(
        &["info", "-m", "tiny/gemma4-GGUF", "--no-mmproj"],
        &offline,
    ));
    assert_eq!(media(&out), None, "{out}");
    let (out, _) = ok(oxinfer_env(&["info", "-m", "tiny/gemma4-GGUF"], &offline));
    assert!(
        media(&out).is_some_and(|l| l.contains("mmproj-F32.gguf")),
        "{out}"
    );

    let (out, _) = ok(oxinfer_env(&["info", "-m", "tiny/llama-GGUF"], &env));
    assert_eq!(media(&out), None, "{out}");
    assert!(snapshot("llama-GGUF").join("tiny-Q8_0.gguf").is_file());
    assert!(!snapshot("llama-GGUF").join("mmproj-F16.gguf").exists());
    fs::remove_dir_all(&root).unwrap();
}
