//! One typed model configuration, read from GGUF metadata or from a HuggingFace `config.json`.
//!
//! `config.json` exists in two spellings (see the project's reference notes): transformers 5
//! writes `rope_parameters` and `dtype`; older checkpoints write top-level `rope_theta`,
//! `rope_scaling` and `torch_dtype`. Both are accepted.

use crate::error::LoadError;
use crate::gguf::GgufFile;
use serde_json::Value;
use std::path::Path;

/// Model families the engine implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama 2/3, SmolLM, Mistral-style decoders (RMSNorm, RoPE, GQA, SwiGLU).
    Llama,
    /// Qwen2 / Qwen2.5 / DeepSeek-R1-Distill-Qwen: Llama blocks with q/k/v biases, NeoX RoPE.
    Qwen2,
    /// Qwen3 dense: Llama blocks with per-head QK RMSNorm, NeoX RoPE.
    Qwen3,
    /// Qwen 3.5 hybrid: Gated DeltaNet layers and gated full-attention layers.
    Qwen35,
    /// Qwen 3.5 hybrid with routed + shared experts.
    Qwen35Moe,
    /// Gemma 3 text decoder (sliding/global layers, QK norms, pre/post norms, GeGLU).
    Gemma3,
    /// Gemma 4 text decoder (per-layer embeddings, KV sharing, per-layer head dims, optional
    /// routed experts beside the dense MLP).
    Gemma4,
}

impl Arch {
    /// The family's name as GGUF spells it.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Qwen35 => "qwen35",
            Arch::Qwen35Moe => "qwen35moe",
            Arch::Gemma3 => "gemma3",
            Arch::Gemma4 => "gemma4",
        }
    }

    /// Names accepted in error messages.
    pub const SUPPORTED: &'static str =
        "llama (Llama, SmolLM, Mistral), qwen2, qwen3, qwen35 (Qwen 3.5), qwen35moe, gemma3 (Gemma 3 text), gemma4 (Gemma 4 text)";

    /// The architecture a GGUF's `general.architecture` names (`None`: not one this engine
    /// runs).
    pub fn from_gguf(name: &str) -> Option<Self> {
        match name {
            "llama" | "mistral" => Some(Arch::Llama),
            "qwen2" => Some(Arch::Qwen2),
            "qwen3" => Some(Arch::Qwen3),
            "qwen35" => Some(Arch::Qwen35),
            "qwen35moe" => Some(Arch::Qwen35Moe),
            "gemma3" => Some(Arch::Gemma3),
            "gemma4" => Some(Arch::Gemma4),
            _ => None,
        }
    }

    fn from_hf(model_type: &str) -> Option<Self> {
        match model_type {
            "llama" | "mistral" => Some(Arch::Llama),
            "qwen2" => Some(Arch::Qwen2),
            "qwen3" => Some(Arch::Qwen3),
            "qwen3_5" | "qwen3_5_text" => Some(Arch::Qwen35),
            "qwen3_5_moe" | "qwen3_5_moe_text" => Some(Arch::Qwen35Moe),
            "gemma3" | "gemma3_text" => Some(Arch::Gemma3),
            "gemma4" | "gemma4_text" => Some(Arch::Gemma4),
            _ => None,
        }
    }
}

/// How rotary embeddings pair up the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(2i, 2i+1)`: llama.cpp's "normal" RoPE on GGUF Llama files, whose q/k
    /// rows were permuted by the converter.
    Interleaved,
    /// Pairs `(i, i + d/2)`: transformers' `rotate_half`, llama.cpp's "NeoX" RoPE.
    Half,
}

/// Frequency scaling applied to the rotary embedding.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor`.
    Linear {
        factor: f32,
    },
    /// Llama 3.1 wavelength-dependent scaling.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position: f32,
    },
    /// transformers' "proportional" RoPE (Gemma 4's global layers): pairs `(i, i + dim/2)`
    /// over the whole head, frequencies `θ^(-2i/dim) / factor` for the first
    /// `⌊partial_rotary_factor · dim / 2⌋` pairs; the other pairs do not rotate.
    Proportional {
        factor: f32,
        partial_rotary_factor: f64,
    },
}

/// Rotary position embedding parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeConfig {
    /// Base of the frequencies (`rope_theta`).
    pub theta: f32,
    /// Number of rotated dimensions per head (≤ head_dim).
    pub dim: usize,
    pub style: RopeStyle,
    pub scaling: RopeScaling,
}

