//! Models from the Hugging Face Hub, kept in the standard Hugging Face cache so that files
//! fetched by Python tools are used in place and ours are found by them.
//!
//! A small client on `ureq` (already a dependency) rather than the `hf-hub` crate: `hf-hub`'s
//! blocking API brings a second HTTP stack (ureq 2) and does not check the SHA-256 of a
//! download, and its resume support is limited to its async (tokio/reqwest) API. The request
//! sequence is documented in [`client`].

pub mod cache;
#[cfg(feature = "download")]
pub mod client;
pub mod config;
#[cfg(feature = "download")]
pub mod download;
pub mod select;

use std::path::{Path, PathBuf};
#[cfg(feature = "download")]
use std::sync::atomic::{AtomicUsize, Ordering};
#[cfg(feature = "download")]
use std::sync::mpsc;

use cache::RepoCache;
#[cfg(feature = "download")]
use client::{FileMeta, HfClient};
use config::HfConfig;
use select::{select, Selection};

use super::reference::HfRef;
use super::{HubError, Progress};

/// Downloads running at once for a model of several files (shards, split GGUF parts).
#[cfg(feature = "download")]
const PARALLEL_DOWNLOADS: usize = 4;

/// The local path of the model `r` names: a GGUF file, or the snapshot folder of a safetensors
/// model. Online, the Hub is asked for the revision's commit and files and what is missing is
/// downloaded into the cache; offline (`HF_HUB_OFFLINE=1`), or when the Hub cannot be reached,
/// the cache alone answers.
pub fn resolve(
    r: &HfRef,
    cfg: &HfConfig,
    progress: &mut dyn Progress,
) -> Result<PathBuf, HubError> {
    let cache = RepoCache::new(&cfg.hub_cache, &r.repo);
    if cfg.offline {
        return from_cache(r, &cache, "HF_HUB_OFFLINE is set, so the Hub was not asked");
    }
    #[cfg(not(feature = "download"))]
    {
        let _ = progress;
        from_cache(
            r,
            &cache,
            "this build has no HTTP client (built without the `download` feature), so the Hub \
             was not asked",
        )
    }
    #[cfg(feature = "download")]
    resolve_online(r, cfg, &cache, progress)
}

/// [`resolve`] when the Hub may be asked.
#[cfg(feature = "download")]
fn resolve_online(
    r: &HfRef,
    cfg: &HfConfig,
    cache: &RepoCache,
    progress: &mut dyn Progress,
) -> Result<PathBuf, HubError> {
    let client = HfClient::new(cfg.clone());
    let info = match client.repo_info(&r.repo, &r.revision) {
        Ok(info) => info,
        Err(e @ HubError::Http { .. }) => {
            let reason = format!("the Hub could not be reached ({e})");
            return match from_cache(r, cache, &reason) {
                Ok(path) => {
                    progress.note(&format!("{reason}; using the cached {r}"));
                    Ok(path)
                }
                Err(cache_err) => Err(cache_err),
            };
        }
        Err(e) => return Err(e),
    };
    let selection = select(&info.files, r)?;
    fetch_selection(&client, r, &info.commit, &selection, cache, progress)?;
    cache.write_ref(&r.revision, &info.commit)?;
    Ok(entry_path(&cache.snapshot(&info.commit), &selection))
}

