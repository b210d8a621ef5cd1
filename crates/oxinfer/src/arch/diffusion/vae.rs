//! The decoder half of diffusers' `AutoencoderKL`: latents (`latent_channels` channels, 1/2^(n−1)
//! of the image per side) to an RGB image in about `[-1, 1]`. `post_quant_conv`, a conv, a mid
//! block (ResNet, single-head attention, ResNet), up blocks of ResNets with nearest-upsampling
//! convs, GroupNorm + SiLU + conv.

use super::attention::VaeAttention;
use super::config::JsonConfig;
use super::layers::{Conv2d, FeatureMap, Norm, Weights};
use super::resnet::{ResnetBlock, Upsample};
use super::vae_tiling::TileGeometry;
use super::DiffusionError;
use crate::backend::NormKind;
use crate::loader::TensorStore;

/// GroupNorm epsilon of every norm in the VAE.
pub(crate) const VAE_EPS: f32 = 1e-6;

/// The fields of `vae/config.json` this decoder reads.
#[derive(Clone, Debug)]
pub struct VaeConfig {
    pub latent_channels: usize,
    pub out_channels: usize,
    pub block_out_channels: Vec<usize>,
    pub layers_per_block: usize,
    pub norm_num_groups: usize,
    /// Latents are divided by this before decoding (0.18215 for SD 1.x / 2.x).
    pub scaling_factor: f32,
    pub use_post_quant_conv: bool,
    pub use_quant_conv: bool,
    /// Image channels the encoder takes.
    pub in_channels: usize,
    pub mid_block_add_attention: bool,
    /// The image side it was trained at (`sample_size`; the first value of a list): the tile
    /// side of tiled decoding.
    pub sample_size: usize,
}

impl VaeConfig {
    /// Parses and checks `config.json`.
    pub fn parse(c: &JsonConfig) -> Result<Self, DiffusionError> {
        let block_out_channels = c.usizes("block_out_channels")?;
        if block_out_channels.is_empty() {
            return Err(DiffusionError::config(
                &c.path,
                "field 'block_out_channels' is empty",
            ));
        }
        if c.has("shift_factor") && c.f64_or("shift_factor", 0.0)? != 0.0 {
            return Err(DiffusionError::config(
                &c.path,
                "field 'shift_factor' is set: not supported",
            ));
        }
        for t in c.strings("up_block_types")? {
            if t != "UpDecoderBlock2D" {
                return Err(DiffusionError::config(
                    &c.path,
                    format!("field 'up_block_types': '{t}' is not supported (UpDecoderBlock2D)"),
                ));
            }
        }
        Ok(VaeConfig {
            latent_channels: c.usize_or("latent_channels", 4)?,
            out_channels: c.usize_or("out_channels", 3)?,
            layers_per_block: c.usize_or("layers_per_block", 1)?,
            norm_num_groups: c.usize_or("norm_num_groups", 32)?,
            scaling_factor: c.f64_or("scaling_factor", 0.18215)? as f32,
            use_post_quant_conv: c.bool_or("use_post_quant_conv", true)?,
            use_quant_conv: c.bool_or("use_quant_conv", true)?,
            in_channels: c.usize_or("in_channels", 3)?,
            mid_block_add_attention: c.bool_or("mid_block_add_attention", true)?,
            sample_size: match c.json.get("sample_size") {
                Some(serde_json::Value::Array(_)) => {
                    c.usizes("sample_size")?.first().copied().unwrap_or(32)
                }
                _ => c.usize_or("sample_size", 32)?,
            },
            block_out_channels,
        })
    }

    /// Image pixels per latent pixel, per side (`2^(blocks − 1)`, 8 for SD).
    pub fn scale(&self) -> usize {
        1 << (self.block_out_channels.len() - 1)
    }

    /// The tiles of tiled decoding: `sample_size` image pixels, `sample_size / scale` latent
    /// pixels (diffusers' `tile_sample_min_size`, `tile_latent_min_size`).
    pub fn tiles(&self) -> TileGeometry {
        TileGeometry {
            sample: self.sample_size,
            latent: self.sample_size / self.scale(),
        }
    }
}

/// The VAE's mid block (encoder and decoder alike): ResNet, optional single-head attention,
/// ResNet, over `c` channels.
pub(crate) struct VaeMid {
    res: [ResnetBlock; 2],
    attn: Option<VaeAttention>,
}

