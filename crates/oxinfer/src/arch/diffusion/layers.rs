//! The small building blocks of the UNet and the VAE: channels-last feature maps, the 2-D
//! convolution layer of [`super::conv`] (re-exported), GroupNorm / LayerNorm over
//! [`crate::nn::conv_input_norm`], nearest upsampling, channel concatenation, the sinusoidal
//! timestep embedding and the activations.

pub use super::conv::{
    lazy_kernels, unfold_conv_weight, Conv2d, WINOGRAD_MAX_CHANNEL_PAIRS, WINOGRAD_MIN_CIN,
};
use super::DiffusionError;
use crate::backend::{ConvGeom, NormKind, NormSpec};
use crate::loader::TensorStore;
use crate::nn::conv_input_norm;

/// A batch of channels-last feature maps of one size: `data` is `[images][h * w][c]` (each
/// image pixel-major, channels contiguous). Convolutions and linear layers run over the rows
/// of all images at once; norms and attention keep to each image.
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureMap {
    pub h: usize,
    pub w: usize,
    pub c: usize,
    /// Images in the batch (1 outside classifier-free guidance).
    pub images: usize,
    pub data: Vec<f32>,
}

impl FeatureMap {
    /// One image `[h * w, c]`.
    pub fn new(h: usize, w: usize, c: usize, data: Vec<f32>) -> Self {
        debug_assert_eq!(data.len(), h * w * c);
        FeatureMap {
            h,
            w,
            c,
            images: 1,
            data,
        }
    }

    /// From one NCHW image (`[c, h, w]`, batch item already selected).
    pub fn from_chw(chw: &[f32], c: usize, h: usize, w: usize) -> Self {
        Self::from_nchw(chw, 1, c, h, w)
    }

    /// From a batch of `images` NCHW images (`[images, c, h, w]`).
    pub fn from_nchw(nchw: &[f32], images: usize, c: usize, h: usize, w: usize) -> Self {
        assert_eq!(
            nchw.len(),
            images * c * h * w,
            "NCHW buffer of {images}x{c}x{h}x{w}"
        );
        let mut data = vec![0f32; nchw.len()];
        for (src, dst) in nchw
            .chunks_exact(c * h * w)
            .zip(data.chunks_exact_mut(c * h * w))
        {
            for ch in 0..c {
                for p in 0..h * w {
                    dst[p * c + ch] = src[ch * h * w + p];
                }
            }
        }
        FeatureMap {
            h,
            w,
            c,
            images,
            data,
        }
    }

    /// As NCHW `[images, c, h, w]`.
    pub fn to_chw(&self) -> Vec<f32> {
        let hw = self.h * self.w;
        let mut out = vec![0f32; self.data.len()];
        for (src, dst) in self
            .data
            .chunks_exact(hw * self.c)
            .zip(out.chunks_exact_mut(hw * self.c))
        {
            for p in 0..hw {
                for ch in 0..self.c {
                    dst[ch * hw + p] = src[p * self.c + ch];
                }
            }
        }
        out
    }

    /// Pixels of one image (`h * w`).
    pub fn pixels(&self) -> usize {
        self.h * self.w
    }

    /// `self` and `other` (same size and batch) concatenated along channels:
    /// `[images][h * w][c + other.c]`.
    pub fn concat_channels(&self, other: &FeatureMap) -> FeatureMap {
        assert_eq!(
            (self.h, self.w, self.images),
            (other.h, other.w, other.images),
            "concat of maps of other sizes"
        );
        let c = self.c + other.c;
        let mut data = Vec::with_capacity(self.data.len() + other.data.len());
        for (a, b) in self
            .data
            .chunks_exact(self.c)
            .zip(other.data.chunks_exact(other.c))
        {
            data.extend_from_slice(a);
            data.extend_from_slice(b);
        }
        FeatureMap { c, data, ..*self }
    }

