//! The vision side of a multimodal Qwen 3.5 checkpoint (`Qwen3_5ForConditionalGeneration` /
//! `Qwen3_5MoeForConditionalGeneration`): the vision tower ([`tower`]) with its image processor
//! ([`image_processor`]), and the prompt tokens. The chat template writes
//! `<|vision_start|><|image_pad|><|vision_end|>` per image; the one `<|image_pad|>` becomes one
//! per soft token, and the soft tokens take 2-D multimodal rotary positions in the text model
//! ([`crate::plan::positions`]).

pub mod config;
pub mod image_processor;
pub mod tower;

use crate::arch::multimodal::{MediaKind, MediaTokens, MediaTowers};
use crate::config::ConfigSource;
use crate::error::LoadError;
use crate::loader::TensorStore;
use crate::media::RgbImage;
use config::VisionConfig;
use image_processor::ImageProcessor;
use serde_json::Value;
use std::path::Path;
use tower::VisionTower;

/// transformers' default `image_token_id` of `Qwen3_5Config`.
const DEFAULT_IMAGE_TOKEN: u32 = 248_056;

/// Qwen 3.5's vision tower, its processor and its image token.
pub struct Qwen35Vision {
    pub tower: VisionTower,
    pub processor: ImageProcessor,
    image_token: u32,
}

impl Qwen35Vision {
    /// Loads the tower when the checkpoint has a `vision_config` and the tensors under
    /// `model.visual.`; `None` for a text-only checkpoint (or a GGUF file). `text_hidden` is
    /// the width the soft tokens must have.
    pub fn load(
        store: &dyn TensorStore,
        src: &ConfigSource<'_>,
        text_hidden: usize,
    ) -> Result<Option<Self>, LoadError> {
        let ConfigSource::Json { path, json } = src else {
            return Ok(None);
        };
        let Some(vcfg) = json.get("vision_config").filter(|v| v.is_object()) else {
            return Ok(None);
        };
        let prefix = "model.visual.";
        if store
            .get(&format!("{prefix}patch_embed.proj.weight"))
            .is_none()
        {
            return Ok(None);
        }
        let err = |what: String| LoadError::field(path, what);
        let cfg = VisionConfig::from_json(vcfg, &err)?;
        if cfg.out_hidden != text_hidden {
            return Err(err(format!(
                "vision_config.out_hidden_size {} differs from the text model's hidden size \
                 {text_hidden}",
                cfg.out_hidden
            )));
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        let (pre_path, pre) = processor_json(dir)?;
        let processor = ImageProcessor::from_json(pre.as_ref(), &cfg)
            .map_err(|e| LoadError::field(pre_path.as_deref().unwrap_or(path), e))?;
        let image_token = match json.get("image_token_id") {
            None | Some(Value::Null) => DEFAULT_IMAGE_TOKEN,
            Some(v) => v
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| err(format!("image_token_id must be a token id, got {v}")))?,
        };
        Ok(Some(Qwen35Vision {
            tower: VisionTower::load(store, cfg, prefix)?,
            processor,
            image_token,
        }))
    }
}

/// `preprocessor_config.json`, else `processor_config.json`, in `dir` (path and JSON), if any.
fn processor_json(dir: &Path) -> Result<(Option<std::path::PathBuf>, Option<Value>), LoadError> {
    for name in ["preprocessor_config.json", "processor_config.json"] {
        let p = dir.join(name);
        if p.is_file() {
            let j = crate::config::read_config_json(&p)?;
            return Ok((Some(p), Some(j)));
        }
    }
    Ok((None, None))
}

impl MediaTowers for Qwen35Vision {
    fn accepts(&self, kind: MediaKind) -> bool {
        kind == MediaKind::Image
    }

    /// The template writes `<|vision_start|>` and `<|vision_end|>` itself: only the image pad
    /// id is expanded.
    fn tokens(&self, _kind: MediaKind) -> MediaTokens {
        MediaTokens {
            start: None,
            placeholder: self.image_token,
            end: None,
        }
    }

    fn template_marker(&self, _kind: MediaKind) -> &str {
        "<|image_pad|>"
    }

    fn input_id(&self) -> u32 {
        self.image_token
    }

    fn encode_image(&self, img: &RgbImage) -> Result<Vec<f32>, String> {
        let patches = self.processor.preprocess(img)?;
        self.tower.encode(&patches)
    }

    fn image_grid(&self, img: &RgbImage) -> Option<[usize; 2]> {
        self.processor
            .merged_grid(img.height as usize, img.width as usize)
            .ok()
    }
}
