//! Hugging Face references against a fake Hub on loopback (tests/fake_hub): fetch by quant tag
//! into the standard cache layout and run, resume after a cut and from an `.incomplete` file,
//! hash mismatch refused, 416 answers, slow, stalled and aborted transfers, offline mode and an
//! unreachable Hub, split GGUF, gated and missing repositories, a safetensors repository, and
//! cache interop with Python's `huggingface_hub`.

mod common;
mod fake_hub;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{check_sources, fixtures, scratch_dir};
use fake_hub::{FakeFile, FakeHub, FakeRepo};
use oxinfer::hub::hf::config::HfConfig;
use oxinfer::hub::hf::{self, cache::RepoCache};
use oxinfer::hub::{parse_reference, HfRef, HubError, ModelRef, NoProgress, Progress};

const TOKEN: &str = "hf_fake_token";
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
const TOL: f32 = 1e-4;

fn tiny_gguf() -> Vec<u8> {
    fs::read(fixtures().join("llama-tiny-a/model.gguf")).unwrap()
}

fn noise(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn readme() -> FakeFile {
    FakeFile::new("README.md", b"# a tiny model\n".to_vec(), false)
}

/// A Hub with `tiny/llama-GGUF` (Q8_0 = the tiny Llama fixture, a Q4_K_M split in two parts),
/// `tiny/split-GGUF` (the tiny Llama split in three parts by llama.cpp's layout, as F32, beside
/// a Q8_0), `tiny/llama` (safetensors), `tiny/gated` and `tiny/empty`.
fn hub() -> FakeHub {
    let hub = FakeHub::start(TOKEN);
    let gguf = tiny_gguf();
    hub.add_repo(FakeRepo {
        id: "tiny/llama-GGUF".into(),
        commit: COMMIT.into(),
        files: vec![
            readme(),
            FakeFile::new("tiny-Q8_0.gguf", gguf.clone(), true),
            FakeFile::new("tiny-Q4_K_M-00001-of-00002.gguf", noise(300_000, 1), true),
            FakeFile::new("tiny-Q4_K_M-00002-of-00002.gguf", noise(200_000, 2), true),
        ],
        gated: false,
    });
    let mut split_files = vec![
        readme(),
        FakeFile::new("tiny-Q8_0.gguf", gguf.clone(), true),
    ];
    for i in 1..=3 {
        let name = format!("model-{i:05}-of-00003.gguf");
        let bytes = fs::read(fixtures().join("llama-tiny-split").join(&name)).unwrap();
        split_files.push(FakeFile::new(
            &format!("tiny-F32-{i:05}-of-00003.gguf"),
            bytes,
            true,
        ));
    }
    hub.add_repo(FakeRepo {
        id: "tiny/split-GGUF".into(),
        commit: COMMIT.into(),
        files: split_files,
        gated: false,
    });
    let dir = fixtures().join("llama-tiny-a");
    let small = |name: &str| FakeFile::new(name, fs::read(dir.join(name)).unwrap(), false);
    hub.add_repo(FakeRepo {
        id: "tiny/llama".into(),
        commit: COMMIT.into(),
        files: vec![
            readme(),
            small("config.json"),
            small("generation_config.json"),
            FakeFile::new(
                "model.safetensors",
                fs::read(dir.join("model.safetensors")).unwrap(),
                true,
            ),
        ],
        gated: false,
    });
    hub.add_repo(FakeRepo {
        id: "tiny/gated".into(),
        commit: COMMIT.into(),
        files: vec![readme(), FakeFile::new("g-Q8_0.gguf", gguf, true)],
        gated: true,
    });
    hub.add_repo(FakeRepo {
        id: "tiny/empty".into(),
        commit: COMMIT.into(),
        files: vec![
            readme(),
            FakeFile::new("config.json", b"{}".to_vec(), false),
        ],
        gated: false,
    });
    hub
}

fn config(hub: &FakeHub, cache: &Path) -> HfConfig {
    HfConfig {
        endpoint: hub.endpoint.clone(),
        token: None,
        hub_cache: cache.to_path_buf(),
        offline: false,
        download_timeout: Duration::from_secs(5),
    }
}

fn hf_ref(spec: &str) -> HfRef {
    match parse_reference(spec).unwrap() {
        ModelRef::Hf(r) => r,
        other => panic!("{spec}: {other:?}"),
    }
}

fn resolve(spec: &str, cfg: &HfConfig) -> Result<PathBuf, HubError> {
    hf::resolve(&hf_ref(spec), cfg, &mut NoProgress)
}

fn sha_of(bytes: &[u8]) -> String {
    FakeFile::new("x", bytes.to_vec(), true).sha256()
}

#[test]
fn quant_tag_fetch_lays_out_the_hf_cache_and_the_model_runs() {
    let hub = hub();
    let cache = scratch_dir("hubfake-quant");
    let cfg = config(&hub, &cache);
    let path = resolve("tiny/llama-GGUF:q8_0", &cfg).unwrap();
    let repo = cache.join("models--tiny--llama-GGUF");
    assert_eq!(
        path,
        repo.join("snapshots").join(COMMIT).join("tiny-Q8_0.gguf")
    );
    let sha = sha_of(&tiny_gguf());
    assert_eq!(
        fs::read_link(&path).unwrap(),
        Path::new("../../blobs").join(&sha),
        "a relative symlink into blobs/, as huggingface_hub makes"
    );
    assert_eq!(fs::read_to_string(repo.join("refs/main")).unwrap(), COMMIT);
    let log = hub.log();
    assert_eq!(
        log,
        vec![
            "GET /api/models/tiny/llama-GGUF/revision/main?blobs=true".to_string(),
            format!("HEAD /tiny/llama-GGUF/resolve/{COMMIT}/tiny-Q8_0.gguf"),
            format!("CDN GET /blobs/{sha}"),
        ]
    );
    check_sources(
        &fixtures().join("llama-tiny-a"),
        std::slice::from_ref(&path),
        &[0],
        TOL,
    );
    // A second resolve asks for the commit only: the file is in the snapshot.
    hub.clear_log();
    assert_eq!(resolve("tiny/llama-GGUF:Q8_0", &cfg).unwrap(), path);
    assert_eq!(hub.log().len(), 1, "{:?}", hub.log());
    // The default choice of a GGUF repo is Q4_K_M, split in two parts, fetched together.
    let split = resolve("tiny/llama-GGUF", &cfg).unwrap();
    assert!(
        split.ends_with("tiny-Q4_K_M-00001-of-00002.gguf"),
        "{split:?}"
    );
    let part2 = split.with_file_name("tiny-Q4_K_M-00002-of-00002.gguf");
    assert_eq!(fs::read(part2).unwrap(), noise(200_000, 2));
    fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn a_split_gguf_is_fetched_whole_and_runs_as_one_model() {
    let hub = hub();
    let cache = scratch_dir("hubfake-split");
    let cfg = config(&hub, &cache);
    let path = resolve("tiny/split-GGUF:f32", &cfg).unwrap();
    let snapshot = cache
        .join("models--tiny--split-GGUF/snapshots")
        .join(COMMIT);
    assert_eq!(path, snapshot.join("tiny-F32-00001-of-00003.gguf"));
    let heads: Vec<String> = hub
        .log()
        .into_iter()
        .filter(|l| l.starts_with("HEAD"))
        .collect();
    // Fetched four at a time: every part is asked for, in any order.
    let mut want: Vec<String> = (1..=3)
        .map(|i| format!("HEAD /tiny/split-GGUF/resolve/{COMMIT}/tiny-F32-{i:05}-of-00003.gguf"))
        .collect();
    let mut heads_sorted = heads.clone();
    heads_sorted.sort();
    want.sort();
    assert_eq!(heads_sorted, want);
    // The first part opens the whole model: logits within 1e-4 of transformers, greedy equal.
    check_sources(
        &fixtures().join("llama-tiny-a"),
        std::slice::from_ref(&path),
        &[0, 3],
        TOL,
    );
    fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn bad_references_say_what_was_looked_for() {
    let hub = hub();
    let cache = scratch_dir("hubfake-bad");
    let cfg = config(&hub, &cache);
    let e = resolve("tiny/llama-GGUF:IQ2_XS", &cfg)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no GGUF file with quant tag IQ2_XS"), "{e}");
    assert!(e.contains("available: Q4_K_M, Q8_0"), "{e}");
    let e = resolve("tiny/empty", &cfg).unwrap_err().to_string();
    assert!(e.contains("tiny/empty@main has no model weights"), "{e}");
    assert!(e.contains("README.md, config.json"), "{e}");
    let e = resolve("tiny/nothing", &cfg).unwrap_err();
    assert!(matches!(e, HubError::NotOnHub { .. }), "{e:?}");
    let e = resolve("tiny/llama-GGUF@v9", &cfg).unwrap_err().to_string();
    assert!(e.contains("revision v9") && e.contains("not found"), "{e}");
    let e = resolve("tiny/llama-GGUF/nope.gguf", &cfg)
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope.gguf") && e.contains("not found"), "{e}");
    let e = parse_reference("org/").unwrap_err().to_string();
    assert!(
        e.contains("expected a Hugging Face repository as org/repo"),
        "{e}"
    );
    fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn gated_repositories_explain_the_licence_and_the_token() {
    let hub = hub();
    let cache = scratch_dir("hubfake-gated");
    let mut cfg = config(&hub, &cache);
    let e = resolve("tiny/gated:Q8_0", &cfg).unwrap_err();
    assert!(matches!(e, HubError::Gated { status: 401, .. }), "{e:?}");
    let msg = e.to_string();
    let licence = format!(
        "Accept the licence at {}/tiny/gated, then set HF_TOKEN",
        hub.endpoint
    );
    assert!(msg.contains(&licence), "{msg}");
    cfg.token = Some(TOKEN.into());
    let path = resolve("tiny/gated:Q8_0", &cfg).unwrap();
    assert_eq!(fs::read(path).unwrap(), tiny_gguf());
    fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn a_cut_transfer_resumes_with_range_and_a_corrupt_one_is_refused() {
    let hub = hub();
    let cache = scratch_dir("hubfake-resume");
    let cfg = config(&hub, &cache);
    let gguf = tiny_gguf();
    let sha = sha_of(&gguf);
    // Cut after half the bytes: the download resumes where it stopped.
    hub.cut_once(&sha);
    let path = resolve("tiny/llama-GGUF:Q8_0", &cfg).unwrap();
    assert_eq!(fs::read(&path).unwrap(), gguf);
    let cdn: Vec<String> = hub
        .log()
        .into_iter()
        .filter(|l| l.starts_with("CDN"))
        .collect();
    assert_eq!(
        cdn,
        vec![
            format!("CDN GET /blobs/{sha}"),
            format!("CDN GET /blobs/{sha} bytes={}-", gguf.len() / 2),
        ]
    );
    // An `.incomplete` left by an earlier run is continued, not restarted.
    fs::remove_dir_all(&cache).unwrap();
    let blobs = cache.join("models--tiny--llama-GGUF/blobs");
    fs::create_dir_all(&blobs).unwrap();
    fs::write(blobs.join(format!("{sha}.incomplete")), &gguf[..1000]).unwrap();
    hub.clear_log();
    let path = resolve("tiny/llama-GGUF:Q8_0", &cfg).unwrap();
    assert_eq!(fs::read(&path).unwrap(), gguf);
    assert!(hub
        .log()
        .contains(&format!("CDN GET /blobs/{sha} bytes=1000-")));
    // A leftover longer than the file cannot be a prefix of it: it is dropped and the download
    // starts over (no Range request).
    fs::remove_dir_all(&cache).unwrap();
    fs::create_dir_all(&blobs).unwrap();
    let mut longer = gguf.clone();
    longer.extend_from_slice(b"0123456789");
    fs::write(blobs.join(format!("{sha}.incomplete")), &longer).unwrap();
    hub.clear_log();
    let path = resolve("tiny/llama-GGUF:Q8_0", &cfg).unwrap();
    assert_eq!(fs::read(&path).unwrap(), gguf);
    let cdn: Vec<String> = hub
        .log()
        .into_iter()
        .filter(|l| l.starts_with("CDN"))
        .collect();
    assert_eq!(cdn, vec![format!("CDN GET /blobs/{sha}")]);
    // Served bytes that do not hash to the LFS ETag are refused and nothing is kept.
    fs::remove_dir_all(&cache).unwrap();
    hub.corrupt(&sha);
    let e = resolve("tiny/llama-GGUF:Q8_0", &cfg).unwrap_err();
    assert!(
        matches!(e, HubError::Mismatch { kind: "sha256", .. }),
        "{e:?}"
    );
    assert!(!blobs.join(&sha).exists());
    assert!(!blobs.join(format!("{sha}.incomplete")).exists());
    let snapshot = cache
        .join("models--tiny--llama-GGUF/snapshots")
        .join(COMMIT);
    assert!(!snapshot.join("tiny-Q8_0.gguf").exists());
    fs::remove_dir_all(&cache).unwrap();
}

/// The CDN requests of the log.
fn cdn_log(hub: &FakeHub) -> Vec<String> {
    hub.log()
        .into_iter()
        .filter(|l| l.starts_with("CDN"))
        .collect()
}

/// Writes `bytes` as the `.incomplete` of blob `sha` of `tiny/llama-GGUF` in a fresh `cache`.
fn leave_incomplete(cache: &Path, sha: &str, bytes: &[u8]) -> PathBuf {
    let _ = fs::remove_dir_all(cache);
    let blobs = cache.join("models--tiny--llama-GGUF/blobs");
    fs::create_dir_all(&blobs).unwrap();
    let part = blobs.join(format!("{sha}.incomplete"));
    fs::write(&part, bytes).unwrap();
    part
}

#[test]
fn range_not_satisfiable_restarts_or_keeps_the_complete_file() {
    let hub = hub();
    let cache = scratch_dir("hubfake-416");
    let cfg = config(&hub, &cache);
    let gguf = tiny_gguf();
    let sha = sha_of(&gguf);
    let get = format!("CDN GET /blobs/{sha}");
    // The CDN refuses the resume (416): the kept bytes are dropped, not mixed with the
    // restart's, and the file comes whole from byte 0.
    let part = leave_incomplete(&cache, &sha, &gguf[..1000]);
    hub.refuse_range_once(&sha);
    hub.clear_log();
    let path = resolve("tiny/llama-GGUF:Q8_0", &cfg).unwrap();
    assert_eq!(fs::read(&path).unwrap(), gguf);
    assert_eq!(
        cdn_log(&hub),
        vec![format!("{get} bytes=1000-"), get.clone()]
    );
    assert!(!part.exists());
    // A leftover holding the whole file is checked against the ETag and kept: nothing is
    // asked of the CDN (a Range from the end would be answered 416).
    let part = leave_incomplete(&cache, &sha, &gguf);
    hub.clear_log();
    let path = resolve("tiny/llama-GGUF:Q8_0", &cfg).unwrap();
    assert_eq!(fs::read(&path).unwrap(), gguf);
    assert_eq!(cdn_log(&hub), Vec::<String>::new());
    assert!(!part.exists());
    // A whole-length leftover that does not hash to the ETag is downloaded again from byte 0.
    let mut damaged = gguf.clone();
    damaged[gguf.len() / 3] ^= 1;
    leave_incomplete(&cache, &sha, &damaged);
    hub.clear_log();
    let path = resolve("tiny/llama-GGUF:Q8_0", &cfg).unwrap();
    assert_eq!(fs::read(&path).unwrap(), gguf);
    assert_eq!(cdn_log(&hub), vec![get.clone()]);
    // The Hub announces more bytes than the CDN's copy has (stale metadata): resuming after
    // the whole file gets 416 `bytes */<len>`; the bytes hash to the ETag, so they are kept.
    leave_incomplete(&cache, &sha, &gguf);
    hub.announce_size(&sha, gguf.len() + 10);
    hub.clear_log();
    let path = resolve("tiny/llama-GGUF:Q8_0", &cfg).unwrap();
    assert_eq!(fs::read(&path).unwrap(), gguf);
    assert_eq!(cdn_log(&hub), vec![format!("{get} bytes={}-", gguf.len())]);
    fs::remove_dir_all(&cache).unwrap();
}

/// A [`Progress`] that records when bytes were reported, and the notes.
#[derive(Default)]
struct Recorder {
    advances: Vec<(Instant, u64)>,
    notes: Vec<String>,
}

impl Progress for Recorder {
    fn start(&mut self, _what: &str, _total: Option<u64>) {}
    fn advance(&mut self, bytes: u64) {
        self.advances.push((Instant::now(), bytes));
    }
    fn finish(&mut self) {}
    fn note(&mut self, message: &str) {
        self.notes.push(message.to_string());
    }
}

#[test]
fn a_slow_transfer_outlasts_the_timeout_while_bytes_arrive() {
    let hub = hub();
    let cache = scratch_dir("hubfake-slow");
    let mut cfg = config(&hub, &cache);
    cfg.download_timeout = Duration::from_secs(1);
    let gguf = tiny_gguf();
    let sha = sha_of(&gguf);
    // Ten chunks, 250 ms apart: 2.5 s in all, no pause as long as the 1 s timeout.
    hub.pace(&sha, gguf.len().div_ceil(10), Duration::from_millis(250));
    let mut rec = Recorder::default();
    let path = hf::resolve(&hf_ref("tiny/llama-GGUF:Q8_0"), &cfg, &mut rec).unwrap();
    assert_eq!(fs::read(&path).unwrap(), gguf);
    assert_eq!(cdn_log(&hub), vec![format!("CDN GET /blobs/{sha}")]);
    assert!(rec.notes.is_empty(), "{:?}", rec.notes);
    let bytes: Vec<u64> = rec
        .advances
        .iter()
        .map(|a| a.1)
        .filter(|&n| n > 0)
        .collect();
    assert_eq!(bytes.iter().sum::<u64>(), gguf.len() as u64);
    assert!(
        bytes.len() >= 10,
        "progress in {} steps: {bytes:?}",
        bytes.len()
    );
    let span = rec.advances.last().unwrap().0 - rec.advances.first().unwrap().0;
    assert!(
        span > cfg.download_timeout,
        "the transfer took {span:?}, not longer than the timeout"
    );
    fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn an_aborted_transfer_resumes_from_the_kept_bytes() {
    let hub = hub();
    let cache = scratch_dir("hubfake-abort");
    let mut cfg = config(&hub, &cache);
    cfg.download_timeout = Duration::from_secs(1);
    let gguf = tiny_gguf();
    let sha = sha_of(&gguf);
    let get = format!("CDN GET /blobs/{sha}");
    // Half the body, then silence longer than the timeout: the read times out and the
    // download resumes where the bytes stopped.
    hub.stall_once(&sha, Duration::from_secs(3));
    let mut rec = Recorder::default();
    let path = hf::resolve(&hf_ref("tiny/llama-GGUF:Q8_0"), &cfg, &mut rec).unwrap();
    assert_eq!(fs::read(&path).unwrap(), gguf);
    let half = gguf.len() / 2;
    assert_eq!(
        cdn_log(&hub),
        vec![get.clone(), format!("{get} bytes={half}-")]
    );
    let lost = format!(
        "connection lost at {half} of {} bytes; resuming",
        gguf.len()
    );
    assert!(
        rec.notes.iter().any(|n| n.contains(&lost)),
        "{:?}",
        rec.notes
    );
    // Every connection drops at byte 100 000: the run gives up, keeping those bytes.
    fs::remove_dir_all(&cache).unwrap();
    hub.drop_at(&sha, Some(100_000));
    hub.clear_log();
    let e = resolve("tiny/llama-GGUF:Q8_0", &cfg).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, HubError::Http { .. }), "{e:?}");
    assert!(
        msg.contains("100000 of") && msg.contains("for the next run"),
        "{msg}"
    );
    let part = cache.join(format!("models--tiny--llama-GGUF/blobs/{sha}.incomplete"));
    assert_eq!(fs::read(&part).unwrap(), &gguf[..100_000]);
    // The next run asks for the rest only; the whole hashes to the ETag.
    hub.drop_at(&sha, None);
    hub.clear_log();
    let path = resolve("tiny/llama-GGUF:Q8_0", &cfg).unwrap();
    assert_eq!(fs::read(&path).unwrap(), gguf);
    assert_eq!(cdn_log(&hub), vec![format!("{get} bytes=100000-")]);
    assert!(!part.exists());
    check_sources(
        &fixtures().join("llama-tiny-a"),
        std::slice::from_ref(&path),
        &[0],
        TOL,
    );
    fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn offline_and_unreachable_hubs_use_the_cache() {
    let hub = hub();
    let cache = scratch_dir("hubfake-offline");
    let mut cfg = config(&hub, &cache);
    cfg.offline = true;
    let e = resolve("tiny/llama-GGUF:Q8_0", &cfg)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not in the Hugging Face cache") && e.contains("HF_HUB_OFFLINE"),
        "{e}"
    );
    assert!(
        hub.log().is_empty(),
        "offline asked the Hub: {:?}",
        hub.log()
    );
    cfg.offline = false;
    let online = resolve("tiny/llama-GGUF:Q8_0", &cfg).unwrap();
    hub.clear_log();
    cfg.offline = true;
    assert_eq!(resolve("tiny/llama-GGUF:Q8_0", &cfg).unwrap(), online);
    assert!(hub.log().is_empty());
    // A Hub that does not answer: the cached copy is used.
    cfg.offline = false;
    cfg.endpoint = "http://127.0.0.1:9".into();
    assert_eq!(resolve("tiny/llama-GGUF:Q8_0", &cfg).unwrap(), online);
    fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn a_safetensors_repository_is_fetched_as_a_folder_and_runs() {
    let hub = hub();
    let cache = scratch_dir("hubfake-st");
    let cfg = config(&hub, &cache);
    let dir = resolve("hf://tiny/llama", &cfg).unwrap();
    assert_eq!(
        dir,
        cache.join("models--tiny--llama/snapshots").join(COMMIT)
    );
    let cached = RepoCache::new(&cache, "tiny/llama").snapshot_files(COMMIT);
    assert_eq!(
        cached,
        vec!["config.json", "generation_config.json", "model.safetensors"]
    );
    check_sources(&fixtures().join("llama-tiny-a"), &[dir], &[0], TOL);
    fs::remove_dir_all(&cache).unwrap();
}

/// A Python with `huggingface_hub`: `$OXINFER_SERVER_VENV` or the server test venv (CI sets it
/// up with huggingface_hub), else the reference venv. `None` (skip) outside CI.
fn python_with_hf_hub() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let venvs = [
        std::env::var_os("OXINFER_SERVER_VENV").map(PathBuf::from),
        Some(home.join(".cache/oxinfer/servervenv")),
        Some(home.join(".cache/oxinfer/refvenv")),
    ];
    for venv in venvs.into_iter().flatten() {
        let py = venv.join("bin/python");
        let ok = Command::new(&py)
            .args(["-c", "import huggingface_hub"])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(py);
        }
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "no Python with huggingface_hub (run scripts/setup-server-test-venv.sh)"
    );
    eprintln!("skipping: no Python with huggingface_hub");
    None
}

fn python(py: &Path, hub: &FakeHub, cache: &Path, code: &str) -> String {
    let out = Command::new(py)
        .args(["-c", code])
        .env("HF_ENDPOINT", &hub.endpoint)
        .env("HF_HUB_CACHE", cache)
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("HF_TOKEN")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn the_cache_is_shared_with_python_huggingface_hub() {
    let Some(py) = python_with_hf_hub() else {
        return;
    };
    let hub = hub();
    let cache = scratch_dir("hubfake-python");
    // Python downloads; we use its files in place, offline.
    let got = python(
        &py,
        &hub,
        &cache,
        "from huggingface_hub import hf_hub_download as d; \
         print(d('tiny/llama-GGUF', 'tiny-Q8_0.gguf'))",
    );
    let mut cfg = config(&hub, &cache);
    cfg.offline = true;
    let ours = resolve("tiny/llama-GGUF:Q8_0", &cfg).unwrap();
    assert_eq!(
        fs::canonicalize(&ours).unwrap(),
        fs::canonicalize(&got).unwrap()
    );
    check_sources(&fixtures().join("llama-tiny-a"), &[ours], &[0], TOL);
    // We download; Python finds our files without the network.
    cfg.offline = false;
    let ours = resolve("tiny/llama", &cfg).unwrap();
    let found = python(
        &py,
        &hub,
        &cache,
        "from huggingface_hub import try_to_load_from_cache as t; \
         print(t('tiny/llama', 'model.safetensors')); print(t('tiny/llama', 'config.json'))",
    );
    let lines: Vec<&str> = found.lines().collect();
    assert_eq!(
        lines,
        vec![
            ours.join("model.safetensors").to_str().unwrap(),
            ours.join("config.json").to_str().unwrap()
        ]
    );
    fs::remove_dir_all(&cache).unwrap();
}
