//! The hash record kept beside each cached model file, so that a cached file is trusted by its
//! verified SHA-256, not by its size alone, without hashing it on every start.
//!
//! `<file>.sha256` holds one line: `<sha256 hex> <size in bytes> <mtime in ns since the epoch>`,
//! written when the file was verified (right after a download, or the first time a file that
//! has no record is used). A later use trusts the file when the record names the expected hash
//! and the file's current size and modification time; otherwise the file is hashed again (once)
//! and the record rewritten if it matches.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use super::fetch::sha256_file;
use super::HubError;

/// The record's path for `file`: `<file>.sha256`.
pub fn record_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".sha256");
    PathBuf::from(name)
}

/// What identifies the file's current contents cheaply: size and modification time.
fn stamp(file: &Path) -> Option<(u64, u128)> {
    let meta = fs::metadata(file).ok()?;
    let mtime = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
    Some((meta.len(), mtime.as_nanos()))
}

/// Whether the record of `file` says it was verified to hash to `sha256` and the file has not
/// changed since (same size and modification time).
fn recorded(file: &Path, sha256: &str) -> bool {
    let Ok(text) = fs::read_to_string(record_path(file)) else {
        return false;
    };
    let mut fields = text.split_whitespace();
    let (Some(hash), Some(size), Some(mtime)) = (fields.next(), fields.next(), fields.next())
    else {
        return false;
    };
    let now = stamp(file);
    hash.eq_ignore_ascii_case(sha256)
        && now.is_some_and(|(s, m)| size.parse() == Ok(s) && mtime.parse() == Ok(m))
}

/// Writes the record of `file`, verified to hash to `sha256` (best effort: without a record the
/// file is only hashed again next time).
pub fn write_record(file: &Path, sha256: &str) {
    if let Some((size, mtime)) = stamp(file) {
        let line = format!("{} {size} {mtime}\n", sha256.to_ascii_lowercase());
        let _ = fs::write(record_path(file), line);
    }
}

/// Checks a cached `file` against `sha256`: free when its record is current, one hash of the
/// file otherwise (the record is then written). A mismatch is an error naming the file and how
/// to fetch it again.
pub fn verify_cached(file: &Path, sha256: &str) -> Result<(), HubError> {
    if recorded(file, sha256) {
        return Ok(());
    }
    let actual = sha256_file(file)?;
    if !actual.eq_ignore_ascii_case(sha256) {
        return Err(HubError::CachedMismatch {
            path: file.to_path_buf(),
            expected: sha256.to_ascii_lowercase(),
            actual,
        });
    }
    write_record(file, sha256);
    Ok(())
}
