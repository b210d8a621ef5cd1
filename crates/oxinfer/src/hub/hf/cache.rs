//! The Hugging Face cache layout, as `huggingface_hub` reads and writes it
//! (`file_download.py`, `_create_symlink`, `_cache_commit_hash_for_specific_revision`):
//!
//! ```text
//! <hub>/models--<org>--<repo>/
//!     blobs/<etag>                      the file contents, named by ETag (the LFS SHA-256, or
//!                                       the git blob SHA-1 of a small file)
//!     blobs/<etag>.incomplete           a download in progress (resumed with Range)
//!     snapshots/<commit>/<path>         relative symlinks to ../../blobs/<etag>
//!     refs/<revision>                   the commit a branch or tag pointed at
//! ```

use std::fs;
use std::path::{Path, PathBuf};

use crate::hub::HubError;

/// One repository's folder in the Hugging Face cache.
#[derive(Debug, Clone)]
pub struct RepoCache {
    /// `<hub>/models--<org>--<repo>`.
    pub dir: PathBuf,
}

impl RepoCache {
    /// The folder of `repo` (`org/name`) inside the hub cache folder `hub`.
    pub fn new(hub: &Path, repo: &str) -> Self {
        RepoCache {
            dir: hub.join(repo_folder_name(repo)),
        }
    }

    /// `blobs/<etag>`.
    pub fn blob(&self, etag: &str) -> PathBuf {
        self.dir.join("blobs").join(etag)
    }

    /// `snapshots/<commit>`.
    pub fn snapshot(&self, commit: &str) -> PathBuf {
        self.dir.join("snapshots").join(commit)
    }

    /// The commit `revision` resolves to in the cache: itself when it is a commit hash with a
    /// snapshot, else the contents of `refs/<revision>`.
    pub fn commit_for(&self, revision: &str) -> Option<String> {
        if is_commit_hash(revision) && self.snapshot(revision).is_dir() {
            return Some(revision.to_string());
        }
        let text = fs::read_to_string(self.dir.join("refs").join(revision)).ok()?;
        let commit = text.trim();
        is_commit_hash(commit).then(|| commit.to_string())
    }

    /// Records that `revision` points at `commit` (`refs/<revision>`), unless the revision is
    /// the commit itself.
    pub fn write_ref(&self, revision: &str, commit: &str) -> Result<(), HubError> {
        if revision == commit {
            return Ok(());
        }
        let path = self.dir.join("refs").join(revision);
        write_atomic(&path, commit.as_bytes())
    }

    /// Links `snapshots/<commit>/<file>` to `blobs/<etag>` with a relative symlink (as
    /// `huggingface_hub` does), replacing what was there. Where symlinks cannot be made the
    /// blob is copied, as `huggingface_hub` does on such systems.
    pub fn link(&self, commit: &str, file: &str, etag: &str) -> Result<PathBuf, HubError> {
        let dest = self.snapshot(commit).join(file);
        let parent = dest.parent().unwrap_or(&self.dir).to_path_buf();
        fs::create_dir_all(&parent)
            .map_err(|e| HubError::io(format!("cannot create folder {}", parent.display()), e))?;
        let depth = file.split('/').count() + 1;
        let mut target = PathBuf::new();
        for _ in 0..depth {
            target.push("..");
        }
        target.push("blobs");
        target.push(etag);
        let _ = fs::remove_file(&dest);
        if symlink(&target, &dest).is_err() {
            fs::copy(self.blob(etag), &dest)
                .map_err(|e| HubError::io(format!("cannot write {}", dest.display()), e))?;
        }
        Ok(dest)
    }

    /// Every file of snapshot `commit`, as repository paths with `/`, sorted.
    pub fn snapshot_files(&self, commit: &str) -> Vec<String> {
        let root = self.snapshot(commit);
        let mut out = Vec::new();
        walk(&root, &root, &mut out);
        out.sort();
        out
    }
}

/// `models--org--name`, the cache folder name of `org/name`.
pub fn repo_folder_name(repo: &str) -> String {
    format!("models--{}", repo.replace('/', "--"))
}

/// `org/name` back from `models--org--name`.
pub fn repo_from_folder_name(folder: &str) -> Option<String> {
    let rest = folder.strip_prefix("models--")?;
    let (org, name) = rest.split_once("--")?;
    Some(format!("{org}/{name}"))
}

/// Whether `s` is a full 40-hex git commit hash.
pub fn is_commit_hash(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(root, &path, out);
        } else if path.exists() {
            if let Ok(rel) = path.strip_prefix(root) {
                let parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push(parts.join("/"));
            }
        }
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), HubError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)
        .map_err(|e| HubError::io(format!("cannot create folder {}", dir.display()), e))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    fs::write(&tmp, bytes)
        .map_err(|e| HubError::io(format!("cannot write {}", tmp.display()), e))?;
    fs::rename(&tmp, path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        HubError::io(format!("cannot write {}", path.display()), e)
    })
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

#[cfg(windows)]
fn symlink(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::windows::fs::symlink_file(target, link)
}

#[cfg(not(any(unix, windows)))]
fn symlink(_target: &Path, _link: &Path) -> std::io::Result<()> {
    Err(std::io::Error::other("no symlinks on this platform"))
}
