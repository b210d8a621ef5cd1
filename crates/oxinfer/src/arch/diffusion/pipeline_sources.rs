//! Where a pipeline's configs, tokenizer and weights come from: a diffusers folder, an LDM single
//! file with a folder's configs, or an LDM single file with its configs inferred
//! ([`super::ldm_config`]) and the built-in CLIP tokenizer ([`super::clip_vocab`]) or a given one.

use super::clip_tokenizer::ClipTokenizer;
use super::clip_vocab;
use super::config::JsonConfig;
use super::ldm::{LdmPart, LdmStore};
use super::ldm_config;
use super::ldm_model_type::{InferredModel, SingleFileOptions};
use super::lora::LoraSpec;
use super::DiffusionError;
use crate::loader::safetensors::SafetensorsModel;
use crate::quant::Precision;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The `model_index.json` classes that load: Stable Diffusion 1.x / 2.x pipelines (SD-Turbo is
/// one), their inpainting pipeline and latent consistency models.
const PIPELINE_CLASSES: [&str; 5] = [
    "StableDiffusionPipeline",
    "StableDiffusionImg2ImgPipeline",
    "LatentConsistencyModelPipeline",
    "LatentConsistencyModelImg2ImgPipeline",
    "StableDiffusionInpaintPipeline",
];

/// `dir/name`, or an error naming the component when it is not a folder.
pub(super) fn component(dir: &Path, name: &str) -> Result<PathBuf, DiffusionError> {
    let p = dir.join(name);
    if p.is_dir() {
        Ok(p)
    } else {
        Err(DiffusionError::Missing {
            path: p,
            what: format!("the pipeline's '{name}' component folder"),
        })
    }
}

/// The component's weights: `diffusion_pytorch_model.safetensors` or `model.safetensors`
/// (or their `.fp16` variants).
pub(super) fn weights(dir: &Path) -> Result<SafetensorsModel, DiffusionError> {
    for name in [
        "diffusion_pytorch_model.safetensors",
        "model.safetensors",
        "diffusion_pytorch_model.fp16.safetensors",
        "model.fp16.safetensors",
    ] {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(SafetensorsModel::open(&p)?);
        }
    }
    Err(DiffusionError::Missing {
        path: dir.to_path_buf(),
        what: "weights (diffusion_pytorch_model.safetensors or model.safetensors)".into(),
    })
}

/// Where [`StableDiffusion::open`] loads a pipeline from.
#[derive(Clone, Copy, Debug)]
pub enum PipelineSource<'a> {
    /// A diffusers folder.
    Folder(&'a Path),
    /// An LDM single file with the configs, tokenizer and scheduler of a diffusers folder.
    SingleFile { file: &'a Path, config: &'a Path },
    /// An LDM single file with its configs inferred, what the file cannot tell from `options`,
    /// and the CLIP tokenizer of the folder `tokenizer` (default: the built-in one).
    SingleFileInferred {
        file: &'a Path,
        tokenizer: Option<&'a Path>,
        options: SingleFileOptions,
    },
}

/// Where a pipeline's configs and tokenizer come from: a diffusers folder, or configs inferred
/// from a single file.
pub(super) struct Sources {
    /// The folder (or file), for [`StableDiffusion::path`].
    pub(super) dir: PathBuf,
    pub(super) tokenizer: ClipTokenizer,
    pub(super) text_encoder: JsonConfig,
    pub(super) unet: JsonConfig,
    pub(super) vae: JsonConfig,
    pub(super) scheduler: JsonConfig,
    /// How the text encoder's tensors are named in a single file.
    pub(super) text_part: LdmPart,
    /// The `text_encoder/`, `unet/` and `vae/` folders holding the weights, for a folder.
    pub(super) folders: Option<[PathBuf; 3]>,
    /// On-load quantization of the UNet's matrices and kernels.
    pub(super) unet_quant: Option<Precision>,
    /// LoRA files fused into the UNet and the text encoder at load.
    pub(super) loras: Vec<LoraSpec>,
}

