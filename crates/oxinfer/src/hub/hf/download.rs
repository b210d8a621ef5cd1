//! One blob into the cache: resumed from `blobs/<etag>.incomplete` with HTTP Range, retried
//! after a cut connection, SHA-256 checked against an LFS ETag, renamed into place.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use super::cache::RepoCache;
use super::client::{FileMeta, HfClient};
use crate::hub::{sha256_file, HubError};

/// Attempts per blob: the first request and resumes after cut connections.
const ATTEMPTS: usize = 4;
const BUF_SIZE: usize = 1 << 20;

/// Whether an ETag is an LFS SHA-256 (64 hex digits) that the contents must hash to.
pub fn etag_is_sha256(etag: &str) -> bool {
    etag.len() == 64 && etag.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `blobs/<etag>.incomplete`.
pub fn incomplete_path(blob: &Path) -> PathBuf {
    let mut name = blob.file_name().unwrap_or_default().to_os_string();
    name.push(".incomplete");
    blob.with_file_name(name)
}

/// Bytes still to download for `meta` (0 when the blob is complete).
pub fn remaining(cache: &RepoCache, meta: &FileMeta) -> u64 {
    let blob = cache.blob(&meta.etag);
    if fs::metadata(&blob).is_ok_and(|m| m.len() == meta.size) {
        return 0;
    }
    let have = fs::metadata(incomplete_path(&blob)).map_or(0, |m| m.len());
    meta.size.saturating_sub(have)
}

/// Downloads the blob `meta` describes into `cache` (unless it is there complete), calling
/// `tick` with each chunk's byte count (already-present bytes of a resumed file included) and
/// `note` with remarks. The `.incomplete` file is locked while written, so two processes never
/// write it at once. On a hash mismatch the partial file is deleted.
pub fn download_blob(
    client: &HfClient,
    repo: &str,
    cache: &RepoCache,
    meta: &FileMeta,
    tick: &(dyn Fn(u64) + Sync),
    note: &(dyn Fn(String) + Sync),
) -> Result<PathBuf, HubError> {
    let blob = cache.blob(&meta.etag);
    if fs::metadata(&blob).is_ok_and(|m| m.len() == meta.size) {
        tick(meta.size);
        return Ok(blob);
    }
    let part = incomplete_path(&blob);
    let dir = part.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)
        .map_err(|e| HubError::io(format!("cannot create folder {}", dir.display()), e))?;
    let io_err = |what: &str, e: io::Error| HubError::io(format!("{what} {}", part.display()), e);
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&part)
        .map_err(|e| io_err("cannot open", e))?;
    file.lock().map_err(|e| io_err("cannot lock", e))?;
    // Another process may have finished the blob while we waited for the lock.
    if fs::metadata(&blob).is_ok_and(|m| m.len() == meta.size) {
        let _ = fs::remove_file(&part);
        tick(meta.size);
        return Ok(blob);
    }
    let mut have = file.metadata().map_err(|e| io_err("cannot read", e))?.len();
    if have > meta.size {
        file.set_len(0).map_err(|e| io_err("cannot truncate", e))?;
        have = 0;
    }
    tick(have);
    let mut last_error = None;
    for attempt in 0..ATTEMPTS {
        if have == meta.size {
            break;
        }
        if attempt > 0 {
            note(format!(
                "{}: connection lost at {have} of {} bytes; resuming",
                meta.location, meta.size
            ));
        }
        match client.open_from(repo, &meta.location, have)? {
            None => {
                // 416: our partial file does not fit the server's; start over.
                file.set_len(0).map_err(|e| io_err("cannot truncate", e))?;
                have = 0;
            }
            Some((mut reader, start)) => {
                if start != have {
                    file.set_len(0).map_err(|e| io_err("cannot truncate", e))?;
                    have = 0;
                }
                match copy(&mut *reader, &mut file, meta.size - have, tick) {
                    Ok(n) => have += n,
                    Err(CopyFail::Read(n, e)) => {
                        have += n;
                        last_error = Some(e);
                    }
                    Err(CopyFail::Write(e)) => return Err(io_err("cannot write", e)),
                }
            }
        }
    }
    if have != meta.size {
        let reason = last_error.map_or("the transfer ended early".to_string(), |e| e.to_string());
        return Err(HubError::Http {
            url: meta.location.clone(),
            reason: format!(
                "{reason} after {ATTEMPTS} attempts ({have} of {} bytes kept in {} for the next run)",
                meta.size,
                part.display()
            ),
        });
    }
    file.sync_all().map_err(|e| io_err("cannot sync", e))?;
    if etag_is_sha256(&meta.etag) {
        let actual = sha256_file(&part)?;
        if !actual.eq_ignore_ascii_case(&meta.etag) {
            let _ = fs::remove_file(&part);
            return Err(HubError::Mismatch {
                what: format!("download of {}", meta.location),
                kind: "sha256",
                expected: meta.etag.clone(),
                actual,
            });
        }
    }
    fs::rename(&part, &blob).map_err(|e| io_err("cannot rename", e))?;
    Ok(blob)
}

enum CopyFail {
    /// Reading failed after this many bytes were written.
    Read(u64, io::Error),
    Write(io::Error),
}

/// Copies at most `limit` bytes of `reader` to `file`.
fn copy(
    reader: &mut dyn Read,
    file: &mut File,
    limit: u64,
    tick: &(dyn Fn(u64) + Sync),
) -> Result<u64, CopyFail> {
    let mut buf = vec![0u8; BUF_SIZE];
    let mut done = 0u64;
    while done < limit {
        let want = ((limit - done) as usize).min(buf.len());
        let n = match reader.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CopyFail::Read(done, e)),
        };
        file.write_all(&buf[..n]).map_err(CopyFail::Write)?;
        done += n as u64;
        tick(n as u64);
    }
    Ok(done)
}

/// Free bytes on the file system holding `dir` (or its nearest existing ancestor); `None`
/// where that cannot be asked.
pub fn free_space(dir: &Path) -> Option<u64> {
    let mut probe = dir;
    while !probe.exists() {
        probe = probe.parent()?;
    }
    free_space_at(probe)
}

#[cfg(unix)]
fn free_space_at(dir: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

#[cfg(not(unix))]
fn free_space_at(_dir: &Path) -> Option<u64> {
    None
}