/// Typed configuration of a decoder-only language model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub n_layers: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (GQA when fewer than `n_heads`).
    pub n_kv_heads: usize,
    /// Dimension of one attention head.
    pub head_dim: usize,
    /// Hidden size of the MLP.
    pub intermediate_size: usize,
    /// Epsilon of the RMSNorms.
    pub norm_eps: f32,
    pub rope: RopeConfig,
    /// Context length the model was trained for.
    pub context_length: usize,
    /// Attention window (a query at q sees keys k with q − k < window), if any.
    pub sliding_window: Option<usize>,
    /// Whether the output head reuses the embedding table.
    pub tie_embeddings: bool,
    /// Storage type named by the checkpoint (`bfloat16`, `float32`, or the GGUF file type).
    pub dtype: Option<String>,
    /// BOS token id from `config.json` (GGUF files carry it in the tokenizer metadata).
    pub bos_token_id: Option<u32>,
    /// EOS token ids from `config.json`.
    pub eos_token_ids: Vec<u32>,
}

/// Sanity limits that keep a corrupt header from allocating absurd memory.
const MAX_DIM: usize = 1 << 20;
const MAX_LAYERS: usize = 4096;
const MAX_VOCAB: usize = 1 << 24;

impl ModelConfig {
    fn validate(self, path: &Path) -> Result<Self, LoadError> {
        let bad = |what: String| Err(LoadError::field(path, what));
        for (name, v, max) in [
            ("hidden size", self.hidden_size, MAX_DIM),
            ("layer count", self.n_layers, MAX_LAYERS),
            ("head count", self.n_heads, MAX_DIM),
            ("kv head count", self.n_kv_heads, MAX_DIM),
            ("head dim", self.head_dim, MAX_DIM),
            ("intermediate size", self.intermediate_size, MAX_DIM * 4),
            ("vocab size", self.vocab_size, MAX_VOCAB),
        ] {
            if v == 0 || v > max {
                return bad(format!("{name} {v} is out of range (1..={max})"));
            }
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(format!(
                "head count {} is not a multiple of kv head count {}",
                self.n_heads, self.n_kv_heads
            ));
        }
        if self.rope.dim > self.head_dim || !self.rope.dim.is_multiple_of(2) {
            return bad(format!(
                "rope dimension {} must be even and ≤ head dim {}",
                self.rope.dim, self.head_dim
            ));
        }
        if !(self.rope.theta.is_finite() && self.rope.theta > 0.0) {
            return bad(format!("rope theta {} must be positive", self.rope.theta));
        }
        if !(self.norm_eps.is_finite() && self.norm_eps >= 0.0) {
            return bad(format!("norm epsilon {} is invalid", self.norm_eps));
        }
        Ok(self)
    }