    /// Nearest-neighbour resize of each image to `oh × ow` (source pixel `floor(dst · in / out)`
    /// per axis, as torch's `interpolate(mode="nearest")`).
    pub fn upsample_nearest(&self, oh: usize, ow: usize) -> FeatureMap {
        let mut data = Vec::with_capacity(self.images * oh * ow * self.c);
        for image in self.data.chunks_exact(self.pixels() * self.c) {
            for y in 0..oh {
                let sy = y * self.h / oh;
                for x in 0..ow {
                    let sx = x * self.w / ow;
                    let s = (sy * self.w + sx) * self.c;
                    data.extend_from_slice(&image[s..s + self.c]);
                }
            }
        }
        FeatureMap {
            h: oh,
            w: ow,
            data,
            ..*self
        }
    }

    /// `self += other`, element by element, on the thread pool.
    pub fn add_assign(&mut self, other: &FeatureMap) {
        assert_eq!(
            self.data.len(),
            other.data.len(),
            "sum of maps of other shapes"
        );
        zip_apply(&mut self.data, &other.data, |a, b| *a += b);
    }
}

/// Values per pool task of the element-wise helpers ([`zip_apply`]).
const ELEMENTWISE_PART: usize = 1 << 15;

/// `f(a, b)` for every pair of `a` and `b` (same length), in parts of [`ELEMENTWISE_PART`]
/// values on the thread pool (inline when there is one part).
pub fn zip_apply(a: &mut [f32], b: &[f32], f: impl Fn(&mut f32, f32) + Sync) {
    assert_eq!(a.len(), b.len(), "element-wise operands of other lengths");
    let mut parts: Vec<&mut [f32]> = a.chunks_mut(ELEMENTWISE_PART).collect();
    oxinfer_kernels::pool::for_each_mut(&mut parts, |i, part| {
        let src = &b[i * ELEMENTWISE_PART..];
        part.iter_mut().zip(src).for_each(|(x, &y)| f(x, y));
    });
}

/// `row += v` for every row (`v.len()` values) of `x`, in parts on the thread pool.
pub fn add_rows(x: &mut [f32], v: &[f32]) {
    map_rows(x, v.len(), &[], 0, |row, _| {
        row.iter_mut().zip(v).for_each(|(a, b)| *a += b)
    });
}

/// `f(out_row, src_row)` for every row of `out` (`out_w` values) and the same row of `src`
/// (`src_w` values; `src` may be empty with `src_w` 0), rows in parts of about
/// [`ELEMENTWISE_PART`] values on the thread pool.
pub fn map_rows(
    out: &mut [f32],
    out_w: usize,
    src: &[f32],
    src_w: usize,
    f: impl Fn(&mut [f32], &[f32]) + Sync,
) {
    let rows = (ELEMENTWISE_PART / out_w.max(src_w).max(1)).max(1);
    let mut parts: Vec<&mut [f32]> = out.chunks_mut(rows * out_w.max(1)).collect();
    oxinfer_kernels::pool::for_each_mut(&mut parts, |i, part| {
        for (r, o) in part.chunks_exact_mut(out_w.max(1)).enumerate() {
            let s = (i * rows + r) * src_w;
            f(o, &src[s..s + src_w]);
        }
    });
}

/// `f(0)`, `f(1)`, … `f(images − 1)` one after another (a per-image step over a batch; one
/// image's result is returned as it is, without a copy).
///
/// # Errors
/// The first error of `f`.
pub fn concat_images<E>(
    images: usize,
    mut f: impl FnMut(usize) -> Result<Vec<f32>, E>,
) -> Result<Vec<f32>, E> {
    let mut out = f(0)?;
    for i in 1..images {
        out.extend(f(i)?);
    }
    Ok(out)
}

/// A tensor store and a name prefix (`down_blocks.0.resnets.1`), so blocks load their weights
/// by their own names.
#[derive(Clone, Copy)]
pub struct Weights<'a> {
    pub store: &'a dyn TensorStore,
    pub prefix: &'a str,
}

