//! Single-file checkpoints in the original latent-diffusion (LDM) layout, as most Stable
//! Diffusion 1.x / 2.x files are distributed: one safetensors file with `model.diffusion_model.*`
//! (UNet), `first_stage_model.*` (VAE) and `cond_stage_model.transformer.*` (SD 1.x's CLIP text
//! encoder) or `cond_stage_model.model.*` (SD 2.x's OpenCLIP). [`LdmStore`] shows one component
//! under diffusers' tensor names, mapping each name to its LDM name (the inverse of diffusers'
//! `convert_ldm_*_checkpoint` / `convert_open_clip_checkpoint`), the VAE attention's 1 × 1 conv
//! weights `[c, c, 1, 1]` to the `[c, c]` matrices of diffusers, and OpenCLIP's fused
//! `in_proj_weight` `[3d, d]` / `in_proj_bias` `[3d]` to the rows of `q_proj`, `k_proj`,
//! `v_proj` (borrowed, not copied).

use crate::error::LoadError;
use crate::loader::safetensors::SafetensorsModel;
use crate::loader::{TensorStore, TensorView};
use std::path::Path;

/// Which component a [`LdmStore`] shows, with what its name mapping needs.
#[derive(Clone, Debug)]
pub enum LdmPart {
    /// The CLIP text encoder (`cond_stage_model.transformer.text_model.*`).
    TextEncoder,
    /// The UNet: layers per down block, and per up block whether it has spatial transformers.
    Unet {
        layers_per_block: usize,
        up_attn: Vec<bool>,
    },
    /// The VAE: its number of blocks.
    Vae { blocks: usize },
    /// SD 2.x's OpenCLIP text encoder (`cond_stage_model.model.*`) of `width` features.
    OpenClipText { width: usize },
}

/// One component of an LDM checkpoint seen under diffusers' names.
pub struct LdmStore<'a> {
    pub file: &'a SafetensorsModel,
    pub part: LdmPart,
}

/// ResNet parameter names, diffusers → LDM UNet.
const RESNET: [(&str, &str); 6] = [
    ("norm1", "in_layers.0"),
    ("conv1", "in_layers.2"),
    ("time_emb_proj", "emb_layers.1"),
    ("norm2", "out_layers.0"),
    ("conv2", "out_layers.3"),
    ("conv_shortcut", "skip_connection"),
];

/// VAE attention parameter names, diffusers → LDM.
const VAE_ATTN: [(&str, &str); 5] = [
    ("group_norm", "norm"),
    ("to_q", "q"),
    ("to_k", "k"),
    ("to_v", "v"),
    ("to_out.0", "proj_out"),
];

/// `norm1.weight` → `in_layers.0.weight`.
fn resnet(rest: &[&str]) -> Option<String> {
    let (last, name) = rest.split_last()?;
    let name = name.join(".");
    RESNET
        .iter()
        .find(|(d, _)| *d == name)
        .map(|(_, l)| format!("{l}.{last}"))
}

fn num(s: &str) -> Option<usize> {
    s.parse().ok()
}

/// A diffusers UNet name without prefix → its LDM name (without `model.diffusion_model.`).
pub(super) fn unet_name(k: &str, layers: usize, up_attn: &[bool]) -> Option<String> {
    let p: Vec<&str> = k.split('.').collect();
    let l1 = layers + 1;
    Some(match p[..] {
        ["time_embedding", "linear_1", t] => format!("time_embed.0.{t}"),
        ["time_embedding", "linear_2", t] => format!("time_embed.2.{t}"),
        ["conv_in", t] => format!("input_blocks.0.0.{t}"),
        ["conv_norm_out", t] => format!("out.0.{t}"),
        ["conv_out", t] => format!("out.2.{t}"),
        ["down_blocks", b, "downsamplers", "0", "conv", t] => {
            format!("input_blocks.{}.0.op.{t}", (num(b)? + 1) * l1)
        }
        ["down_blocks", b, "resnets", l, ..] => {
            format!(
                "input_blocks.{}.0.{}",
                1 + num(b)? * l1 + num(l)?,
                resnet(&p[4..])?
            )
        }
        ["down_blocks", b, "attentions", l, ..] => {
            format!(
                "input_blocks.{}.1.{}",
                1 + num(b)? * l1 + num(l)?,
                p[4..].join(".")
            )
        }
        ["mid_block", "resnets", i, ..] => {
            format!("middle_block.{}.{}", 2 * num(i)?, resnet(&p[3..])?)
        }
        ["mid_block", "attentions", "0", ..] => format!("middle_block.1.{}", p[3..].join(".")),
        ["up_blocks", u, "upsamplers", "0", "conv", t] => {
            let u = num(u)?;
            let slot = if *up_attn.get(u)? { 2 } else { 1 };
            format!("output_blocks.{}.{slot}.conv.{t}", u * l1 + layers)
        }
        ["up_blocks", u, "resnets", l, ..] => {
            format!(
                "output_blocks.{}.0.{}",
                num(u)? * l1 + num(l)?,
                resnet(&p[4..])?
            )
        }
        ["up_blocks", u, "attentions", l, ..] => {
            format!(
                "output_blocks.{}.1.{}",
                num(u)? * l1 + num(l)?,
                p[4..].join(".")
            )
        }
        _ => return None,
    })
}