    /// Reads the configuration from a GGUF file's metadata (`{arch}.*` keys). The vocabulary
    /// size comes from `{arch}.vocab_size`, else the token list, else `token_embd.weight`.
    pub fn from_gguf(g: &GgufFile) -> Result<Self, LoadError> {
        let path = g.path();
        let arch_name = g.architecture()?;
        if arch_name == "clip" {
            return Err(LoadError::malformed(
                path,
                "is a multimodal projector (mmproj) file, not a model: pass the model's GGUF \
                 with -m and this file with --mmproj",
            ));
        }
        let arch = Arch::from_gguf(arch_name).ok_or_else(|| LoadError::UnsupportedArch {
            path: path.to_path_buf(),
            arch: arch_name.to_string(),
            supported: Arch::SUPPORTED.to_string(),
        })?;
        let key = |k: &str| format!("{arch_name}.{k}");
        let req = |k: &str| -> Result<usize, LoadError> {
            g.get_u64(&key(k))?
                .map(|v| v as usize)
                .ok_or_else(|| LoadError::field(path, format!("metadata '{}' is missing", key(k))))
        };
        let hidden_size = req("embedding_length")?;
        let n_heads = req("attention.head_count")?;
        // Gemma 4 writes per-layer arrays (kv heads, feed-forward widths) and the sliding
        // layers' head dim as `key_length_swa`: the model-wide values are the first layer's.
        let first_of = |k: &str| -> Result<Option<usize>, LoadError> {
            match g.get(&key(k)) {
                Some(v) if v.as_array().is_some() && arch == Arch::Gemma4 => v
                    .as_array()
                    .and_then(|a| a.int_at(0))
                    .filter(|&x| x > 0)
                    .map(|x| Some(x as usize))
                    .ok_or_else(|| {
                        LoadError::field(path, format!("metadata '{}' is an empty array", key(k)))
                    }),
                _ => Ok(g.get_u64(&key(k))?.map(|v| v as usize)),
            }
        };
        let n_kv_heads = first_of("attention.head_count_kv")?.unwrap_or(n_heads);
        let head_dim = match g.get_u64(&key("attention.key_length"))? {
            _ if arch == Arch::Gemma4 && g.get(&key("attention.key_length_swa")).is_some() => {
                req("attention.key_length_swa")?
            }
            Some(v) => v as usize,
            None if n_heads > 0 => hidden_size / n_heads,
            None => 0,
        };
        let vocab_size = match g.get_u64(&key("vocab_size"))? {
            Some(v) => v as usize,
            None => match g.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()) {
                Some(a) => a.len(),
                None => g
                    .tensor_info("token_embd.weight")
                    .map(|t| t.shape()[0])
                    .ok_or_else(|| LoadError::field(path, "cannot tell the vocabulary size"))?,
            },
        };
        let scaling = match g.get_str(&key("rope.scaling.type"))? {
            Some("linear") => RopeScaling::Linear {
                factor: g.get_f64(&key("rope.scaling.factor"))?.unwrap_or(1.0) as f32,
            },
            None | Some("none") => RopeScaling::None,
            Some(other) => {
                return Err(LoadError::field(
                    path,
                    format!("rope scaling type '{other}' is not supported"),
                ))
            }
        };
        let style = match arch {
            Arch::Llama => RopeStyle::Interleaved,
            Arch::Qwen2 | Arch::Qwen3 | Arch::Qwen35 | Arch::Qwen35Moe => RopeStyle::Half,
            Arch::Gemma3 | Arch::Gemma4 => RopeStyle::Half,
        };
        ModelConfig {
            arch,
            vocab_size,
            hidden_size,
            n_layers: req("block_count")?,
            n_heads,
            n_kv_heads,
            head_dim,
            intermediate_size: match first_of("feed_forward_length")? {
                Some(v) => v,
                None => req("expert_feed_forward_length")?,
            },
            norm_eps: g
                .get_f64(&key("attention.layer_norm_rms_epsilon"))?
                .unwrap_or(1e-5) as f32,
            rope: RopeConfig {
                theta: g.get_f64(&key("rope.freq_base"))?.unwrap_or(10_000.0) as f32,
                // Gemma 4's count is the global layers' (wider) head: its RoPE is per layer type.
                dim: match g.get_u64(&key("rope.dimension_count"))? {
                    Some(_) if arch == Arch::Gemma4 => head_dim,
                    Some(v) => v as usize,
                    None => head_dim,
                },
                style,
                scaling,
            },
            context_length: g.get_u64(&key("context_length"))?.unwrap_or(2048) as usize,
            sliding_window: g
                .get_u64(&key("attention.sliding_window"))?
                .map(|v| v as usize)
                .filter(|&w| w > 0),
            tie_embeddings: g.tensor_info("output.weight").is_none(),
            dtype: g.get_u64("general.file_type")?.map(gguf_file_type_name),
            bos_token_id: None,
            eos_token_ids: Vec::new(),
        }
        .validate(path)
    }

    /// Reads a HuggingFace `config.json`.
    pub fn from_config_json(path: &Path) -> Result<Self, LoadError> {
        Self::from_config_value(path, &read_config_json(path)?)
    }

    /// Reads a parsed `config.json`; multimodal configs are read from their `text_config`.
    pub fn from_config_value(path: &Path, json: &Value) -> Result<Self, LoadError> {
        let c = json.get("text_config").unwrap_or(json);
        let with_defaults;
        let c = match c.get("model_type").or_else(|| json.get("model_type")) {
            Some(Value::String(t)) if Arch::from_hf(t) == Some(Arch::Gemma4) => {
                with_defaults = fill_gemma4_defaults(c, json);
                &with_defaults
            }
            _ => c,
        };
        let model_type = c
            .get("model_type")
            .or_else(|| json.get("model_type"))
            .and_then(Value::as_str)
            .ok_or_else(|| LoadError::field(path, "field 'model_type' is missing"))?;
        let arch = Arch::from_hf(model_type).ok_or_else(|| LoadError::UnsupportedArch {
            path: path.to_path_buf(),
            arch: model_type.to_string(),
            supported: Arch::SUPPORTED.to_string(),
        })?;
        let usize_field = |k: &str| -> Result<Option<usize>, LoadError> {
            match c.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v.as_u64().map(|v| Some(v as usize)).ok_or_else(|| {
                    LoadError::field(
                        path,
                        format!("field '{k}' must be a non-negative integer, got {v}"),
                    )
                }),
            }
        };
        let f64_field = |v: Option<&Value>, k: &str| -> Result<Option<f64>, LoadError> {
            match v {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                    LoadError::field(path, format!("field '{k}' must be a number, got {v}"))
                }),
            }
        };
        let req = |k: &str| -> Result<usize, LoadError> {
            usize_field(k)?.ok_or_else(|| LoadError::field(path, format!("field '{k}' is missing")))
        };
        let hidden_size = req("hidden_size")?;
        let n_heads = req("num_attention_heads")?;
        let n_kv_heads = usize_field("num_key_value_heads")?.unwrap_or(n_heads);
        let head_dim = match usize_field("head_dim")? {
            Some(d) => d,
            None if n_heads > 0 => hidden_size / n_heads,
            None => 0,
        };

        // transformers 5: `rope_parameters` holds theta and scaling; older: top-level fields.
        // Per-layer-type parameters (Gemma 3/4): the global layers' entry is the model's RoPE.
        let rope_params = c.get("rope_parameters").filter(|v| v.is_object()).map(|p| {
            p.get("full_attention")
                .filter(|v| v.is_object())
                .unwrap_or(p)
        });
        let rope_scaling = c.get("rope_scaling").filter(|v| v.is_object());
        let theta = f64_field(
            rope_params
                .and_then(|p| p.get("rope_theta"))
                .or(c.get("rope_theta")),
            "rope_theta",
        )?
        .unwrap_or(10_000.0) as f32;
        let scaling = match rope_params.or(rope_scaling) {
            None => RopeScaling::None,
            Some(s) => parse_rope_scaling(path, s)?,
        };
        let partial = f64_field(
            c.get("partial_rotary_factor")
                .or(rope_params.and_then(|p| p.get("partial_rotary_factor"))),
            "partial_rotary_factor",
        )?;
        let rope_dim = match scaling {
            // Proportional RoPE pairs dimensions across the whole head.
            RopeScaling::Proportional { .. } => head_dim,
            _ => partial.map_or(head_dim, |p| (head_dim as f64 * p) as usize),
        };

        let eos_token_ids = match c.get("eos_token_id").or(json.get("eos_token_id")) {
            Some(Value::Number(n)) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_u64())
                .map(|v| v as u32)
                .collect(),
            _ => Vec::new(),
        };
        ModelConfig {
            arch,
            vocab_size: req("vocab_size")?,
            hidden_size,
            n_layers: req("num_hidden_layers")?,
            n_heads,
            n_kv_heads,
            head_dim,
            intermediate_size: match usize_field("intermediate_size")? {
                Some(v) => v,
                None => req("moe_intermediate_size")?,
            },
            norm_eps: f64_field(c.get("rms_norm_eps"), "rms_norm_eps")?.unwrap_or(1e-6) as f32,
            rope: RopeConfig {
                theta,
                dim: rope_dim,
                style: RopeStyle::Half,
                scaling,
            },
            context_length: usize_field("max_position_embeddings")?.unwrap_or(2048),
            // Qwen2/3 write a window with `use_sliding_window: false`: then there is none.
            sliding_window: usize_field("sliding_window")?
                .filter(|&w| w > 0)
                .filter(|_| c.get("use_sliding_window").and_then(Value::as_bool) != Some(false)),
            tie_embeddings: c
                .get("tie_word_embeddings")
                .or(json.get("tie_word_embeddings"))
                .and_then(Value::as_bool)
                .unwrap_or(false),
            dtype: c
                .get("dtype")
                .or(c.get("torch_dtype"))
                .or(json.get("dtype"))
                .or(json.get("torch_dtype"))
                .and_then(Value::as_str)
                .map(str::to_string),
            bos_token_id: c
                .get("bos_token_id")
                .or(json.get("bos_token_id"))
                .and_then(Value::as_u64)
                .map(|v| v as u32),
            eos_token_ids,
        }
        .validate(path)
    }
}

