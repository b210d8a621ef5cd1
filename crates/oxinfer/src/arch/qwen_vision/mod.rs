//! The vision side of a multimodal Qwen 3.5 checkpoint (`Qwen3_5ForConditionalGeneration` /
//! `Qwen3_5MoeForConditionalGeneration`): the vision tower ([`tower`]) with its image processor
//! ([`image_processor`]), and the prompt tokens. The chat template writes
//! `<|vision_start|><|image_pad|><|vision_end|>` per image; the one `<|image_pad|>` becomes one
//! per soft token, and the soft tokens take 2-D multimodal rotary positions in the text model
//! ([`crate::plan::positions`]).
//!
//! Videos ([`video_processor`]): the template writes `<|vision_start|><|video_pad|><|vision_end|>`
//! per video; the one `<|video_pad|>` becomes, per group of two frames,
//! `<t seconds><|vision_start|>` + one `<|video_pad|>` per soft token + `<|vision_end|>`
//! (`Qwen3VLProcessor.replace_video_token`), and each group's soft tokens take the 2-D
//! positions of an image of its grid (`get_rope_index` splits a video's grid per group).

pub mod config;
pub mod image_processor;
pub mod mmproj;
pub mod tower;
pub mod video_processor;

use crate::arch::multimodal::{EncodedVideo, MediaKind, MediaTokens, MediaTowers};
use crate::config::ConfigSource;
use crate::error::LoadError;
use crate::loader::TensorStore;
use crate::media::{RgbImage, VideoClip};
use config::VisionConfig;
use image_processor::ImageProcessor;
use serde_json::Value;
use std::path::Path;
use tower::VisionTower;
use video_processor::VideoProcessor;

/// transformers' defaults of `Qwen3_5Config`: `image_token_id`, `video_token_id`,
/// `vision_start_token_id`, `vision_end_token_id`.
const DEFAULT_TOKENS: [(&str, u32); 4] = [
    ("image_token_id", 248_056),
    ("video_token_id", 248_057),
    ("vision_start_token_id", 248_053),
    ("vision_end_token_id", 248_054),
];

/// Qwen 3.5's vision tower, its image and video processors and its token ids.
pub struct Qwen35Vision {
    pub tower: VisionTower,
    pub processor: ImageProcessor,
    pub video_processor: VideoProcessor,
    /// Image pad, video pad, vision start, vision end.
    ids: [u32; 4],
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
        let (video_path, video) = video_json(dir, pre.as_ref())?;
        let video_processor = VideoProcessor::from_json(video.as_ref(), &cfg)
            .map_err(|e| LoadError::field(video_path.as_deref().unwrap_or(path), e))?;
        let mut ids = [0u32; 4];
        for (id, (key, default)) in ids.iter_mut().zip(DEFAULT_TOKENS) {
            *id = match json.get(key) {
                None | Some(Value::Null) => default,
                Some(v) => v
                    .as_u64()
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| err(format!("{key} must be a token id, got {v}")))?,
            };
        }
        Ok(Some(Qwen35Vision {
            tower: VisionTower::load(store, cfg, prefix)?,
            processor,
            video_processor,
            ids,
        }))
    }
}

/// `video_preprocessor_config.json` in `dir`, else the `video_processor` part of
/// `processor_config.json` (`pre`, when that is what was read), if any.
fn video_json(
    dir: &Path,
    pre: Option<&Value>,
) -> Result<(Option<std::path::PathBuf>, Option<Value>), LoadError> {
    let p = dir.join("video_preprocessor_config.json");
    if p.is_file() {
        let j = crate::config::read_config_json(&p)?;
        return Ok((Some(p), Some(j)));
    }
    let part = pre.and_then(|j| j.get("video_processor")).cloned();
    let from = part.is_some().then(|| dir.join("processor_config.json"));
    Ok((from, part))
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
        matches!(kind, MediaKind::Image | MediaKind::Video)
    }

    /// The template writes `<|vision_start|>` and `<|vision_end|>` around each input itself:
    /// an image's pad id is expanded alone; a video's frame groups each get their own start
    /// and end ids inside (after their timestamp text).
    fn tokens(&self, kind: MediaKind) -> MediaTokens {
        let [image, video, start, end] = self.ids;
        match kind {
            MediaKind::Video => MediaTokens {
                start: Some(start),
                placeholder: video,
                end: Some(end),
            },
            _ => MediaTokens {
                start: None,
                placeholder: image,
                end: None,
            },
        }
    }

    fn template_marker(&self, kind: MediaKind) -> &str {
        match kind {
            MediaKind::Video => "<|video_pad|>",
            _ => "<|image_pad|>",
        }
    }

    fn input_id(&self) -> u32 {
        self.ids[0]
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

    /// Every frame group through the tower in one pass, each group its own attention sequence
    /// (transformers' vision attention is per group: `cu_seqlens` splits the video's `t`).
    fn encode_video(&self, video: &VideoClip) -> Result<EncodedVideo, String> {
        let v = self.video_processor.preprocess(video)?;
        let m = self.video_processor.pixels.merge;
        let first = v.groups.first().ok_or("the video has no frames")?;
        let grid = [first.rows / m, first.cols / m];
        let rows = self.tower.encode_batch(&v.groups)?.concat();
        Ok(EncodedVideo {
            rows,
            grid,
            seconds: v.seconds,
        })
    }
}
