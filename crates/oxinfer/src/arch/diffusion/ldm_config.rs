//! diffusers configs inferred from a single-file LDM checkpoint's tensor names and shapes, for
//! files given without a diffusers folder, as diffusers' `from_single_file` does without a
//! config. The family comes from the text encoder's keys: SD 1.x has OpenAI's CLIP under
//! `cond_stage_model.transformer.`, SD 2.x OpenCLIP under `cond_stage_model.model.` (and the
//! UNet's cross-attention width must match the encoder's); the model type
//! ([`super::ldm_model_type`]) adds inpainting (9 UNet input channels). Sizes (channels, blocks,
//! layers, attention placement, vocabulary) are read from the shapes; what shapes cannot tell is
//! the family's value in the configs of `stable-diffusion-v1-5` / `stable-diffusion-2-1`: 8 UNet
//! heads (SD 1.x) or 64-wide heads (SD 2.x), 64-wide text encoder heads, 32 norm groups, the noise
//! schedule; the prediction type, image size and timestep spacing are the model type's unless
//! given ([`SingleFileOptions`]).

use super::ldm::LdmPart;
use super::ldm_model_type::{
    prediction_name, spacing_name, InferredModel, ModelType, SingleFileOptions,
};
use super::scheduler::Spacing;
use super::DiffusionError;
use crate::loader::safetensors::SafetensorsModel;
use crate::loader::TensorStore;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;

/// The UNet's tensors in an LDM file.
const UNET: &str = "model.diffusion_model.";
/// The VAE's tensors.
const VAE: &str = "first_stage_model.";
/// SD 1.x's CLIP text model.
const CLIP: &str = "cond_stage_model.transformer.text_model.";
/// SD 2.x's OpenCLIP text model.
const OPEN_CLIP: &str = "cond_stage_model.model.";

/// Which Stable Diffusion generation a checkpoint is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// SD 1.x: CLIP ViT-L/14 text encoder (`quick_gelu`), `<|endoftext|>` padding, epsilon.
    Sd1,
    /// SD 2.x: OpenCLIP ViT-H text encoder (`gelu`, penultimate layer), `!` padding,
    /// v-prediction at 768 × 768 (as `stable-diffusion-2-1`).
    Sd2,
}

impl Family {
    /// The tokenizer's pad token.
    pub fn pad_token(self) -> &'static str {
        match self {
            Family::Sd1 => "<|endoftext|>",
            Family::Sd2 => "!",
        }
    }
}

/// Every config a pipeline needs, as the JSON diffusers would have in its folder.
pub struct InferredConfigs {
    /// The model type and the values the file cannot tell.
    pub model: InferredModel,
    pub text_encoder: Value,
    pub unet: Value,
    pub vae: Value,
    pub scheduler: Value,
    /// How the text encoder's tensors are named in the file.
    pub text_part: LdmPart,
}

/// Tensor shapes by name, with the error of a missing one.
struct Shapes<'a> {
    path: &'a Path,
    map: HashMap<&'a str, &'a [usize]>,
}

impl<'a> Shapes<'a> {
    fn get(&self, name: &str) -> Option<&'a [usize]> {
        self.map.get(name).copied()
    }

    /// Dimension `d` of tensor `name`, or an error naming it.
    fn dim(&self, name: &str, d: usize) -> Result<usize, DiffusionError> {
        self.get(name)
            .and_then(|s| s.get(d).copied())
            .ok_or_else(|| {
                DiffusionError::config(
                    self.path,
                    format!("cannot infer the config: tensor '{name}' is missing (or has fewer than {} dimensions)", d + 1),
                )
            })
    }

    /// `1 + the largest i` of names `{prefix}{i}.…` (0 when none).
    fn count(&self, prefix: &str) -> usize {
        self.map
            .keys()
            .filter_map(|k| {
                k.strip_prefix(prefix)?
                    .split('.')
                    .next()?
                    .parse::<usize>()
                    .ok()
            })
            .map(|i| i + 1)
            .max()
            .unwrap_or(0)
    }

    fn err(&self, what: String) -> DiffusionError {
        DiffusionError::config(self.path, format!("cannot infer the config: {what}"))
    }
}