fn parse_rope_scaling(path: &Path, s: &Value) -> Result<RopeScaling, LoadError> {
    let kind = s
        .get("rope_type")
        .or(s.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let num = |k: &str| -> Result<f32, LoadError> {
        s.get(k)
            .and_then(Value::as_f64)
            .map(|v| v as f32)
            .ok_or_else(|| {
                LoadError::field(path, format!("rope scaling '{kind}' needs a numeric '{k}'"))
            })
    };
    Ok(match kind {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear {
            factor: num("factor")?,
        },
        "llama3" => RopeScaling::Llama3 {
            factor: num("factor")?,
            low_freq_factor: num("low_freq_factor")?,
            high_freq_factor: num("high_freq_factor")?,
            original_max_position: num("original_max_position_embeddings")?,
        },
        "proportional" => RopeScaling::Proportional {
            factor: if s.get("factor").is_some() {
                num("factor")?
            } else {
                1.0
            },
            partial_rotary_factor: match s.get("partial_rotary_factor") {
                None | Some(Value::Null) => 1.0,
                Some(v) => v
                    .as_f64()
                    .filter(|p| (0.0..=1.0).contains(p))
                    .ok_or_else(|| {
                        LoadError::field(
                            path,
                            format!("rope 'partial_rotary_factor' {v} must be in [0, 1]"),
                        )
                    })?,
            },
        },
        other => {
            return Err(LoadError::field(
                path,
                format!("rope scaling type '{other}' is not supported"),
            ))
        }
    })
}

/// `Gemma4TextConfig`'s defaults (transformers 5.24) for the fields a Gemma 4 `config.json` may
/// leave out (`save_pretrained` can write only the fields that differ from them).
pub fn gemma4_default(key: &str) -> Option<Value> {
    use serde_json::json;
    Some(match key {
        "vocab_size" => json!(262_144),
        "hidden_size" => json!(2304),
        "intermediate_size" => json!(9216),
        "num_hidden_layers" => json!(30),
        "num_attention_heads" => json!(8),
        "num_key_value_heads" => json!(4),
        "head_dim" => json!(256),
        "global_head_dim" => json!(512),
        "hidden_activation" => json!("gelu_pytorch_tanh"),
        "max_position_embeddings" => json!(131_072),
        "rms_norm_eps" => json!(1e-6),
        "bos_token_id" => json!(2),
        "eos_token_id" => json!(1),
        "tie_word_embeddings" => json!(true),
        "sliding_window" => json!(512),
        "vocab_size_per_layer_input" => json!(262_144),
        "hidden_size_per_layer_input" => json!(256),
        "attention_k_eq_v" => json!(false),
        "num_kv_shared_layers" => json!(0),
        "enable_moe_block" => json!(false),
        "use_double_wide_mlp" => json!(false),
        "attention_bias" => json!(false),
        "rope_parameters" => json!({
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            "full_attention": {
                "rope_type": "proportional",
                "partial_rotary_factor": 0.25,
                "rope_theta": 1_000_000.0
            }
        }),
        _ => return None,
    })
}

/// Keys [`gemma4_default`] knows.
const GEMMA4_DEFAULT_KEYS: &[&str] = &[
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "rms_norm_eps",
    "bos_token_id",
    "eos_token_id",
    "tie_word_embeddings",
    "sliding_window",
    "rope_parameters",
];

/// A Gemma 4 text config with its missing fields filled in: from the outer multimodal config
/// when it has them (`tie_word_embeddings`, token ids), else the family defaults.
fn fill_gemma4_defaults(c: &Value, outer: &Value) -> Value {
    let mut c = c.clone();
    if let Value::Object(m) = &mut c {
        for &k in GEMMA4_DEFAULT_KEYS {
            if m.get(k).is_none_or(Value::is_null) {
                let v = outer
                    .get(k)
                    .filter(|v| !v.is_null() && outer.get("text_config").is_some())
                    .cloned()
                    .or_else(|| gemma4_default(k));
                if let Some(v) = v {
                    m.insert(k.to_string(), v);
                }
            }
        }
    }
    c
}

/// Reads and parses a `config.json`.
pub fn read_config_json(path: &Path) -> Result<Value, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| LoadError::io(path, e))?;
    serde_json::from_str(&text)
        .map_err(|e| LoadError::malformed(path, format!("invalid JSON: {e}")))
}

