//! llama.cpp's multimodal projector files (`mmproj-*.gguf`, `general.architecture = clip`): the
//! media towers of a GGUF model, read into the same towers a safetensors checkpoint builds.
//!
//! llama.cpp's converter renames every tower tensor, reshapes a few and keeps part of the
//! towers' configuration as `clip.*` keys. [`Mmproj::open`] undoes that per projector type: the
//! tensors under their transformers names (the file's bytes, or an owned copy where the
//! converter permuted or transformed them) and a `config.json`-shaped document for the tower
//! loaders, with what the file does not store taken from tensor shapes, from the text model
//! (token ids by their text, the hidden size) and from the released checkpoints' defaults.
//! Processor settings (`preprocessor_config.json`, `processor_config.json`) are read from the
//! mmproj file's folder when present there, as from a checkpoint's folder; else the family's
//! defaults apply.

use crate::config::{Arch, ConfigSource};
use crate::error::LoadError;
use crate::gguf::GgufFile;
use crate::loader::{TensorStore, TensorView};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What the towers need from the text model an mmproj file is paired with.
pub struct TextSide<'a> {
    /// The text model's architecture.
    pub arch: Arch,
    /// The id of a token given by its text (`<|image|>`), from the text model's vocabulary.
    pub token_id: &'a dyn Fn(&str) -> Option<u32>,
    /// The text model's hidden size (the width the towers project into).
    pub hidden: usize,
    /// The text model's padding token id, when its file names one.
    pub pad_id: Option<u32>,
}

impl TextSide<'_> {
    /// The id of `text`, or an error naming the mmproj file and the missing token.
    pub fn require(&self, path: &Path, text: &str) -> Result<u32, LoadError> {
        (self.token_id)(text).ok_or_else(|| {
            LoadError::field(
                path,
                format!("the text model's vocabulary has no '{text}' token for its media inputs"),
            )
        })
    }
}

/// One family's reading of an mmproj file: a `config.json`-shaped document and the tensors
/// under their transformers names.
pub struct Translated {
    pub config: Value,
    pub tensors: Vec<(String, TensorView)>,
}

/// An open mmproj file, seen as a transformers checkpoint's towers.
pub struct Mmproj {
    path: PathBuf,
    /// The projector type(s) of the file, for messages (`gemma4v+gemma4a`).
    projector: String,
    config: Value,
    tensors: HashMap<String, TensorView>,
}

/// Whether models of `arch` take towers from projector files (the families [`Mmproj::open`]
/// pairs projectors with): the question to ask before fetching a repository's projector.
pub fn takes_projector(arch: Arch) -> bool {
    matches!(arch, Arch::Gemma4 | Arch::Qwen35 | Arch::Qwen35Moe)
}

impl Mmproj {
    /// Opens `path` and translates it for the text model described by `text`. Errors name the
    /// file: not an mmproj (`general.architecture` other than `clip`), a projector type no
    /// tower here implements, a tensor missing or of an unexpected shape.
    pub fn open(path: &Path, text: &TextSide<'_>) -> Result<Mmproj, LoadError> {
        let g = GgufFile::open(path)?;
        let arch = g.get_str("general.architecture")?.unwrap_or("");
        if arch != "clip" {
            return Err(LoadError::malformed(
                path,
                format!(
                    "is not a multimodal projector file (general.architecture '{arch}', an \
                     mmproj file says 'clip')"
                ),
            ));
        }
        let vision = match g.get_str("clip.vision.projector_type")? {
            Some(t) => Some(t),
            None => g.get_str("clip.projector_type")?,
        }
        .filter(|_| g.get_bool("clip.has_vision_encoder").ok().flatten() != Some(false));
        let audio = g
            .get_str("clip.audio.projector_type")?
            .filter(|_| g.get_bool("clip.has_audio_encoder").ok().flatten() == Some(true));
        let projector = [vision, audio]
            .iter()
            .flatten()
            .copied()
            .collect::<Vec<_>>()
            .join("+");
        let gemma4 = match (vision, audio) {
            (Some("qwen3vl_merger"), None) => false,
            (Some("gemma4v") | None, Some("gemma4a") | None) if !projector.is_empty() => true,
            _ => {
                return Err(LoadError::malformed(
                    path,
                    format!(
                        "projector type '{}' is not supported (gemma4v, gemma4a: Gemma 4; \
                         qwen3vl_merger: Qwen 3.5)",
                        if projector.is_empty() {
                            "none"
                        } else {
                            &projector
                        }
                    ),
                ))
            }
        };
        let family: &[Arch] = if gemma4 {
            &[Arch::Gemma4]
        } else {
            &[Arch::Qwen35, Arch::Qwen35Moe]
        };
        if !family.contains(&text.arch) {
            return Err(LoadError::malformed(
                path,
                format!(
                    "holds {} towers ({projector}), which pair with a {} model; the model is {}",
                    family[0].name(),
                    family
                        .iter()
                        .map(|a| a.name())
                        .collect::<Vec<_>>()
                        .join(" or "),
                    text.arch.name()
                ),
            ));
        }
        let translated = if gemma4 {
            super::gemma::gemma4_mmproj::translate(&g, text, vision.is_some(), audio.is_some())?
        } else {
            super::qwen_vision::mmproj::translate(&g, text)?
        };
        Ok(Mmproj {
            path: path.to_path_buf(),
            projector,
            config: translated.config,
            tensors: translated.tensors.into_iter().collect(),
        })
    }

    /// The transformers names of the tensors it holds.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// The file's projector type(s), `+`-joined (`gemma4v+gemma4a`).
    pub fn projector(&self) -> &str {
        &self.projector
    }

    /// The configuration the tower loaders read, as from a checkpoint's `config.json` at the
    /// mmproj file's path (so processor files beside it are found).
    pub fn source(&self) -> ConfigSource<'_> {
        ConfigSource::Json {
            path: &self.path,
            json: &self.config,
        }
    }
}

impl TensorStore for Mmproj {
    fn path(&self) -> &Path {
        &self.path
    }

    fn get(&self, name: &str) -> Option<Result<TensorView, LoadError>> {
        self.tensors.get(name).cloned().map(Ok)
    }
}

/// A whole-number `clip.*` key, or an error naming it when absent.
pub(crate) fn require_u64(g: &GgufFile, key: &str) -> Result<usize, LoadError> {
    g.get_u64(key)?
        .map(|v| v as usize)
        .ok_or_else(|| LoadError::field(g.path(), format!("missing key {key}")))
}

/// `t` under another name and shape with the same bytes (a reshape: the element count must
/// agree).
pub(crate) fn reshaped(t: &TensorView, shape: Vec<usize>) -> Result<TensorView, LoadError> {
    if shape.iter().product::<usize>() != t.numel() {
        return Err(LoadError::tensor(
            t.path(),
            &t.name,
            format!("shape {:?} cannot be read as {shape:?}", t.shape),
        ));
    }
    let mut v = t.clone();
    v.shape = shape;
    Ok(v)
}