/// The multimodal projector (`mmproj*.gguf`) beside the GGUF file `model` that `r` resolved
/// to ([`select::projector_for`] picks it), fetched into the same snapshot when missing; `None`
/// when `model` is not a file of `r`'s snapshot (a safetensors folder) or its folder holds no
/// projector. Online as [`resolve`]; offline, or when the Hub cannot be reached, only a
/// projector already in the cache is found.
pub fn resolve_projector(
    r: &HfRef,
    cfg: &HfConfig,
    model: &Path,
    progress: &mut dyn Progress,
) -> Result<Option<PathBuf>, HubError> {
    let cache = RepoCache::new(&cfg.hub_cache, &r.repo);
    #[cfg(feature = "download")]
    if !cfg.offline {
        let client = HfClient::new(cfg.clone());
        match client.repo_info(&r.repo, &r.revision) {
            Ok(info) => {
                let snapshot = cache.snapshot(&info.commit);
                let Some(file) = entry_in(&snapshot, model)
                    .and_then(|entry| select::projector_for(&info.files, &entry))
                else {
                    return Ok(None);
                };
                let one = Selection {
                    files: vec![file.clone()],
                    entry: Some(file.clone()),
                };
                fetch_selection(&client, r, &info.commit, &one, &cache, progress)?;
                return Ok(Some(snapshot.join(file)));
            }
            Err(HubError::Http { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    #[cfg(not(feature = "download"))]
    let _ = progress;
    let Some(commit) = cache.commit_for(&r.revision) else {
        return Ok(None);
    };
    let snapshot = cache.snapshot(&commit);
    let files = cache.snapshot_files(&commit);
    Ok(entry_in(&snapshot, model)
        .and_then(|entry| select::projector_for(&files, &entry))
        .map(|f| snapshot.join(f)))
}

/// `model`'s path inside `snapshot` with `/` separators (a repository path), if it is there.
fn entry_in(snapshot: &Path, model: &Path) -> Option<String> {
    let rel = model.strip_prefix(snapshot).ok()?;
    let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
    Some(parts?.join("/"))
}

fn entry_path(snapshot: &Path, selection: &Selection) -> PathBuf {
    match &selection.entry {
        Some(f) => snapshot.join(f),
        None => snapshot.to_path_buf(),
    }
}

/// `r` from the cache alone; `reason` says why the Hub is not asked.
pub fn from_cache(r: &HfRef, cache: &RepoCache, reason: &str) -> Result<PathBuf, HubError> {
    let not_cached = |why: &str| HubError::NotCached {
        reference: r.to_string(),
        cache: cache.dir.clone(),
        reason: format!("{reason}{why}"),
    };
    let commit = cache
        .commit_for(&r.revision)
        .ok_or_else(|| not_cached(""))?;
    let files = cache.snapshot_files(&commit);
    let selection = select(&files, r).map_err(|e| not_cached(&format!(" (in the cache: {e})")))?;
    Ok(entry_path(&cache.snapshot(&commit), &selection))
}

/// Fetches every file of `selection` at `commit` that the snapshot lacks: metadata first (so the
/// disk-space check knows the total), then up to [`PARALLEL_DOWNLOADS`] downloads at once, one
/// progress bar for all.
#[cfg(feature = "download")]
fn fetch_selection(
    client: &HfClient,
    r: &HfRef,
    commit: &str,
    selection: &Selection,
    cache: &RepoCache,
    progress: &mut dyn Progress,
) -> Result<(), HubError> {
    let snapshot = cache.snapshot(commit);
    let mut wanted: Vec<(String, FileMeta)> = Vec::new();
    for file in &selection.files {
        if snapshot.join(file).is_file() {
            continue;
        }
        let meta = client.file_meta(&r.repo, commit, file)?;
        wanted.push((file.clone(), meta));
    }
    if wanted.is_empty() {
        return Ok(());
    }
    let total: u64 = wanted.iter().map(|(_, m)| m.size).sum();
    let needed: u64 = wanted
        .iter()
        .map(|(_, m)| download::remaining(cache, m))
        .sum();
    let blobs = cache.dir.join("blobs");
    if let Some(available) = download::free_space(&blobs) {
        if available < needed {
            return Err(HubError::DiskFull {
                dir: blobs,
                needed,
                available,
            });
        }
    }
    let label = match wanted.as_slice() {
        [(f, _)] => format!("downloading {f} from {}", r.repo),
        _ => format!("downloading {} files from {}", wanted.len(), r.repo),
    };
    progress.start(&label, Some(total));
    let result = download_parallel(client, r, &wanted, cache, progress);
    progress.finish();
    result?;
    for (file, meta) in &wanted {
        cache.link(commit, file, &meta.etag)?;
    }
    Ok(())
}

#[cfg(feature = "download")]
enum Event {
    Bytes(u64),
    Note(String),
}

/// Downloads `wanted` on up to [`PARALLEL_DOWNLOADS`] threads, forwarding their progress to
/// `progress` on this thread. Returns the first error.
#[cfg(feature = "download")]
fn download_parallel(
    client: &HfClient,
    r: &HfRef,
    wanted: &[(String, FileMeta)],
    cache: &RepoCache,
    progress: &mut dyn Progress,
) -> Result<(), HubError> {
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<Event>();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..PARALLEL_DOWNLOADS.min(wanted.len()))
            .map(|_| {
                let tx = tx.clone();
                let next = &next;
                s.spawn(move || -> Result<(), HubError> {
                    let tick = |n: u64| {
                        let _ = tx.send(Event::Bytes(n));
                    };
                    let note = |m: String| {
                        let _ = tx.send(Event::Note(m));
                    };
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some((_, meta)) = wanted.get(i) else {
                            return Ok(());
                        };
                        download::download_blob(client, &r.repo, cache, meta, &tick, &note)?;
                    }
                })
            })
            .collect();
        drop(tx);
        for event in rx {
            match event {
                Event::Bytes(n) => progress.advance(n),
                Event::Note(m) => progress.note(&m),
            }
        }
        let mut first_err = None;
        for w in workers {
            let result = w.join().unwrap_or_else(|_| {
                Err(HubError::Http {
                    url: r.repo.clone(),
                    reason: "a download thread panicked".into(),
                })
            });
            if let (Err(e), None) = (result, &first_err) {
                first_err = Some(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    })
}
