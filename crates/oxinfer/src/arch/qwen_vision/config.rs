//! `vision_config` of a Qwen 3.5 checkpoint (transformers `Qwen3_5VisionConfig`, the Qwen3-VL
//! vision config without deepstack), with transformers' defaults for absent fields.

use crate::error::LoadError;
use crate::nn::encoder_act::EncoderAct;
use serde_json::Value;

/// Shape and settings of the vision tower.
#[derive(Clone, Debug, PartialEq)]
pub struct VisionConfig {
    /// Encoder blocks (`depth`).
    pub depth: usize,
    /// Width of the encoder.
    pub hidden: usize,
    /// Width of the blocks' MLP.
    pub ffn: usize,
    pub heads: usize,
    /// Activation of the blocks' MLP (`hidden_act`).
    pub act: EncoderAct,
    /// Input channels (3).
    pub channels: usize,
    /// Patch side in pixels.
    pub patch: usize,
    /// Frames per temporal patch (an image is repeated that many times).
    pub temporal_patch: usize,
    /// Side of the square of patches the merger joins into one soft token.
    pub merge: usize,
    /// Width of the soft tokens (the text model's hidden size).
    pub out_hidden: usize,
    /// Entries of the learned position table (a square grid of `⌊√n⌋²` is used).
    pub positions: usize,
    /// Base of the 2-D rotary frequencies.
    pub rope_theta: f64,
}

impl VisionConfig {
    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads.max(1)
    }

    /// Values of one flattened patch: `channels × temporal_patch × patch²`.
    pub fn patch_values(&self) -> usize {
        self.channels * self.temporal_patch * self.patch * self.patch
    }

    /// Side of the learned position grid (`int(num_position_embeddings ** 0.5)`).
    pub fn grid_side(&self) -> usize {
        self.positions.isqrt()
    }

    /// Reads `vision_config`; `err` names the field at fault.
    pub fn from_json(v: &Value, err: &dyn Fn(String) -> LoadError) -> Result<Self, LoadError> {
        let num = |keys: &[&str], d: usize| -> Result<usize, LoadError> {
            match keys.iter().find_map(|k| v.get(*k).filter(|x| !x.is_null())) {
                None => Ok(d),
                Some(x) => x.as_u64().map(|x| x as usize).ok_or_else(|| {
                    err(format!("vision_config.{} must be a whole number", keys[0]))
                }),
            }
        };
        let act_name = v
            .get("hidden_act")
            .and_then(Value::as_str)
            .unwrap_or("gelu_pytorch_tanh");
        let act = EncoderAct::parse(act_name).ok_or_else(|| {
            err(format!(
                "vision_config.hidden_act {act_name} is not supported"
            ))
        })?;
        let rope = v.get("rope_parameters");
        if let Some(t) = rope
            .and_then(|r| r.get("rope_type"))
            .and_then(Value::as_str)
        {
            if t != "axial" && t != "default" {
                return Err(err(format!(
                    "vision_config rope_type {t} is not supported (axial is)"
                )));
            }
        }
        if v.get("deepstack_visual_indexes")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
        {
            return Err(err(
                "vision_config.deepstack_visual_indexes (Qwen3-VL deepstack features) is not \
                 supported: Qwen 3.5's tower has none"
                    .into(),
            ));
        }
        let cfg = VisionConfig {
            depth: num(&["depth", "num_hidden_layers"], 27)?,
            hidden: num(&["hidden_size"], 1152)?,
            ffn: num(&["intermediate_size"], 4304)?,
            heads: num(&["num_heads", "num_attention_heads"], 16)?,
            act,
            channels: num(&["in_channels"], 3)?,
            patch: num(&["patch_size"], 16)?,
            temporal_patch: num(&["temporal_patch_size"], 2)?,
            merge: num(&["spatial_merge_size"], 2)?,
            out_hidden: num(&["out_hidden_size"], 3584)?,
            positions: num(&["num_position_embeddings"], 2304)?,
            rope_theta: rope
                .and_then(|r| r.get("rope_theta"))
                .and_then(Value::as_f64)
                .unwrap_or(10_000.0),
        };
        if cfg.heads == 0
            || !cfg.hidden.is_multiple_of(cfg.heads)
            || !cfg.head_dim().is_multiple_of(4)
            || cfg.patch == 0
            || cfg.temporal_patch == 0
            || cfg.merge == 0
            || cfg.channels != 3
            || cfg.grid_side() == 0
        {
            return Err(err(format!(
                "vision_config: hidden {} over {} heads, patch {}, temporal patch {}, merge {}, \
                 {} channels, {} position embeddings are not a usable shape",
                cfg.hidden,
                cfg.heads,
                cfg.patch,
                cfg.temporal_patch,
                cfg.merge,
                cfg.channels,
                cfg.positions
            )));
        }
        Ok(cfg)
    }
}
