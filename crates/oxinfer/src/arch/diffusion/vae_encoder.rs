//! The encoder half of diffusers' `AutoencoderKL`: an image in `[-1, 1]` to the posterior's mean
//! and standard deviation over the latents (for image-to-image). A conv, down blocks of ResNets
//! with stride-2 convs padded only at the right and bottom, the mid block, GroupNorm + SiLU +
//! conv to `2 · latent_channels`, `quant_conv`; `logvar` clamped to `[-30, 20]`.

use super::layers::{lazy_kernels, Conv2d, FeatureMap, Norm, Weights};
use super::resnet::ResnetBlock;
use super::vae::{VaeConfig, VaeMid, VAE_EPS};
use super::DiffusionError;
use crate::backend::NormKind;
use crate::loader::TensorStore;

/// `Downsample2D` with `padding = 0`: one zero row and column appended at the bottom and right,
/// then a 3 × 3 conv of stride 2. Computed as the stride-1 conv (padded on every side) read at
/// odd positions: output `o` then sees input rows `2o ..= 2o + 2`, exactly the asymmetric taps.
struct AsymmetricDownsample {
    conv: Conv2d,
}

impl AsymmetricDownsample {
    fn forward(&self, x: &FeatureMap) -> Result<FeatureMap, DiffusionError> {
        let full = self.conv.forward(x, None)?;
        let (oh, ow, c) = (x.h / 2, x.w / 2, full.c);
        let mut data = Vec::with_capacity(oh * ow * c);
        for y in 0..oh {
            for xx in 0..ow {
                let s = ((2 * y + 1) * full.w + 2 * xx + 1) * c;
                data.extend_from_slice(&full.data[s..s + c]);
            }
        }
        Ok(FeatureMap::new(oh, ow, c, data))
    }
}

struct DownBlock {
    resnets: Vec<ResnetBlock>,
    down: Option<AsymmetricDownsample>,
}

/// The posterior over latents of one image: per latent value, `mean` and `std`
/// (`exp(logvar / 2)`), channels-last `[h/8 · w/8, latent_channels]`.
pub struct Posterior {
    pub mean: FeatureMap,
    pub std: FeatureMap,
}

impl Posterior {
    /// diffusers' `DiagonalGaussianDistribution` of `moments` (the mean's channels, then the
    /// log-variance's): `std = exp(clamp(logvar, −30, 20) / 2)`.
    pub fn from_moments(moments: &FeatureMap) -> Self {
        let l = moments.c / 2;
        let split = |f: &dyn Fn(f32) -> f32, off: usize| {
            let data = moments.data.chunks_exact(2 * l);
            let data = data.flat_map(|px| px[off..off + l].iter().map(|&v| f(v)));
            FeatureMap::new(moments.h, moments.w, l, data.collect())
        };
        Posterior {
            mean: split(&|v| v, 0),
            std: split(&|v| (0.5 * v.clamp(-30.0, 20.0)).exp(), l),
        }
    }
}

/// The VAE encoder.
pub struct VaeEncoder {
    latent_channels: usize,
    in_channels: usize,
    conv_in: Conv2d,
    down: Vec<DownBlock>,
    mid: VaeMid,
    norm_out: Norm,
    conv_out: Conv2d,
    quant_conv: Option<Conv2d>,
}

impl VaeEncoder {
    /// Loads the encoder (`encoder.*`, `quant_conv`) from `store`. Its f32 convolution kernels
    /// are made on the first [`Self::encode`] ([`super::layers::lazy_kernels`]): text to image
    /// never runs the encoder, so it costs no preparation and no kernel memory there.
    pub fn load(cfg: &VaeConfig, store: &dyn TensorStore) -> Result<Self, DiffusionError> {
        lazy_kernels(|| Self::load_now(cfg, store))
    }

    /// [`Self::load`]'s work.
    fn load_now(cfg: &VaeConfig, store: &dyn TensorStore) -> Result<Self, DiffusionError> {
        let ch = &cfg.block_out_channels;
        let n = ch.len();
        let groups = cfg.norm_num_groups;
        let enc = Weights {
            store,
            prefix: "encoder",
        };
        let mut down = Vec::with_capacity(n);
        for b in 0..n {
            let (cin, cout) = (if b == 0 { ch[0] } else { ch[b - 1] }, ch[b]);
            let resnets = (0..cfg.layers_per_block)
                .map(|l| {
                    let p = format!("encoder.down_blocks.{b}.resnets.{l}");
                    let i = if l == 0 { cin } else { cout };
                    ResnetBlock::load(
                        Weights { store, prefix: &p },
                        i,
                        cout,
                        None,
                        groups,
                        VAE_EPS,
                    )
                })
                .collect::<Result<_, _>>()?;
            let down_conv = if b + 1 < n {
                let p = format!("encoder.down_blocks.{b}.downsamplers.0");
                let conv = Conv2d::load(Weights { store, prefix: &p }, "conv", cout, cout, 3, 1)?;
                Some(AsymmetricDownsample { conv })
            } else {
                None
            };
            down.push(DownBlock {
                resnets,
                down: down_conv,
            });
        }
        let (deep, lat2) = (ch[n - 1], 2 * cfg.latent_channels);
        let quant_conv = if cfg.use_quant_conv {
            Some(Conv2d::load(
                Weights { store, prefix: "" },
                "quant_conv",
                lat2,
                lat2,
                1,
                1,
            )?)
        } else {
            None
        };
        Ok(VaeEncoder {
            latent_channels: cfg.latent_channels,
            in_channels: cfg.in_channels,
            conv_in: Conv2d::load(enc, "conv_in", cfg.in_channels, ch[0], 3, 1)?,
            down,
            mid: VaeMid::load(store, "encoder.mid_block", deep, cfg)?,
            norm_out: Norm::load(
                enc,
                "conv_norm_out",
                deep,
                NormKind::Group(groups),
                VAE_EPS,
                true,
            )?,
            conv_out: Conv2d::load(enc, "conv_out", deep, lat2, 3, 1)?,
            quant_conv,
        })
    }

    /// The posterior of `image` (`in_channels` channels, values in `[-1, 1]`).
    ///
    /// # Errors
    /// An image with the wrong channel count.
    pub fn encode(&self, image: &FeatureMap) -> Result<Posterior, DiffusionError> {
        Ok(Posterior::from_moments(&self.moments(image)?))
    }

    /// The posterior's moments of `image` before the split: the encoder and `quant_conv`'s
    /// `2 · latent_channels` channels (the mean's, then the log-variance's, unclamped), at
    /// the latents' size (what diffusers' tiled encode blends).
    ///
    /// # Errors
    /// An image with the wrong channel count.
    pub fn moments(&self, image: &FeatureMap) -> Result<FeatureMap, DiffusionError> {
        if image.c != self.in_channels {
            return Err(DiffusionError::Argument(format!(
                "VAE encoder input has {} channels, the config says in_channels = {}",
                image.c, self.in_channels
            )));
        }
        let mut h = self.conv_in.forward(image, None)?;
        for blk in &self.down {
            for r in &blk.resnets {
                h = r.forward(&h, None)?;
            }
            if let Some(d) = &blk.down {
                h = d.forward(&h)?;
            }
        }
        h = self.mid.forward(&h)?;
        let mut m = self.conv_out.forward(&h, Some(&self.norm_out))?;
        if let Some(q) = &self.quant_conv {
            m = q.forward(&m, None)?;
        }
        debug_assert_eq!(m.c, 2 * self.latent_channels);
        Ok(m)
    }
}
