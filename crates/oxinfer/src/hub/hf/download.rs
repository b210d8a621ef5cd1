//! One blob into the cache: resumed from `blobs/<etag>.incomplete` with HTTP Range, retried
//! while bytes keep arriving, SHA-256 checked against an LFS ETag, renamed into place.
//!
//! What each answer does to the `.incomplete` file (the bytes in it are never mixed with bytes
//! from another offset):
//!
//! - 206 from the offset asked for: appended; a cut or stalled body (no bytes for
//!   `HF_HUB_DOWNLOAD_TIMEOUT`) is resumed from where it stopped.
//! - 200 to a Range request (the server ignored it): the file is emptied first.
//! - 416 (the offset is at or past the end of the server's copy): when the server's size
//!   equals what we hold and the contents hash to the LFS ETag, the file is complete and kept;
//!   otherwise it is emptied and the download starts over.
//! - A leftover from an earlier run that does not hash to the ETag once complete: emptied and
//!   downloaded once more from the first byte; a fresh download that does not: deleted, error.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use super::cache::RepoCache;
use super::client::{FileMeta, HfClient, Opened};
use crate::hub::{sha256_file, HubError};

/// Requests in a row that may bring no new byte before a download gives up (a request that
/// brings bytes starts the count again, as `huggingface_hub`'s `http_get` does).
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

/// The `.incomplete` file of one blob, open for appending, and how many bytes it holds.
struct Partial {
    path: PathBuf,
    file: File,
    have: u64,
}

impl Partial {
    fn err(&self, what: &str, e: io::Error) -> HubError {
        HubError::io(format!("{what} {}", self.path.display()), e)
    }

    /// Empties the file (its bytes cannot be continued).
    fn restart(&mut self) -> Result<(), HubError> {
        self.file
            .set_len(0)
            .map_err(|e| self.err("cannot truncate", e))?;
        self.have = 0;
        Ok(())
    }

    /// `Ok(true)` when the contents hash to `meta`'s ETag (or the ETag is no SHA-256, so
    /// there is nothing to check), `Ok(false)` when they do not (`actual` gets the hash).
    fn hash_matches(&self, meta: &FileMeta, actual: &mut String) -> Result<bool, HubError> {
        if !etag_is_sha256(&meta.etag) {
            return Ok(true);
        }
        self.file
            .sync_all()
            .map_err(|e| self.err("cannot sync", e))?;
        *actual = sha256_file(&self.path)?;
        Ok(actual.eq_ignore_ascii_case(&meta.etag))
    }
}

/// Downloads the blob `meta` describes into `cache` (unless it is there complete), calling
/// `tick` with each chunk's byte count (already-present bytes of a resumed file included) and
/// `note` with remarks. The `.incomplete` file is locked while written, so two processes never
/// write it at once. See the module doc for what each server answer does.
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
    let path = incomplete_path(&blob);
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)
        .map_err(|e| HubError::io(format!("cannot create folder {}", dir.display()), e))?;
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| HubError::io(format!("cannot open {}", path.display()), e))?;
    let mut part = Partial {
        path,
        file,
        have: 0,
    };
    part.file.lock().map_err(|e| part.err("cannot lock", e))?;
    // Another process may have finished the blob while we waited for the lock.
    if fs::metadata(&blob).is_ok_and(|m| m.len() == meta.size) {
        let _ = fs::remove_file(&part.path);
        tick(meta.size);
        return Ok(blob);
    }
    part.have = part
        .file
        .metadata()
        .map_err(|e| part.err("cannot read", e))?
        .len();
    if part.have > meta.size {
        part.restart()?;
    }
    tick(part.have);
    // Bytes from an earlier run are suspect when the whole does not hash right: one fresh try.
    let mut leftover = part.have > 0;
    fetch_into(client, repo, meta, &mut part, tick, note)?;
    let mut actual = String::new();
    while !part.hash_matches(meta, &mut actual)? {
        if !leftover {
            let _ = fs::remove_file(&part.path);
            return Err(HubError::Mismatch {
                what: format!("download of {}", meta.location),
                kind: "sha256",
                expected: meta.etag.clone(),
                actual,
            });
        }
        note(format!(
            "{}: the bytes kept from an earlier download do not hash to {}; downloading again",
            meta.location, meta.etag
        ));
        leftover = false;
        part.restart()?;
        fetch_into(client, repo, meta, &mut part, tick, note)?;
    }
    fs::rename(&part.path, &blob).map_err(|e| part.err("cannot rename", e))?;
    Ok(blob)
}

/// Requests `meta.location` from `part.have` on until `part` holds `meta.size` bytes, or the
/// server says (416) that its copy is exactly the `part.have` bytes held, or [`ATTEMPTS`]
/// requests in a row bring nothing new. The caller checks the hash.
fn fetch_into(
    client: &HfClient,
    repo: &str,
    meta: &FileMeta,
    part: &mut Partial,
    tick: &(dyn Fn(u64) + Sync),
    note: &(dyn Fn(String) + Sync),
) -> Result<(), HubError> {
    let mut idle = 0;
    let mut last_error = None;
    while part.have != meta.size {
        if idle == ATTEMPTS {
            let reason = last_error
                .map_or("the transfer ended early".to_string(), |e: io::Error| {
                    e.to_string()
                });
            return Err(HubError::Http {
                url: meta.location.clone(),
                reason: format!(
                    "{reason}; {ATTEMPTS} requests in a row brought no new bytes ({} of {} bytes \
                     kept in {} for the next run)",
                    part.have,
                    meta.size,
                    part.path.display()
                ),
            });
        }
        let received = match client.open_from(repo, &meta.location, part.have)? {
            Opened::NotSatisfiable { size } => {
                if size == Some(part.have) && part.have > 0 {
                    // The server's copy is what we hold (the Hub's size was stale): the hash
                    // decides.
                    note(format!(
                        "{}: the server holds {} bytes, not the {} announced; checking the {} \
                         bytes kept",
                        meta.location, part.have, meta.size, part.have
                    ));
                    return Ok(());
                }
                note(format!(
                    "{}: the server cannot resume at byte {} (HTTP 416, its size: {}); starting \
                     over",
                    meta.location,
                    part.have,
                    size.map_or("not given".to_string(), |s| s.to_string())
                ));
                part.restart()?;
                idle += 1;
                continue;
            }
            Opened::Body { mut reader, start } => {
                if start != part.have {
                    part.restart()?;
                }
                let limit = meta.size - part.have;
                let n = match copy(&mut *reader, &mut part.file, limit, tick) {
                    Ok(n) => n,
                    Err(CopyFail::Read(n, e)) => {
                        last_error = Some(e);
                        n
                    }
                    Err(CopyFail::Write(e)) => return Err(part.err("cannot write", e)),
                };
                part.have += n;
                n
            }
        };
        idle = if received > 0 { 0 } else { idle + 1 };
        if part.have != meta.size && idle < ATTEMPTS {
            note(format!(
                "{}: connection lost at {} of {} bytes; resuming",
                meta.location, part.have, meta.size
            ));
        }
    }
    Ok(())
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