/// Whether `file` holds SD 2.x's OpenCLIP text encoder (`cond_stage_model.model.*`).
pub fn has_open_clip(file: &SafetensorsModel) -> bool {
    file.entries()
        .any(|(k, _)| k.starts_with(OPEN_CLIP) && k.ends_with("token_embedding.weight"))
}

/// Heads of width 64 over `width` features, or an error naming `what`.
fn heads_of_64(s: &Shapes, width: usize, what: &str) -> Result<usize, DiffusionError> {
    if width == 0 || !width.is_multiple_of(64) {
        return Err(s.err(format!(
            "{what} is {width} wide, not a multiple of the family's 64-wide heads"
        )));
    }
    Ok(width / 64)
}

/// The configs of the LDM checkpoint `file`, with what the file cannot tell taken from `opts`
/// (or the model type's defaults).
///
/// # Errors
/// As [`infer_shapes`].
pub fn infer(
    file: &SafetensorsModel,
    opts: SingleFileOptions,
) -> Result<InferredConfigs, DiffusionError> {
    let shapes: Vec<(&str, &[usize])> = file
        .entries()
        .map(|(k, e)| (k.as_str(), e.shape.as_slice()))
        .collect();
    infer_shapes(file.path(), shapes, opts)
}

/// The configs of an LDM checkpoint from its tensors' names and shapes (`shapes`; `path` names
/// the file in errors): the model type as diffusers infers it ([`ModelType::of`]: the text
/// encoder's layout, 9 UNet input channels for inpainting), the sizes from the shapes, the
/// family's fixed values, and the prediction type, image size and timestep spacing of `opts` or
/// the model type.
///
/// # Errors
/// No text encoder of a known layout (an SDXL checkpoint named as such), a tensor the inference
/// reads is missing, shapes that do not fit the family, an image size that is not a positive
/// multiple of the VAE's scale; each names the file and the tensor or value.
pub fn infer_shapes<'a>(
    path: &'a Path,
    shapes: impl IntoIterator<Item = (&'a str, &'a [usize])>,
    opts: SingleFileOptions,
) -> Result<InferredConfigs, DiffusionError> {
    let s = Shapes {
        path,
        map: shapes.into_iter().collect(),
    };
    let (family, text_encoder, text_part) = text_encoder(&s)?;
    let model_type = ModelType::of(family, s.dim(&format!("{UNET}input_blocks.0.0.weight"), 1)?);
    let image_size = opts.image_size.unwrap_or(model_type.image_size());
    let vae = vae(&s, image_size)?;
    let scale = 1usize << (vae["block_out_channels"].as_array().map_or(1, Vec::len) - 1);
    if image_size == 0 || !image_size.is_multiple_of(scale) {
        return Err(DiffusionError::Argument(format!(
            "image size {image_size}: must be a positive multiple of the VAE's scale {scale}"
        )));
    }
    let unet = unet(&s, family, image_size / scale)?;
    let width = text_encoder["hidden_size"].as_u64().unwrap_or(0);
    if unet["cross_attention_dim"].as_u64() != Some(width) {
        return Err(s.err(format!(
            "the UNet's cross-attention is {} wide, the text encoder {width}",
            unet["cross_attention_dim"]
        )));
    }
    let prediction = opts.prediction.unwrap_or(model_type.prediction());
    let spacing = opts.spacing.unwrap_or(Spacing::Linspace);
    Ok(InferredConfigs {
        model: InferredModel {
            family,
            model_type,
            prediction,
            image_size,
            spacing,
            options: opts,
            builtin_tokenizer: false,
        },
        text_encoder,
        unet,
        vae,
        scheduler: json!({
            "_class_name": "EulerDiscreteScheduler",
            "num_train_timesteps": 1000,
            "beta_start": 0.00085,
            "beta_end": 0.012,
            "beta_schedule": "scaled_linear",
            "steps_offset": 1,
            "prediction_type": prediction_name(prediction),
            "timestep_spacing": spacing_name(spacing),
        }),
        text_part,
    })
}