impl Sources {
    /// Configs inferred from the LDM file `model` (at `file`) with `options`; the tokenizer of
    /// `tokenizer_dir`, else the built-in CLIP tokenizer, with the family's pad token.
    ///
    /// # Errors
    /// As [`ldm_config::infer`]; with the built-in
    /// tokenizer, a text encoder whose vocabulary is not CLIP's 49,408 tokens.
    pub(super) fn inferred(
        file: &Path,
        model: &SafetensorsModel,
        tokenizer_dir: Option<&Path>,
        options: SingleFileOptions,
    ) -> Result<(Self, InferredModel), DiffusionError> {
        let mut inferred = ldm_config::infer(model, options)?;
        let m = &mut inferred.model;
        let pad = m.family.pad_token();
        let tokenizer = match tokenizer_dir {
            Some(dir) => ClipTokenizer::load_with_pad(dir, Some(pad))?,
            None => {
                let vocab = inferred.text_encoder["vocab_size"].as_u64().unwrap_or(0);
                if vocab != clip_vocab::VOCAB_SIZE as u64 {
                    return Err(DiffusionError::config(
                        file,
                        format!(
                            "the text encoder's vocabulary has {vocab} tokens, the built-in CLIP \
                             tokenizer's {}: give the checkpoint's tokenizer folder",
                            clip_vocab::VOCAB_SIZE
                        ),
                    ));
                }
                m.builtin_tokenizer = true;
                ClipTokenizer::builtin(pad)?
            }
        };
        let cfg = |v: Value| JsonConfig::from_value(file, v);
        let sources = Sources {
            dir: file.to_path_buf(),
            tokenizer,
            text_encoder: cfg(inferred.text_encoder),
            unet: cfg(inferred.unet),
            vae: cfg(inferred.vae),
            scheduler: cfg(inferred.scheduler),
            text_part: inferred.text_part,
            folders: None,
            unet_quant: None,
            loras: Vec::new(),
        };
        Ok((sources, inferred.model))
    }

    /// The configs and tokenizer of the diffusers folder `dir` (checks `model_index.json`).
    pub(super) fn folder(dir: &Path) -> Result<Self, DiffusionError> {
        let index = JsonConfig::read(&dir.join("model_index.json"))?;
        let class = index.str_or("_class_name", "StableDiffusionPipeline")?;
        if !PIPELINE_CLASSES.contains(&class) {
            return Err(DiffusionError::config(
                &index.path,
                format!(
                    "field '_class_name': '{class}' is not supported ({})",
                    PIPELINE_CLASSES.join(", ")
                ),
            ));
        }
        let te_dir = component(dir, "text_encoder")?;
        let unet_dir = component(dir, "unet")?;
        let vae_dir = component(dir, "vae")?;
        let sched_dir = component(dir, "scheduler")?;
        Ok(Sources {
            dir: dir.to_path_buf(),
            tokenizer: ClipTokenizer::load(&component(dir, "tokenizer")?)?,
            text_encoder: JsonConfig::read(&te_dir.join("config.json"))?,
            unet: JsonConfig::read(&unet_dir.join("config.json"))?,
            vae: JsonConfig::read(&vae_dir.join("config.json"))?,
            scheduler: JsonConfig::read(&sched_dir.join("scheduler_config.json"))?,
            text_part: LdmPart::TextEncoder,
            folders: Some([te_dir, unet_dir, vae_dir]),
            unet_quant: None,
            loras: Vec::new(),
        })
    }
}

/// Opens `file` and checks that it is an LDM checkpoint.
pub(super) fn open_ldm(file: &Path) -> Result<SafetensorsModel, DiffusionError> {
    let model = SafetensorsModel::open(file)?;
    if !LdmStore::is_ldm(&model) {
        return Err(DiffusionError::config(
            file,
            "not an LDM checkpoint: no model.diffusion_model.* tensors",
        ));
    }
    Ok(model)
}
