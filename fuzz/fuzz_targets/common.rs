//! Helpers shared by the fuzz targets: fixture paths and a per-process scratch folder for the
//! loaders that read files.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The repository's `tests/fixtures` folder.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// A scratch folder for this process (in /dev/shm when there is one: no disk writes).
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("oxinfer-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch folder");
        dir
    })
}

/// Writes `bytes` to `name` in the scratch folder and returns its path.
pub fn write_scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let path = scratch().join(name);
    std::fs::write(&path, bytes).expect("scratch write");
    path
}

/// Splits fuzz input at the first NUL byte (two independent inputs from one).
pub fn split(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}

/// Schema compilation limits for the fuzz targets: an eighth of the default work units, the
/// default deadline. Under the fuzzer's sanitizer and coverage a unit costs ~5× what it does in
/// a release build, so the default budget could legitimately run past libFuzzer's 1 s timeout;
/// with an eighth of it, a timeout means work the budget does not charge.
pub fn schema_limits() -> oxinfer::engine::grammar::CompileLimits {
    oxinfer::engine::grammar::CompileLimits {
        work: oxinfer::engine::grammar::DEFAULT_WORK / 8,
        time: oxinfer::engine::grammar::DEFAULT_TIME,
    }
}
