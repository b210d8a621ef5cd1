//! The media side of a multimodal Gemma 4 checkpoint (`Gemma4ForConditionalGeneration`): the
//! vision tower with its image processor, the image token ids of `config.json`, and the pad id
//! that token-indexed inputs read at placeholder positions (as transformers does).

use super::image_processor::ImageProcessor;
use super::vision::{VisionConfig, VisionTower};
use crate::arch::multimodal::{MediaKind, MediaTokens, MediaTowers};
use crate::config::ConfigSource;
use crate::error::LoadError;
use crate::loader::TensorStore;
use crate::media::RgbImage;
use serde_json::Value;

/// Gemma 4's towers and their prompt tokens.
pub struct Gemma4Media {
    vision: VisionTower,
    processor: ImageProcessor,
    image: MediaTokens,
    /// Image, audio and video placeholder ids.
    placeholders: Vec<u32>,
    pad_id: u32,
    /// `use_bidirectional_attention: "vision"` (the larger checkpoints): image tokens attend
    /// to each other both ways in the sliding layers, which the decoder does not do yet.
    bidirectional: bool,
}

/// Reads an id field of the top-level config.
fn id(json: &Value, key: &str, default: u32) -> u32 {
    json.get(key)
        .and_then(Value::as_u64)
        .map_or(default, |v| v as u32)
}

impl Gemma4Media {
    /// Loads the towers when `config.json` has a `vision_config` and the checkpoint its
    /// tensors; `None` for a text-only checkpoint (or a GGUF file).
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
        let prefix = "model.vision_tower.";
        if store
            .get(&format!("{prefix}patch_embedder.input_proj.weight"))
            .is_none()
        {
            return Ok(None);
        }
        let err = |what: String| LoadError::field(*path, what);
        let cfg = VisionConfig::from_json(vcfg, &err)?;
        let dir = path.parent().unwrap_or(std::path::Path::new("."));
        let pre = ["preprocessor_config.json", "processor_config.json"]
            .iter()
            .map(|n| dir.join(n))
            .find(|p| p.is_file());
        let pre_json = match &pre {
            Some(p) => Some(crate::config::read_config_json(p)?),
            None => None,
        };
        let processor = ImageProcessor::from_json(pre_json.as_ref(), cfg.patch, cfg.pool)
            .map_err(|e| LoadError::field(pre.clone().unwrap_or_else(|| path.to_path_buf()), e))?;
        if processor.patch != cfg.patch || processor.pool != cfg.pool {
            return Err(err(format!(
                "the image processor's patch {} / pooling {} differ from the vision tower's {} / {}",
                processor.patch, processor.pool, cfg.patch, cfg.pool
            )));
        }
        let text = json.get("text_config").unwrap_or(json);
        let bidirectional = text
            .get("use_bidirectional_attention")
            .and_then(Value::as_str)
            == Some("vision");
        Ok(Some(Gemma4Media {
            vision: VisionTower::load(store, cfg, prefix, "model.embed_vision", text_hidden)?,
            processor,
            image: MediaTokens {
                start: Some(id(json, "boi_token_id", 255_999)),
                placeholder: id(json, "image_token_id", 258_880),
                end: Some(id(json, "eoi_token_id", 258_882)),
            },
            placeholders: vec![
                id(json, "image_token_id", 258_880),
                id(json, "audio_token_id", 258_881),
                id(json, "video_token_id", 258_884),
            ],
            pad_id: id(text, "pad_token_id", 0),
            bidirectional,
        }))
    }

    /// The image processor in use.
    pub fn processor(&self) -> &ImageProcessor {
        &self.processor
    }

    /// The vision tower.
    pub fn vision(&self) -> &VisionTower {
        &self.vision
    }
}

impl MediaTowers for Gemma4Media {
    fn accepts(&self, kind: MediaKind) -> bool {
        kind == MediaKind::Image
    }

    fn tokens(&self, kind: MediaKind) -> MediaTokens {
        match kind {
            MediaKind::Image | MediaKind::Audio => self.image,
        }
    }

    fn template_marker(&self, _kind: MediaKind) -> &str {
        "<|image|>"
    }

    fn input_id(&self) -> u32 {
        self.pad_id
    }

    /// transformers' `get_placeholder_mask` turns every image, audio and video id into the pad
    /// token (soft tokens replace the embeddings only where media sit).
    fn mapped_ids(&self) -> Vec<u32> {
        self.placeholders.clone()
    }

    fn encode_image(&self, img: &RgbImage) -> Result<Vec<f32>, String> {
        if self.bidirectional {
            return Err("this checkpoint's image tokens attend bidirectionally \
                        (use_bidirectional_attention: vision), which is not supported yet"
                .into());
        }
        let patches = self.processor.preprocess(img)?;
        self.vision.encode(&patches)
    }
}