/// A diffusers VAE name → its LDM name.
fn vae_name(k: &str, blocks: usize) -> Option<String> {
    let p: Vec<&str> = k.split('.').collect();
    let shortcut = |rest: &[&str]| rest.join(".").replace("conv_shortcut", "nin_shortcut");
    Some(match p[..] {
        ["quant_conv" | "post_quant_conv", _] | [_, "conv_in" | "conv_out", _] => k.to_string(),
        [side, "conv_norm_out", t] => format!("{side}.norm_out.{t}"),
        [side, "mid_block", "resnets", i, ..] => {
            format!("{side}.mid.block_{}.{}", num(i)? + 1, p[4..].join("."))
        }
        [side, "mid_block", "attentions", "0", .., t] => {
            let name = p[4..p.len() - 1].join(".");
            let (_, l) = VAE_ATTN.iter().find(|(d, _)| *d == name)?;
            format!("{side}.mid.attn_1.{l}.{t}")
        }
        ["encoder", "down_blocks", b, "downsamplers", "0", "conv", t] => {
            format!("encoder.down.{b}.downsample.conv.{t}")
        }
        ["encoder", "down_blocks", b, "resnets", l, ..] => {
            format!("encoder.down.{b}.block.{l}.{}", shortcut(&p[5..]))
        }
        ["decoder", "up_blocks", u, "upsamplers", "0", "conv", t] => {
            format!(
                "decoder.up.{}.upsample.conv.{t}",
                blocks.checked_sub(num(u)? + 1)?
            )
        }
        ["decoder", "up_blocks", u, "resnets", l, ..] => {
            let i = blocks.checked_sub(num(u)? + 1)?;
            format!("decoder.up.{i}.block.{l}.{}", shortcut(&p[5..]))
        }
        _ => return None,
    })
}

/// OpenCLIP's name of transformers' CLIP text model tensor `k` (`text_model.` prefix optional),
/// and for `q_proj` / `k_proj` / `v_proj` which third (0, 1, 2) of the fused `in_proj` it is.
fn open_clip_name(k: &str) -> Option<(String, Option<usize>)> {
    let k = k.strip_prefix("text_model.").unwrap_or(k);
    let p: Vec<&str> = k.split('.').collect();
    let (name, third) = match p[..] {
        ["embeddings", "token_embedding", "weight"] => ("token_embedding.weight".into(), None),
        ["embeddings", "position_embedding", "weight"] => ("positional_embedding".into(), None),
        ["final_layer_norm", t] => (format!("ln_final.{t}"), None),
        ["encoder", "layers", i, ref rest @ ..] => {
            let block = format!("transformer.resblocks.{i}");
            match rest {
                ["layer_norm1", t] => (format!("{block}.ln_1.{t}"), None),
                ["layer_norm2", t] => (format!("{block}.ln_2.{t}"), None),
                ["self_attn", "out_proj", t] => (format!("{block}.attn.out_proj.{t}"), None),
                ["self_attn", qkv, t] => {
                    let third = ["q_proj", "k_proj", "v_proj"]
                        .iter()
                        .position(|x| x == qkv)?;
                    (format!("{block}.attn.in_proj_{t}"), Some(third))
                }
                ["mlp", "fc1", t] => (format!("{block}.mlp.c_fc.{t}"), None),
                ["mlp", "fc2", t] => (format!("{block}.mlp.c_proj.{t}"), None),
                _ => return None,
            }
        }
        _ => return None,
    };
    Some((format!("cond_stage_model.model.{name}"), third))
}

/// Rows `[third · width, (third + 1) · width)` of the fused `t` (`[3 · width, …]` or
/// `[3 · width]`), sharing its bytes.
fn fused_third(t: TensorView, third: usize, width: usize) -> Result<TensorView, LoadError> {
    let rows = t.shape.first().copied().unwrap_or(0);
    if rows != 3 * width || t.format.is_split() {
        return Err(LoadError::tensor(
            t.path(),
            &t.name,
            format!(
                "shape {:?} ({}): expected a fused [{}, ...] float tensor",
                t.shape,
                t.format.name(),
                3 * width
            ),
        ));
    }
    let row_bytes = t.size / rows;
    let mut shape = t.shape.clone();
    shape[0] = width;
    Ok(TensorView {
        offset: t.offset + third * width * row_bytes,
        size: width * row_bytes,
        shape,
        ..t
    })
}