/// The text encoder's family, config and naming.
fn text_encoder(s: &Shapes) -> Result<(Family, Value, LdmPart), DiffusionError> {
    let (family, token, pos, layers, fc1) = if s
        .get(&format!("{CLIP}embeddings.token_embedding.weight"))
        .is_some()
    {
        let layers = s.count(&format!("{CLIP}encoder.layers."));
        (
            Family::Sd1,
            format!("{CLIP}embeddings.token_embedding.weight"),
            format!("{CLIP}embeddings.position_embedding.weight"),
            layers,
            format!("{CLIP}encoder.layers.0.mlp.fc1.weight"),
        )
    } else if s
        .get(&format!("{OPEN_CLIP}token_embedding.weight"))
        .is_some()
    {
        // SD 2.x conditions on the penultimate layer: diffusers' config keeps all but the last.
        let blocks = s.count(&format!("{OPEN_CLIP}transformer.resblocks."));
        (
            Family::Sd2,
            format!("{OPEN_CLIP}token_embedding.weight"),
            format!("{OPEN_CLIP}positional_embedding"),
            blocks.saturating_sub(1),
            format!("{OPEN_CLIP}transformer.resblocks.0.mlp.c_fc.weight"),
        )
    } else if s
        .map
        .keys()
        .any(|k| k.starts_with("conditioner.embedders."))
    {
        return Err(s.err(
            "an SDXL checkpoint (conditioner.embedders.*): only SD 1.x and 2.x single files load"
                .into(),
        ));
    } else {
        return Err(s.err(format!(
            "not a Stable Diffusion 1.x / 2.x checkpoint: no text encoder of a known layout \
             ({CLIP}* for SD 1.x, {OPEN_CLIP}* for SD 2.x)"
        )));
    };
    if layers == 0 {
        return Err(s.err("the text encoder has no layers".into()));
    }
    let hidden = s.dim(&token, 1)?;
    let act = match family {
        Family::Sd1 => "quick_gelu",
        Family::Sd2 => "gelu",
    };
    let cfg = json!({
        "vocab_size": s.dim(&token, 0)?,
        "hidden_size": hidden,
        "intermediate_size": s.dim(&fc1, 0)?,
        "num_hidden_layers": layers,
        "num_attention_heads": heads_of_64(s, hidden, "the text encoder")?,
        "max_position_embeddings": s.dim(&pos, 0)?,
        "layer_norm_eps": 1e-5,
        "hidden_act": act,
    });
    let part = match family {
        Family::Sd1 => LdmPart::TextEncoder,
        Family::Sd2 => LdmPart::OpenClipText { width: hidden },
    };
    Ok((family, cfg, part))
}