impl<'a> Weights<'a> {
    /// The full name of `name` under this prefix.
    pub fn name(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    /// The f32 values of tensor `name` with exactly `shape`.
    pub fn vector(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, DiffusionError> {
        Ok(self
            .store
            .require_shape(&self.name(name), shape)?
            .to_f32()?)
    }

    /// Whether tensor `name` exists.
    pub fn has(&self, name: &str) -> bool {
        self.store.get(&self.name(name)).is_some()
    }
}

/// GroupNorm or LayerNorm with an affine `gamma`, `beta`, optionally followed by SiLU.
pub struct Norm {
    pub kind: NormKind,
    pub eps: f32,
    pub gamma: Vec<f32>,
    pub beta: Vec<f32>,
    pub silu: bool,
}

impl Norm {
    /// Loads `{name}.weight` and `{name}.bias` (`[c]`).
    pub fn load(
        w: Weights,
        name: &str,
        c: usize,
        kind: NormKind,
        eps: f32,
        silu: bool,
    ) -> Result<Self, DiffusionError> {
        if let NormKind::Group(g) = kind {
            if g == 0 || !c.is_multiple_of(g) {
                return Err(DiffusionError::Argument(format!(
                    "{}: {g} groups do not divide {c} channels",
                    w.name(name)
                )));
            }
        }
        Ok(Norm {
            kind,
            eps,
            gamma: w.vector(&format!("{name}.weight"), &[c])?,
            beta: w.vector(&format!("{name}.bias"), &[c])?,
            silu,
        })
    }

    /// The spec that [`crate::nn::conv2d`] fuses.
    pub fn spec(&self) -> NormSpec<'_> {
        NormSpec {
            kind: self.kind,
            eps: self.eps,
            gamma: &self.gamma,
            beta: &self.beta,
            silu: self.silu,
        }
    }

    /// The normalized rows of `x` (`[rows, c]`; a GroupNorm treats all rows as one image).
    pub fn forward(&self, x: &[f32], c: usize) -> Result<Vec<f32>, DiffusionError> {
        let g = ConvGeom {
            h: x.len() / c.max(1),
            w: 1,
            cin: c,
            k: 1,
            stride: 1,
            oh: x.len() / c.max(1),
            ow: 1,
        };
        Ok(conv_input_norm(x, &g, &self.spec())?)
    }
}

/// `x · sigmoid(x)`.
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU with the exact error function, `x / 2 · (1 + erf(x / √2))` (torch's default).
pub fn gelu_erf(x: f32) -> f32 {
    let x = f64::from(x);
    (0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))) as f32
}