impl LdmStore<'_> {
    /// The LDM name of diffusers' tensor `name` in this component, `None` when it has none (for
    /// OpenCLIP's `q_proj` / `k_proj` / `v_proj`: the fused `in_proj` they are rows of).
    pub fn ldm_name(&self, name: &str) -> Option<String> {
        match &self.part {
            LdmPart::OpenClipText { .. } => open_clip_name(name).map(|(n, _)| n),
            LdmPart::TextEncoder => Some(format!(
                "cond_stage_model.transformer.text_model.{}",
                name.strip_prefix("text_model.").unwrap_or(name)
            )),
            LdmPart::Unet {
                layers_per_block,
                up_attn,
            } => unet_name(name, *layers_per_block, up_attn)
                .map(|n| format!("model.diffusion_model.{n}")),
            LdmPart::Vae { blocks } => {
                vae_name(name, *blocks).map(|n| format!("first_stage_model.{n}"))
            }
        }
    }

    /// Whether the file looks like an LDM checkpoint (has a UNet under `model.diffusion_model.`).
    pub fn is_ldm(file: &SafetensorsModel) -> bool {
        file.entries()
            .any(|(k, _)| k.starts_with("model.diffusion_model."))
    }

    /// Whether `path` is a safetensors file that [`Self::is_ldm`] (false for anything that
    /// does not open).
    pub fn is_ldm_file(path: &Path) -> bool {
        path.is_file() && SafetensorsModel::open(path).is_ok_and(|m| Self::is_ldm(&m))
    }
}

impl TensorStore for LdmStore<'_> {
    fn path(&self) -> &Path {
        self.file.path()
    }

    fn get(&self, name: &str) -> Option<Result<TensorView, LoadError>> {
        if let LdmPart::OpenClipText { width } = self.part {
            let (ldm, third) = open_clip_name(name)?;
            let t = self.file.get(&ldm)?;
            return Some(match third {
                Some(third) => t.and_then(|t| fused_third(t, third, width)),
                None => t,
            });
        }
        let ldm = self.ldm_name(name)?;
        let mut t = match self.file.get(&ldm)? {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        if matches!(self.part, LdmPart::Vae { .. }) && ldm.contains(".mid.attn_1.") {
            if let [o, i, 1, 1] = t.shape[..] {
                t.shape = vec![o, i];
            }
        }
        Some(Ok(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names of the real SD 1.5 layout (2 layers per block, cross-attention in up blocks 1-3).
    #[test]
    fn sd15_names_map_to_ldm_names() {
        let up_attn = [false, true, true, true];
        for (d, l) in [
            (
                "down_blocks.0.resnets.0.norm1.weight",
                "input_blocks.1.0.in_layers.0.weight",
            ),
            (
                "down_blocks.1.resnets.0.conv_shortcut.bias",
                "input_blocks.4.0.skip_connection.bias",
            ),
            (
                "down_blocks.1.downsamplers.0.conv.weight",
                "input_blocks.6.0.op.weight",
            ),
            (
                "down_blocks.2.attentions.1.transformer_blocks.0.attn2.to_k.weight",
                "input_blocks.8.1.transformer_blocks.0.attn2.to_k.weight",
            ),
            (
                "mid_block.resnets.1.time_emb_proj.weight",
                "middle_block.2.emb_layers.1.weight",
            ),
            (
                "up_blocks.0.upsamplers.0.conv.weight",
                "output_blocks.2.1.conv.weight",
            ),
            (
                "up_blocks.1.upsamplers.0.conv.weight",
                "output_blocks.5.2.conv.weight",
            ),
            (
                "up_blocks.3.attentions.2.proj_out.weight",
                "output_blocks.11.1.proj_out.weight",
            ),
            ("time_embedding.linear_2.bias", "time_embed.2.bias"),
            ("conv_out.weight", "out.2.weight"),
        ] {
            assert_eq!(unet_name(d, 2, &up_attn).as_deref(), Some(l), "{d}");
        }
        for (d, l) in [
            (
                "decoder.up_blocks.0.upsamplers.0.conv.weight",
                "decoder.up.3.upsample.conv.weight",
            ),
            (
                "decoder.up_blocks.3.resnets.2.conv_shortcut.weight",
                "decoder.up.0.block.2.nin_shortcut.weight",
            ),
            (
                "encoder.mid_block.attentions.0.to_out.0.bias",
                "encoder.mid.attn_1.proj_out.bias",
            ),
            (
                "encoder.down_blocks.2.downsamplers.0.conv.bias",
                "encoder.down.2.downsample.conv.bias",
            ),
            (
                "decoder.mid_block.resnets.0.norm1.weight",
                "decoder.mid.block_1.norm1.weight",
            ),
            ("post_quant_conv.weight", "post_quant_conv.weight"),
        ] {
            assert_eq!(vae_name(d, 4).as_deref(), Some(l), "{d}");
        }
        assert_eq!(unet_name("nonsense.weight", 2, &up_attn), None);
    }
}
