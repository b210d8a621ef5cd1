//! The media side of a multimodal Gemma 4 checkpoint (`Gemma4ForConditionalGeneration`): the
//! vision tower with its image processor, the audio tower with its log-mel feature extractor,
//! the image and audio token ids of `config.json`, and the pad id that token-indexed inputs
//! read at placeholder positions (as transformers does).

use super::audio::{AudioConfig, AudioTower};
use super::audio_features::AudioFeatureExtractor;
use super::image_processor::ImageProcessor;
use super::vision::{VisionConfig, VisionTower};
use crate::arch::multimodal::{MediaKind, MediaTokens, MediaTowers};
use crate::config::ConfigSource;
use crate::error::LoadError;
use crate::loader::TensorStore;
use crate::media::{RgbImage, Waveform};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The vision tower and the processor that makes its patches.
pub struct Gemma4Vision {
    pub tower: VisionTower,
    pub processor: ImageProcessor,
}

/// The audio tower and the extractor that makes its log-mel frames.
pub struct Gemma4Audio {
    pub tower: AudioTower,
    pub features: AudioFeatureExtractor,
}

/// Gemma 4's towers and their prompt tokens.
pub struct Gemma4Media {
    vision: Option<Gemma4Vision>,
    audio: Option<Gemma4Audio>,
    image: MediaTokens,
    audio_tokens: MediaTokens,
    /// Image, audio and video placeholder ids.
    placeholders: Vec<u32>,
    pad_id: u32,
    /// `use_bidirectional_attention: "vision"` (the larger checkpoints): the soft tokens of an
    /// image attend to each other both ways in the sliding layers
    /// ([`super::gemma4_block::Attention`]).
    bidirectional: bool,
}

/// Reads an id field of the top-level config.
fn id(json: &Value, key: &str, default: u32) -> u32 {
    json.get(key)
        .and_then(Value::as_u64)
        .map_or(default, |v| v as u32)
}

/// The first of `names` in `dir` that exists, read as JSON.
fn first_json(dir: &Path, names: &[&str]) -> Result<Option<(PathBuf, Value)>, LoadError> {
    match names.iter().map(|n| dir.join(n)).find(|p| p.is_file()) {
        Some(p) => {
            let j = crate::config::read_config_json(&p)?;
            Ok(Some((p, j)))
        }
        None => Ok(None),
    }
}