/// The error function to about 1e-15 (series for small `|x|`, continued fraction otherwise).
pub fn erf(x: f64) -> f64 {
    let a = x.abs();
    let r = if a < 2.5 {
        // erf(a) = 2/√π · Σ (-1)^n a^(2n+1) / (n! (2n+1))
        let (mut term, mut sum, a2) = (a, a, a * a);
        let mut n = 0.0;
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -a2 / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else {
        // erfc(a) = exp(-a²)/√π · 1/(a + 1/2/(a + 1/(a + 3/2/(a + ...)))), evaluated bottom-up.
        let mut f = 0.0;
        for k in (1..60).rev() {
            f = (k as f64 / 2.0) / (a + f);
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / (a + f)
    };
    r.copysign(x)
}

/// The sinusoidal embedding of timestep `t` in `dim` values, as diffusers'
/// `get_timestep_embedding`: frequencies `exp(-ln(10000) · i / (dim/2 − shift))`, then
/// `[sin, cos]`, or `[cos, sin]` when `flip_sin_to_cos`.
pub fn timestep_embedding(t: f32, dim: usize, flip_sin_to_cos: bool, shift: f32) -> Vec<f32> {
    let half = dim / 2;
    let mut sin = Vec::with_capacity(half);
    let mut cos = Vec::with_capacity(half);
    for i in 0..half {
        // torch computes the exponent and the product in f32.
        let e = -(10000f32.ln()) * i as f32 / (half as f32 - shift);
        let arg = t * e.exp();
        sin.push(arg.sin());
        cos.push(arg.cos());
    }
    let mut out = if flip_sin_to_cos {
        [cos, sin].concat()
    } else {
        [sin, cos].concat()
    };
    out.resize(dim, 0.0);
    out
}

/// The embedding `[dim]` of a guidance scale `w` (LCM's `w = guidance_scale − 1`), as
/// diffusers' `get_guidance_scale_embedding`, in f32 like torch: `a_i = 1000 w · exp(−i ·
/// ln(10000) / (dim/2 − 1))`, then `[sin a, cos a]`, zero-padded to an odd `dim`.
pub fn guidance_embedding(w: f32, dim: usize) -> Vec<f32> {
    let half = dim / 2;
    let step = 10000f32.ln() / (half as f32 - 1.0);
    let w = w * 1000.0;
    let args: Vec<f32> = (0..half).map(|i| w * (i as f32 * -step).exp()).collect();
    let mut out: Vec<f32> = args.iter().map(|a| a.sin()).collect();
    out.extend(args.iter().map(|a| a.cos()));
    out.resize(dim, 0.0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (-2.0, -0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
        ] {
            assert!((erf(x) - want).abs() < 1e-13, "erf({x}) = {}", erf(x));
        }
    }

    #[test]
    fn chw_round_trip_and_upsample() {
        let chw: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let m = FeatureMap::from_chw(&chw, 3, 2, 2);
        assert_eq!(&m.data[..3], &[0.0, 4.0, 8.0]);
        assert_eq!(m.to_chw(), chw);
        let up = m.upsample_nearest(4, 4);
        assert_eq!(&up.data[..3], &up.data[3..6]);
        assert_eq!(up.data[12 * 3..13 * 3], m.data[2 * 3..3 * 3]);
        assert_eq!(up.data[15 * 3..], m.data[3 * 3..]);
    }

    #[test]
    fn batches_keep_their_images_apart() {
        let nchw: Vec<f32> = (0..24).map(|v| v as f32).collect();
        let b = FeatureMap::from_nchw(&nchw, 2, 3, 2, 2);
        assert_eq!(b.images, 2);
        assert_eq!(b.to_chw(), nchw);
        let second = FeatureMap::from_chw(&nchw[12..], 3, 2, 2);
        assert_eq!(b.data[12..], second.data[..]);
        let up = b.upsample_nearest(3, 4);
        assert_eq!(up.data[36..], second.upsample_nearest(3, 4).data[..]);
        let cat = b.concat_channels(&b);
        assert_eq!(cat.data[24..], second.concat_channels(&second).data[..]);
    }

    #[test]
    fn elementwise_helpers_cover_every_part() {
        let n = 3 * ELEMENTWISE_PART + 5;
        let b: Vec<f32> = (0..n).map(|v| v as f32).collect();
        let mut a = vec![1f32; n];
        zip_apply(&mut a, &b, |x, y| *x += y);
        assert!(a.iter().enumerate().all(|(i, &v)| v == i as f32 + 1.0));
        // Rows of 7 from rows of 3 (a width that does not divide a part).
        let rows = n / 3;
        let mut out = vec![0f32; rows * 7];
        map_rows(&mut out, 7, &b[..rows * 3], 3, |o, s| o.fill(s[2]));
        assert!(out
            .chunks_exact(7)
            .enumerate()
            .all(|(r, o)| o[6] == (r * 3 + 2) as f32));
        add_rows(&mut out, &[1.0; 7]);
        assert_eq!(out[7 * 5], 18.0);
    }
}
