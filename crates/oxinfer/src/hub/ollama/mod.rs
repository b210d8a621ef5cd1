//! Models pulled by Ollama, read in place from its store:
//!
//! ```text
//! $OLLAMA_MODELS (default ~/.ollama/models)/
//!     manifests/registry.ollama.ai/library/<name>/<tag>    JSON: layers[] {mediaType, digest, size}
//!     blobs/sha256-<hex>                                   the layers' contents
//! ```
//!
//! The layer of media type `application/vnd.ollama.image.model` is a GGUF file and is loaded
//! directly. The others are read by [`read_layers`]: the chat template (a Go template, translated
//! to Jinja by [`template`] for a GGUF that has no template of its own), the default system
//! prompt, and the generation parameters ([`OllamaParams`]).

mod go_template;
mod params;
pub mod template;

use std::fs;
use std::path::{Path, PathBuf};

use super::reference::OllamaRef;
use super::HubError;

pub use params::OllamaParams;

const MODEL_LAYER: &str = "application/vnd.ollama.image.model";
const TEMPLATE_LAYER: &str = "application/vnd.ollama.image.template";
const SYSTEM_LAYER: &str = "application/vnd.ollama.image.system";
const PARAMS_LAYER: &str = "application/vnd.ollama.image.params";
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

/// A manifest's JSON.
fn read_manifest(manifest: &Path) -> Result<serde_json::Value, String> {
    let text = fs::read_to_string(manifest)
        .map_err(|e| format!("cannot read manifest {}: {e}", manifest.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| format!("manifest {} is not JSON: {e}", manifest.display()))
}

/// The blob of the manifest's layer of media type `media`: (path, size in bytes from the
/// manifest); `None` when the manifest has no such layer.
fn layer_blob(
    store: &Path,
    json: &serde_json::Value,
    media: &str,
) -> Result<Option<(PathBuf, u64)>, String> {
    let layers = json["layers"].as_array().cloned().unwrap_or_default();
    let Some(layer) = layers
        .iter()
        .find(|l| l["mediaType"].as_str() == Some(media))
    else {
        return Ok(None);
    };
    let digest = layer["digest"].as_str().unwrap_or_default();
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| format!("{media} layer digest {digest:?} is not sha256:<64 hex>"))?;
    let blob = store.join("blobs").join(format!("sha256-{hex}"));
    let size = layer["size"].as_u64().unwrap_or(0);
    Ok(Some((blob, size)))
}

/// The model layer of a manifest: (blob path, size in bytes).
pub fn model_blob(store: &Path, manifest: &Path) -> Result<(PathBuf, u64), String> {
    let json = read_manifest(manifest)?;
    layer_blob(store, &json, MODEL_LAYER)?
        .ok_or_else(|| format!("manifest {} has no model layer", manifest.display()))
}

/// What an Ollama model's manifest adds to its GGUF: its other layers, read as text.
#[derive(Clone, Debug, Default)]
pub struct OllamaLayers {
    /// The chat template layer: a Go template ([`template::to_jinja`] translates it).
    pub template: Option<String>,
    /// The system layer: the system prompt used when a conversation has none.
    pub system: Option<String>,
    /// The params layer.
    pub params: OllamaParams,
}

impl OllamaLayers {
    /// The chat template as Jinja for the engine ([`template::to_jinja`], the system layer as
    /// the default system turn); `None` when there is no template layer, an error naming what
    /// the translation does not support.
    pub fn chat_template_jinja(&self) -> Option<Result<String, String>> {
        let go = self.template.as_deref()?;
        Some(template::to_jinja(go, self.system.as_deref()))
    }
}

/// The template, system and params layers of `r`'s manifest in Ollama's store at `store`
/// (each absent when the manifest has none).
pub fn read_layers(store: &Path, r: &OllamaRef) -> Result<OllamaLayers, HubError> {
    let err = |reason: String| HubError::Ollama {
        reference: r.to_string(),
        store: store.to_path_buf(),
        reason,
    };
    let json = read_manifest(&manifest_path(store, r)).map_err(err)?;
    let text = |media: &str| -> Result<Option<String>, HubError> {
        match layer_blob(store, &json, media).map_err(err)? {
            None => Ok(None),
            Some((blob, _)) => fs::read_to_string(&blob).map(Some).map_err(|e| {
                err(format!(
                    "cannot read the {media} layer {}: {e}",
                    blob.display()
                ))
            }),
        }
    };
    let params = match text(PARAMS_LAYER)? {
        None => OllamaParams::default(),
        Some(json) => OllamaParams::parse(&json).map_err(|e| err(format!("params layer: {e}")))?,
    };
    Ok(OllamaLayers {
        template: text(TEMPLATE_LAYER)?,
        system: text(SYSTEM_LAYER)?,
        params,
    })
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