/// The UNet's config: blocks from the downsamplers' positions, channels from the ResNets.
fn unet(s: &Shapes, family: Family, sample_size: usize) -> Result<Value, DiffusionError> {
    let name = |rest: &str| format!("{UNET}{rest}");
    let ch0 = s.dim(&name("input_blocks.0.0.weight"), 0)?;
    let in_channels = s.dim(&name("input_blocks.0.0.weight"), 1)?;
    let outputs = s.count(&name("output_blocks."));
    // The first downsampler sits after `layers_per_block` ResNets (input block L + 1).
    let first_op = (1..s.count(&name("input_blocks."))).find(|k| {
        s.get(&name(&format!("input_blocks.{k}.0.op.weight")))
            .is_some()
    });
    let per = match first_op {
        Some(k) => k,
        None => s.count(&name("input_blocks.")),
    };
    if per < 2 || outputs == 0 || !outputs.is_multiple_of(per) {
        return Err(s.err(format!(
            "{UNET}: {outputs} output blocks do not make whole blocks of {per} layers"
        )));
    }
    let (layers, n) = (per - 1, outputs / per);
    let mut channels = Vec::with_capacity(n);
    let (mut down_types, mut up_types, mut depth) = (Vec::new(), Vec::new(), Vec::new());
    let mut cross = None;
    let mut linear = false;
    for b in 0..n {
        let first = 1 + b * per;
        channels.push(s.dim(
            &name(&format!("input_blocks.{first}.0.out_layers.3.weight")),
            0,
        )?);
        let attn = format!("input_blocks.{first}.1.");
        match s.get(&name(&format!("{attn}proj_in.weight"))) {
            Some(shape) => {
                down_types.push("CrossAttnDownBlock2D");
                depth.push(s.count(&name(&format!("{attn}transformer_blocks."))).max(1));
                linear = shape.len() == 2;
                let k = name(&format!("{attn}transformer_blocks.0.attn2.to_k.weight"));
                cross = Some(s.dim(&k, 1)?);
            }
            None => {
                down_types.push("DownBlock2D");
                depth.push(1);
            }
        }
        let up = if s
            .get(&name(&format!(
                "output_blocks.{}.1.proj_in.weight",
                b * per
            )))
            .is_some()
        {
            "CrossAttnUpBlock2D"
        } else {
            "UpBlock2D"
        };
        up_types.push(up);
    }
    let cross = match cross {
        Some(c) => c,
        None => s.dim(
            &name("middle_block.1.transformer_blocks.0.attn2.to_k.weight"),
            1,
        )?,
    };
    let heads: Vec<usize> = match family {
        Family::Sd1 => vec![8; n],
        Family::Sd2 => channels
            .iter()
            .map(|&c| heads_of_64(s, c, "a UNet block"))
            .collect::<Result<_, _>>()?,
    };
    if channels[0] != ch0 {
        return Err(s.err(format!(
            "{UNET}input_blocks.0.0.weight has {ch0} channels, the first block {}",
            channels[0]
        )));
    }
    Ok(json!({
        "in_channels": in_channels,
        "out_channels": s.dim(&name("out.2.weight"), 0)?,
        "block_out_channels": channels,
        "layers_per_block": layers,
        "down_block_types": down_types,
        "up_block_types": up_types,
        "cross_attention_dim": cross,
        "attention_head_dim": heads,
        "transformer_layers_per_block": depth,
        "use_linear_projection": linear,
        "norm_num_groups": 32,
        "norm_eps": 1e-5,
        "flip_sin_to_cos": true,
        "freq_shift": 0,
        "sample_size": sample_size,
    }))
}

/// The VAE's config: levels and channels from the decoder, layers from the encoder.
fn vae(s: &Shapes, side: usize) -> Result<Value, DiffusionError> {
    let name = |rest: &str| format!("{VAE}{rest}");
    let n = s.count(&name("decoder.up."));
    if n == 0 {
        return Err(s.err(format!("no VAE decoder ({VAE}decoder.up.*)")));
    }
    let channels = (0..n)
        .map(|i| s.dim(&name(&format!("decoder.up.{i}.block.0.conv2.weight")), 0))
        .collect::<Result<Vec<_>, _>>()?;
    let (down_types, up_types) = (vec!["DownEncoderBlock2D"; n], vec!["UpDecoderBlock2D"; n]);
    let layers = match s.count(&name("encoder.down.0.block.")) {
        0 => s.count(&name("decoder.up.0.block.")).saturating_sub(1),
        l => l,
    };
    let in_channels = s
        .get(&name("encoder.conv_in.weight"))
        .and_then(|v| v.get(1).copied())
        .unwrap_or(3);
    Ok(json!({
        "in_channels": in_channels,
        "out_channels": s.dim(&name("decoder.conv_out.weight"), 0)?,
        "latent_channels": s.dim(&name("decoder.conv_in.weight"), 1)?,
        "block_out_channels": channels,
        "down_block_types": down_types,
        "up_block_types": up_types,
        "layers_per_block": layers,
        "norm_num_groups": 32,
        "scaling_factor": 0.18215,
        "sample_size": side,
        "use_quant_conv": s.get(&name("quant_conv.weight")).is_some(),
        "use_post_quant_conv": s.get(&name("post_quant_conv.weight")).is_some(),
        "mid_block_add_attention": s.get(&name("decoder.mid.attn_1.q.weight")).is_some(),
    }))
}
