//! diffusers' `ResnetBlock2D` (GroupNorm + SiLU + conv, twice, with an optional timestep
//! projection and a 1 × 1 shortcut), `Downsample2D` (3 × 3 conv of stride 2, padding 1) and
//! `Upsample2D` (nearest 2× then a 3 × 3 conv).

use super::layers::{add_rows, silu, Conv2d, FeatureMap, Norm, Weights};
use super::DiffusionError;
use crate::backend::NormKind;
use crate::nn::Linear;

/// A residual block from `cin` to `cout` channels.
pub struct ResnetBlock {
    norm1: Norm,
    conv1: Conv2d,
    time_emb_proj: Option<Linear>,
    norm2: Norm,
    conv2: Conv2d,
    shortcut: Option<Conv2d>,
}

impl ResnetBlock {
    /// Loads the block; `temb_dim` is the timestep embedding width (`None` in the VAE).
    pub fn load(
        w: Weights,
        cin: usize,
        cout: usize,
        temb_dim: Option<usize>,
        groups: usize,
        eps: f32,
    ) -> Result<Self, DiffusionError> {
        let gn = |name: &str, c: usize| Norm::load(w, name, c, NormKind::Group(groups), eps, true);
        let time_emb_proj = temb_dim
            .map(|d| Linear::load(w.store, &w.name("time_emb_proj.weight"), cout, d))
            .transpose()?;
        let shortcut = if cin != cout || w.has("conv_shortcut.weight") {
            Some(Conv2d::load(w, "conv_shortcut", cin, cout, 1, 1)?)
        } else {
            None
        };
        Ok(ResnetBlock {
            norm1: gn("norm1", cin)?,
            conv1: Conv2d::load(w, "conv1", cin, cout, 3, 1)?,
            time_emb_proj,
            norm2: gn("norm2", cout)?,
            conv2: Conv2d::load(w, "conv2", cout, cout, 3, 1)?,
            shortcut,
        })
    }

    /// `shortcut(x) + conv2(silu(norm2(conv1(silu(norm1(x))) + proj(silu(temb)))))` for every
    /// image of `x`, all with the same timestep embedding `temb`.
    pub fn forward(
        &self,
        x: &FeatureMap,
        temb: Option<&[f32]>,
    ) -> Result<FeatureMap, DiffusionError> {
        let mut h = self.conv1.forward(x, Some(&self.norm1))?;
        if let (Some(p), Some(t)) = (&self.time_emb_proj, temb) {
            let act: Vec<f32> = t.iter().map(|&v| silu(v)).collect();
            add_rows(&mut h.data, &p.forward(&act, 1));
        }
        let mut out = self.conv2.forward(&h, Some(&self.norm2))?;
        match &self.shortcut {
            Some(s) => out.add_assign(&s.forward(x, None)?),
            None => out.add_assign(x),
        }
        Ok(out)
    }
}

/// A 3 × 3 convolution of stride 2 (`{prefix}.conv`).
pub struct Downsample {
    conv: Conv2d,
}

impl Downsample {
    /// Loads `conv` over `c` channels.
    pub fn load(w: Weights, c: usize) -> Result<Self, DiffusionError> {
        Ok(Downsample {
            conv: Conv2d::load(w, "conv", c, c, 3, 2)?,
        })
    }

    /// Halves the size (rounding up).
    pub fn forward(&self, x: &FeatureMap) -> Result<FeatureMap, DiffusionError> {
        self.conv.forward(x, None)
    }
}

/// Nearest upsampling then a 3 × 3 convolution (`{prefix}.conv`).
pub struct Upsample {
    conv: Conv2d,
}

impl Upsample {
    /// Loads `conv` over `c` channels.
    pub fn load(w: Weights, c: usize) -> Result<Self, DiffusionError> {
        Ok(Upsample {
            conv: Conv2d::load(w, "conv", c, c, 3, 1)?,
        })
    }

    /// Resizes to `size` (`(h, w)`; twice the input when `None`) and convolves.
    pub fn forward(
        &self,
        x: &FeatureMap,
        size: Option<(usize, usize)>,
    ) -> Result<FeatureMap, DiffusionError> {
        let (oh, ow) = size.unwrap_or((2 * x.h, 2 * x.w));
        self.conv.forward(&x.upsample_nearest(oh, ow), None)
    }
}
