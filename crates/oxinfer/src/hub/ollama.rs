//! Models pulled by Ollama, read in place from its store:
//!
//! ```text
//! $OLLAMA_MODELS (default ~/.ollama/models)/
//!     manifests/registry.ollama.ai/library/<name>/<tag>    JSON: layers[] {mediaType, digest, size}
//!     blobs/sha256-<hex>                                   the layers' contents
//! ```
//!
//! The layer of media type `application/vnd.ollama.image.model` is a GGUF file and is loaded
//! directly. The template layer (a Go template) is not used: the GGUF's own chat template is.

use std::fs;
use std::path::{Path, PathBuf};

use super::reference::OllamaRef;
use super::HubError;

const MODEL_LAYER: &str = "application/vnd.ollama.image.model";
const DEFAULT_REGISTRY: &str = "registry.ollama.ai";

/// Ollama's model store: `$OLLAMA_MODELS`, else `~/.ollama/models`.
pub fn store_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("OLLAMA_MODELS").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME")
        .or_else(|| std::env::var_os("USERPROFILE"))
        .map(PathBuf::from)
        .unwrap_or_default();
    home.join(".ollama").join("models")
}

/// The manifest path of `r`: `name` → `registry.ollama.ai/library/name`, `ns/name` →
/// `registry.ollama.ai/ns/name`, `host/ns/name` as given.
pub fn manifest_path(store: &Path, r: &OllamaRef) -> PathBuf {
    let parts: Vec<&str> = r.name.split('/').collect();
    let mut path = store.join("manifests");
    match parts.as_slice() {
        [name] => path.extend([DEFAULT_REGISTRY, "library", name]),
        [ns, name] => path.extend([DEFAULT_REGISTRY, ns, name]),
        _ => path.extend(&parts),
    }
    path.join(&r.tag)
}

/// The model layer of a manifest: (blob path, size in bytes).
pub fn model_blob(store: &Path, manifest: &Path) -> Result<(PathBuf, u64), String> {
    let text = fs::read_to_string(manifest)
        .map_err(|e| format!("cannot read manifest {}: {e}", manifest.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("manifest {} is not JSON: {e}", manifest.display()))?;
    let layers = json["layers"].as_array().cloned().unwrap_or_default();
    let layer = layers
        .iter()
        .find(|l| l["mediaType"].as_str() == Some(MODEL_LAYER))
        .ok_or_else(|| format!("manifest {} has no model layer", manifest.display()))?;
    let digest = layer["digest"].as_str().unwrap_or_default();
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| format!("model layer digest {digest:?} is not sha256:<64 hex>"))?;
    let blob = store.join("blobs").join(format!("sha256-{hex}"));
    let size = layer["size"].as_u64().unwrap_or(0);
    Ok((blob, size))
}

/// The GGUF file of `r` in Ollama's store at `store`.
pub fn resolve_in(store: &Path, r: &OllamaRef) -> Result<PathBuf, HubError> {
    let err = |reason: String| HubError::Ollama {
        reference: r.to_string(),
        store: store.to_path_buf(),
        reason,
    };
    let manifest = manifest_path(store, r);
    if !manifest.is_file() {
        return Err(err(format!(
            "not pulled (no manifest at {}); run `ollama pull {}:{}` first",
            manifest.display(),
            r.name,
            r.tag
        )));
    }
    let (blob, size) = model_blob(store, &manifest).map_err(err)?;
    match fs::metadata(&blob) {
        Ok(m) if size == 0 || m.len() == size => Ok(blob),
        Ok(m) => Err(err(format!(
            "model blob {} has {} bytes, the manifest says {size}",
            blob.display(),
            m.len()
        ))),
        Err(_) => Err(err(format!("model blob {} is missing", blob.display()))),
    }
}

/// Every model in the store: (`name:tag` as Ollama shows it, manifest path).
pub fn list_manifests(store: &Path) -> Vec<(String, PathBuf)> {
    let root = store.join("manifests");
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let Ok(rel) = path.strip_prefix(&root) else {
                continue;
            };
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let name = match parts.as_slice() {
                [reg, lib, name, tag] if reg == DEFAULT_REGISTRY && lib == "library" => {
                    format!("{name}:{tag}")
                }
                [reg, ns, name, tag] if reg == DEFAULT_REGISTRY => format!("{ns}/{name}:{tag}"),
                _ => {
                    let (tag, rest) = parts.split_last().unwrap_or((&parts[0], &[]));
                    format!("{}:{tag}", rest.join("/"))
                }
            };
            out.push((name, path));
        }
    }
    out.sort();
    out
}

/// The quant (`file_type`, e.g. `Q4_K_M`) in a manifest's config blob, when it says.
pub fn file_type(store: &Path, manifest: &Path) -> Option<String> {
    let json: serde_json::Value = serde_json::from_str(&fs::read_to_string(manifest).ok()?).ok()?;
    let hex = json["config"]["digest"].as_str()?.strip_prefix("sha256:")?;
    if hex.contains(['/', '\\', '.']) {
        return None;
    }
    let config = fs::read_to_string(store.join("blobs").join(format!("sha256-{hex}"))).ok()?;
    let config: serde_json::Value = serde_json::from_str(&config).ok()?;
    config["file_type"].as_str().map(str::to_string)
}
