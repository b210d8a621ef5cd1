//! The sentence-transformers folder layout: `modules.json` (Transformer → Pooling → Dense… →
//! Normalize), `1_Pooling/config.json`, `2_Dense/` (config + weights), `sentence_bert_config.json`
//! (`max_seq_length`, `do_lower_case`) and the prompts of `config_sentence_transformers.json`.
//! A plain HF folder (no `modules.json`) gets mean pooling and no normalization, as
//! sentence-transformers gives it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::pooling::Pooling;
use crate::error::LoadError;
use crate::loader::safetensors::SafetensorsModel;
use crate::nn::Linear;

/// Reads and parses a JSON file.
pub(crate) fn read_json(path: &Path) -> Result<Value, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| LoadError::io(path, e))?;
    serde_json::from_str(&text)
        .map_err(|e| LoadError::malformed(path, format!("invalid JSON: {e}")))
}

/// Reads `path` when it exists.
fn read_json_if_present(path: &Path) -> Result<Option<Value>, LoadError> {
    if path.is_file() {
        read_json(path).map(Some)
    } else {
        Ok(None)
    }
}

/// A `Dense` module: `act(x Wᵀ + b)`.
pub struct Dense {
    /// The projection `[out_features, in_features]`.
    pub linear: Linear,
    /// Whether `tanh` follows (else identity).
    pub tanh: bool,
}

impl Dense {
    /// Loads a `Dense` folder (`config.json` + `model.safetensors` with `linear.weight`).
    fn load(dir: &Path) -> Result<Self, LoadError> {
        let cfg_path = dir.join("config.json");
        let cfg = read_json(&cfg_path)?;
        let size = |k: &str| crate::arch::bert::json_usize(&cfg_path, &cfg, k);
        let (n_in, n_out) = (size("in_features")?, size("out_features")?);
        let act = cfg
            .get("activation_function")
            .and_then(Value::as_str)
            .unwrap_or("torch.nn.modules.linear.Identity");
        let tanh = match act.rsplit('.').next().unwrap_or(act) {
            "Identity" => false,
            "Tanh" => true,
            _ => {
                return Err(LoadError::field(
                    &cfg_path,
                    format!("activation_function '{act}' is not supported (Identity, Tanh)"),
                ))
            }
        };
        if !dir.join("model.safetensors").is_file() {
            return Err(LoadError::malformed(
                dir,
                "a Dense module needs its weights as model.safetensors (pytorch_model.bin is not read)",
            ));
        }
        let store = SafetensorsModel::open(dir)?;
        let linear = Linear::load(&store, "linear.weight", n_out, n_in)?;
        Ok(Dense { linear, tanh })
    }

    /// `x` `[t, in]` → `[t, out]`.
    pub fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        let mut y = self.linear.forward(x, t);
        if self.tanh {
            y.iter_mut().for_each(|v| *v = v.tanh());
        }
        y
    }
}

/// Everything around the encoder that turns its token states into sentence embeddings.
pub struct SentenceLayout {
    /// The folder holding the encoder (`config.json`, weights, tokenizer).
    pub encoder_dir: PathBuf,
    /// How token states become one vector.
    pub pooling: Pooling,
    /// Projections applied after pooling, in order.
    pub dense: Vec<Dense>,
    /// Whether the output is scaled to unit length.
    pub normalize: bool,
    /// `max_seq_length` (tokens, specials included), when the folder says.
    pub max_seq_length: Option<usize>,
    /// Whether texts are lower-cased before tokenization (`do_lower_case`).
    pub lower_case: bool,
    /// Named prompts prepended to texts (`query`, `document`, …).
    pub prompts: BTreeMap<String, String>,
    /// The prompt used when none is named.
    pub default_prompt: Option<String>,
}

impl SentenceLayout {
    /// The layout of a model without sentence-transformers files at `encoder_dir`: mean
    /// pooling, nothing after it.
    pub fn plain(encoder_dir: &Path) -> Self {
        SentenceLayout {
            encoder_dir: encoder_dir.to_path_buf(),
            pooling: Pooling::new(vec![super::pooling::PoolMode::Mean]),
            dense: Vec::new(),
            normalize: false,
            max_seq_length: None,
            lower_case: false,
            prompts: BTreeMap::new(),
            default_prompt: None,
        }
    }

    /// Reads the layout of the folder `dir`.
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        let modules_path = dir.join("modules.json");
        let mut layout = Self::plain(dir);
        if let Some(modules) = read_json_if_present(&modules_path)? {
            layout.read_modules(dir, &modules_path, &modules)?;
        }
        let sbert = ["sentence_bert_config.json", "sentence_xlnet_config.json"]
            .iter()
            .map(|n| layout.encoder_dir.join(n))
            .find(|p| p.is_file());
        if let Some(p) = sbert {
            let v = read_json(&p)?;
            layout.max_seq_length = v
                .get("max_seq_length")
                .and_then(Value::as_u64)
                .map(|x| x as usize);
            layout.lower_case = v.get("do_lower_case").and_then(Value::as_bool) == Some(true);
        }
        let st_path = dir.join("config_sentence_transformers.json");
        if let Some(v) = read_json_if_present(&st_path)? {
            layout.read_prompts(&st_path, &v)?;
        }
        Ok(layout)
    }

    /// Applies `modules.json`'s list of modules.
    fn read_modules(&mut self, dir: &Path, path: &Path, modules: &Value) -> Result<(), LoadError> {
        let list = modules
            .as_array()
            .ok_or_else(|| LoadError::field(path, "not a list of modules"))?;
        for m in list {
            let ty = m.get("type").and_then(Value::as_str).unwrap_or_default();
            let sub = m.get("path").and_then(Value::as_str).unwrap_or_default();
            if sub.contains("..") || sub.starts_with('/') {
                return Err(LoadError::field(
                    path,
                    format!("module path '{sub}' leaves the folder"),
                ));
            }
            let module_dir = dir.join(sub);
            match ty.rsplit('.').next().unwrap_or_default() {
                "Transformer" => self.encoder_dir = module_dir,
                "Pooling" => {
                    let cfg = module_dir.join("config.json");
                    self.pooling = Pooling::from_json(&cfg, &read_json(&cfg)?)?;
                }
                "Dense" => self.dense.push(Dense::load(&module_dir)?),
                "Normalize" => self.normalize = true,
                _ => {
                    return Err(LoadError::field(
                        path,
                        format!(
                            "module type '{ty}' is not supported (Transformer, Pooling, Dense, Normalize)"
                        ),
                    ))
                }
            }
        }
        Ok(())
    }

    /// Reads `prompts` and `default_prompt_name`.
    fn read_prompts(&mut self, path: &Path, v: &Value) -> Result<(), LoadError> {
        if let Some(p) = v.get("prompts").and_then(Value::as_object) {
            for (name, text) in p {
                let text = text.as_str().ok_or_else(|| {
                    LoadError::field(path, format!("prompt '{name}' is not a string"))
                })?;
                self.prompts.insert(name.clone(), text.to_string());
            }
        }
        if let Some(name) = v.get("default_prompt_name").and_then(Value::as_str) {
            let text = self.prompts.get(name).ok_or_else(|| {
                LoadError::field(
                    path,
                    format!("default_prompt_name '{name}' is not in prompts"),
                )
            })?;
            self.default_prompt = Some(text.clone());
        }
        Ok(())
    }
}