impl VaeMid {
    /// Loads `{prefix}.resnets.{0,1}` and `{prefix}.attentions.0`.
    pub(crate) fn load(
        store: &dyn TensorStore,
        prefix: &str,
        c: usize,
        cfg: &VaeConfig,
    ) -> Result<Self, DiffusionError> {
        let g = cfg.norm_num_groups;
        let resnet = |i: usize| {
            let p = format!("{prefix}.resnets.{i}");
            ResnetBlock::load(Weights { store, prefix: &p }, c, c, None, g, VAE_EPS)
        };
        let attn = if cfg.mid_block_add_attention {
            let p = format!("{prefix}.attentions.0");
            Some(VaeAttention::load(
                Weights { store, prefix: &p },
                c,
                g,
                VAE_EPS,
            )?)
        } else {
            None
        };
        Ok(VaeMid {
            res: [resnet(0)?, resnet(1)?],
            attn,
        })
    }

    /// `res1(attn(res0(x)))`.
    pub(crate) fn forward(&self, x: &FeatureMap) -> Result<FeatureMap, DiffusionError> {
        let mut h = self.res[0].forward(x, None)?;
        if let Some(a) = &self.attn {
            h = a.forward(&h)?;
        }
        self.res[1].forward(&h, None)
    }
}

/// One up block: resnets, then an optional upsampler.
struct UpBlock {
    resnets: Vec<ResnetBlock>,
    up: Option<Upsample>,
}

/// The VAE decoder.
pub struct VaeDecoder {
    /// Its configuration.
    pub config: VaeConfig,
    post_quant_conv: Option<Conv2d>,
    conv_in: Conv2d,
    mid: VaeMid,
    up: Vec<UpBlock>,
    norm_out: Norm,
    conv_out: Conv2d,
}

impl VaeDecoder {
    /// Loads the decoder from `store` (diffusers' `AutoencoderKL` tensor names).
    pub fn load(cfg: VaeConfig, store: &dyn TensorStore) -> Result<Self, DiffusionError> {
        let ch = &cfg.block_out_channels;
        let n = ch.len();
        let groups = cfg.norm_num_groups;
        let dec = Weights {
            store,
            prefix: "decoder",
        };
        let resnet = |p: String, i, o| {
            ResnetBlock::load(Weights { store, prefix: &p }, i, o, None, groups, VAE_EPS)
        };
        let deep = ch[n - 1];
        let mut up = Vec::with_capacity(n);
        let mut prev = deep;
        for u in 0..n {
            let cout = ch[n - 1 - u];
            let resnets = (0..cfg.layers_per_block + 1)
                .map(|l| {
                    resnet(
                        format!("decoder.up_blocks.{u}.resnets.{l}"),
                        if l == 0 { prev } else { cout },
                        cout,
                    )
                })
                .collect::<Result<_, _>>()?;
            let up_conv = if u + 1 < n {
                let p = format!("decoder.up_blocks.{u}.upsamplers.0");
                Some(Upsample::load(Weights { store, prefix: &p }, cout)?)
            } else {
                None
            };
            up.push(UpBlock {
                resnets,
                up: up_conv,
            });
            prev = cout;
        }
        let lat = cfg.latent_channels;
        let post_quant_conv = if cfg.use_post_quant_conv {
            Some(Conv2d::load(
                Weights { store, prefix: "" },
                "post_quant_conv",
                lat,
                lat,
                1,
                1,
            )?)
        } else {
            None
        };
        Ok(VaeDecoder {
            post_quant_conv,
            conv_in: Conv2d::load(dec, "conv_in", lat, deep, 3, 1)?,
            mid: VaeMid::load(store, "decoder.mid_block", deep, &cfg)?,
            up,
            norm_out: Norm::load(
                dec,
                "conv_norm_out",
                ch[0],
                NormKind::Group(groups),
                VAE_EPS,
                true,
            )?,
            conv_out: Conv2d::load(dec, "conv_out", ch[0], cfg.out_channels, 3, 1)?,
            config: cfg,
        })
    }

    /// Decodes `z` (already divided by the scaling factor) to the raw image (`out_channels`
    /// channels, `scale()` times larger per side).
    ///
    /// # Errors
    /// `z` with the wrong channel count.
    pub fn decode(&self, z: &FeatureMap) -> Result<FeatureMap, DiffusionError> {
        if z.c != self.config.latent_channels {
            return Err(DiffusionError::Argument(format!(
                "VAE input has {} channels, the config says latent_channels = {}",
                z.c, self.config.latent_channels
            )));
        }
        let z = match &self.post_quant_conv {
            Some(c) => c.forward(z, None)?,
            None => z.clone(),
        };
        let mut h = self.conv_in.forward(&z, None)?;
        h = self.mid.forward(&h)?;
        for blk in &self.up {
            for r in &blk.resnets {
                h = r.forward(&h, None)?;
            }
            if let Some(u) = &blk.up {
                h = u.forward(&h, None)?;
            }
        }
        self.conv_out.forward(&h, Some(&self.norm_out))
    }
}