/// llama.cpp's name for a `general.file_type` value.
pub fn gguf_file_type_name(v: u64) -> String {
    match v {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        32 => "BF16",
        _ => return format!("file type {v}"),
    }
    .to_string()
}

/// Where a configuration was read from, so a family can read its own extra keys (sliding
/// window patterns, soft-caps, layer types...) from the same source.
#[derive(Clone, Copy)]
pub enum ConfigSource<'a> {
    /// GGUF metadata; keys are looked up under `{general.architecture}.`.
    Gguf(&'a GgufFile),
    /// A parsed `config.json` (fields of `text_config` take precedence when present).
    Json { path: &'a Path, json: &'a Value },
}

impl<'a> ConfigSource<'a> {
    /// The file the configuration came from (for error messages).
    pub fn path(&self) -> &Path {
        match self {
            ConfigSource::Gguf(g) => g.path(),
            ConfigSource::Json { path, .. } => path,
        }
    }

    /// The GGUF file, when the model is one.
    pub fn gguf(&self) -> Option<&'a GgufFile> {
        match self {
            ConfigSource::Gguf(g) => Some(g),
            ConfigSource::Json { .. } => None,
        }
    }

    /// A raw `config.json` field (from `text_config` first, then the top level).
    pub fn json(&self, key: &str) -> Option<&'a Value> {
        match self {
            ConfigSource::Json { json, .. } => json
                .get("text_config")
                .and_then(|t| t.get(key))
                .or_else(|| json.get(key))
                .filter(|v| !v.is_null()),
            ConfigSource::Gguf(_) => None,
        }
    }

    /// A raw GGUF value of `{arch}.{key}`.
    pub fn gguf_value(&self, key: &str) -> Option<&'a crate::gguf::MetaValue> {
        let g = self.gguf()?;
        let arch = g.architecture().ok()?;
        g.get(&format!("{arch}.{key}"))
    }

    /// A number: GGUF `{arch}.{gguf_key}` or `config.json` field `json_key`.
    pub fn f64(&self, gguf_key: &str, json_key: &str) -> Result<Option<f64>, LoadError> {
        match self {
            ConfigSource::Gguf(_) => match self.gguf_value(gguf_key) {
                None => Ok(None),
                Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                    LoadError::field(
                        self.path(),
                        format!("metadata '{gguf_key}' is not a number ({v})"),
                    )
                }),
            },
            ConfigSource::Json { .. } => match self.json(json_key) {
                None => Ok(None),
                Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                    LoadError::field(
                        self.path(),
                        format!("field '{json_key}' is not a number ({v})"),
                    )
                }),
            },
        }
    }

    /// A non-negative integer: GGUF `{arch}.{gguf_key}` or `config.json` field `json_key`.
    pub fn usize(&self, gguf_key: &str, json_key: &str) -> Result<Option<usize>, LoadError> {
        match self.f64(gguf_key, json_key)? {
            None => Ok(None),
            Some(v) if v >= 0.0 && v.fract() == 0.0 && v < 1e15 => Ok(Some(v as usize)),
            Some(v) => Err(LoadError::field(
                self.path(),
                format!("'{gguf_key}' / '{json_key}' must be a non-negative integer, got {v}"),
            )),
        }
    }

    /// A bool: GGUF `{arch}.{gguf_key}` or `config.json` field `json_key`.
    pub fn bool(&self, gguf_key: &str, json_key: &str) -> Result<Option<bool>, LoadError> {
        let (v, name) = match self {
            ConfigSource::Gguf(_) => (self.gguf_value(gguf_key).map(|v| v.as_bool()), gguf_key),
            ConfigSource::Json { .. } => (self.json(json_key).map(|v| v.as_bool()), json_key),
        };
        match v {
            None => Ok(None),
            Some(Some(b)) => Ok(Some(b)),
            Some(None) => Err(LoadError::field(
                self.path(),
                format!("'{name}' is not a bool"),
            )),
        }
    }
}