impl Gemma4Media {
    /// Loads the towers whose `config.json` section (`vision_config`, `audio_config`) and
    /// tensors the checkpoint has; `None` for a text-only checkpoint (or a GGUF file).
    pub fn load(
        store: &dyn TensorStore,
        src: &ConfigSource<'_>,
        text_hidden: usize,
    ) -> Result<Option<Self>, LoadError> {
        let ConfigSource::Json { path, json } = src else {
            return Ok(None);
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let vision = Self::load_vision(store, path, json, dir, text_hidden)?;
        let audio = Self::load_audio(store, path, json, dir, text_hidden)?;
        if vision.is_none() && audio.is_none() {
            return Ok(None);
        }
        let text = json.get("text_config").unwrap_or(json);
        let bidirectional = text
            .get("use_bidirectional_attention")
            .and_then(Value::as_str)
            == Some("vision");
        // transformers spells it `eoa_token_index`.
        let eoa = ["eoa_token_index", "eoa_token_id"]
            .iter()
            .find_map(|k| json.get(*k).and_then(Value::as_u64))
            .map_or(258_883, |v| v as u32);
        Ok(Some(Gemma4Media {
            vision,
            audio,
            image: MediaTokens {
                start: Some(id(json, "boi_token_id", 255_999)),
                placeholder: id(json, "image_token_id", 258_880),
                end: Some(id(json, "eoi_token_id", 258_882)),
            },
            audio_tokens: MediaTokens {
                start: Some(id(json, "boa_token_id", 256_000)),
                placeholder: id(json, "audio_token_id", 258_881),
                end: Some(eoa),
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

    fn load_vision(
        store: &dyn TensorStore,
        path: &Path,
        json: &Value,
        dir: &Path,
        text_hidden: usize,
    ) -> Result<Option<Gemma4Vision>, LoadError> {
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
        let err = |what: String| LoadError::field(path, what);
        let cfg = VisionConfig::from_json(vcfg, &err)?;
        let pre = first_json(dir, &["preprocessor_config.json", "processor_config.json"])?;
        let processor = ImageProcessor::from_json(pre.as_ref().map(|p| &p.1), cfg.patch, cfg.pool)
            .map_err(|e| LoadError::field(pre.as_ref().map_or(path, |p| p.0.as_path()), e))?;
        if processor.patch != cfg.patch || processor.pool != cfg.pool {
            return Err(err(format!(
                "the image processor's patch {} / pooling {} differ from the vision tower's {} / {}",
                processor.patch, processor.pool, cfg.patch, cfg.pool
            )));
        }
        Ok(Some(Gemma4Vision {
            tower: VisionTower::load(store, cfg, prefix, "model.embed_vision", text_hidden)?,
            processor,
        }))
    }

    /// The audio tower, with the extractor settings of `processor_config.json`'s
    /// `feature_extractor` (or of a `preprocessor_config.json` that describes the extractor).
    fn load_audio(
        store: &dyn TensorStore,
        path: &Path,
        json: &Value,
        dir: &Path,
        text_hidden: usize,
    ) -> Result<Option<Gemma4Audio>, LoadError> {
        let Some(acfg) = json.get("audio_config").filter(|v| v.is_object()) else {
            return Ok(None);
        };
        let prefix = "model.audio_tower.";
        if store
            .get(&format!(
                "{prefix}subsample_conv_projection.input_proj_linear.weight"
            ))
            .is_none()
        {
            return Ok(None);
        }
        let err = |what: String| LoadError::field(path, what);
        let cfg = AudioConfig::from_json(acfg, &err)?;
        let mut fe_json = None;
        for name in ["processor_config.json", "preprocessor_config.json"] {
            if let Some((p, j)) = first_json(dir, &[name])? {
                let section = j.get("feature_extractor").cloned();
                let own = j.get("feature_size").is_some().then(|| j.clone());
                if let Some(v) = section.or(own) {
                    fe_json = Some((p, v));
                    break;
                }
            }
        }
        // Else the config's own `feature_extractor` section (an mmproj file's translation
        // carries its mel bin count there), else the released checkpoints' settings.
        if fe_json.is_none() {
            fe_json = json
                .get("feature_extractor")
                .map(|v| (path.to_path_buf(), v.clone()));
        }
        let features = AudioFeatureExtractor::from_json(fe_json.as_ref().map(|f| &f.1))
            .map_err(|e| LoadError::field(fe_json.as_ref().map_or(path, |f| f.0.as_path()), e))?;
        let tower = AudioTower::load(
            store,
            cfg,
            prefix,
            "model.embed_audio",
            text_hidden,
            features.n_mel,
        )?;
        Ok(Some(Gemma4Audio { tower, features }))
    }

    /// The vision tower and its image processor, when loaded.
    pub fn vision(&self) -> Option<&Gemma4Vision> {
        self.vision.as_ref()
    }

    /// The audio tower and its feature extractor, when loaded.
    pub fn audio(&self) -> Option<&Gemma4Audio> {
        self.audio.as_ref()
    }
}

impl MediaTowers for Gemma4Media {
    fn accepts(&self, kind: MediaKind) -> bool {
        match kind {
            MediaKind::Image => self.vision.is_some(),
            MediaKind::Audio => self.audio.is_some(),
            MediaKind::Video => false,
        }
    }

    fn tokens(&self, kind: MediaKind) -> MediaTokens {
        match kind {
            // Videos are not accepted: their ids are never looked up.
            MediaKind::Image | MediaKind::Video => self.image,
            MediaKind::Audio => self.audio_tokens,
        }
    }

    fn template_marker(&self, kind: MediaKind) -> &str {
        match kind {
            MediaKind::Image => "<|image|>",
            MediaKind::Audio => "<|audio|>",
            MediaKind::Video => "<|video|>",
        }
    }

    fn input_id(&self) -> u32 {
        self.pad_id
    }

    /// transformers' `get_placeholder_mask` turns every image, audio and video id into the pad
    /// token (soft tokens replace the embeddings only where media sit).
    fn mapped_ids(&self) -> Vec<u32> {
        self.placeholders.clone()
    }

    /// Images (transformers groups video tokens too, but videos are not accepted), when the
    /// text config says `use_bidirectional_attention: "vision"`.
    fn bidirectional(&self, kind: MediaKind) -> bool {
        self.bidirectional && kind == MediaKind::Image
    }

    fn encode_image(&self, img: &RgbImage) -> Result<Vec<f32>, String> {
        let v = self
            .vision
            .as_ref()
            .ok_or("this model has no vision tower")?;
        let patches = v.processor.preprocess(img)?;
        v.tower.encode(&patches)
    }

    fn encode_audio(&self, audio: &Waveform) -> Result<Vec<f32>, String> {
        let a = self.audio.as_ref().ok_or("this model has no audio tower")?;
        let mel = a.features.extract(&audio.samples)?;
        a.tower.encode(&mel)
    }
}
