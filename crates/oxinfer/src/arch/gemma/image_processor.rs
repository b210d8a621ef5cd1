//! Gemma 4's image processor (transformers `Gemma4ImageProcessorPil`): an aspect-preserving
//! resize to the largest size whose sides are multiples of `pooling · patch` within a budget of
//! `max_soft_tokens · pooling²` patches (Pillow bicubic; none when the size already fits),
//! rescale to [0, 1] (no normalization), patches laid out row-major.

use super::vision::Patches;
use crate::media::{resized_bicubic, RgbImage};
use serde_json::Value;

/// Soft-token budgets the processor accepts.
pub const SOFT_TOKEN_BUDGETS: [usize; 5] = [70, 140, 280, 560, 1120];

/// Settings of `preprocessor_config.json` (transformers' defaults where absent).
#[derive(Clone, Debug, PartialEq)]
pub struct ImageProcessor {
    pub patch: usize,
    pub pool: usize,
    pub max_soft_tokens: usize,
    pub rescale: f32,
    /// Per-channel `(mean, std)` when `do_normalize`.
    pub normalize: Option<([f32; 3], [f32; 3])>,
}

impl ImageProcessor {
    /// Reads the processor settings (`json`: `preprocessor_config.json`, or the
    /// `image_processor` part of `processor_config.json`), falling back on the vision tower's
    /// patch and pooling sides.
    pub fn from_json(json: Option<&Value>, patch: usize, pool: usize) -> Result<Self, String> {
        let empty = Value::Null;
        let j = json
            .map(|j| j.get("image_processor").unwrap_or(j))
            .unwrap_or(&empty);
        let num = |k: &str, d: usize| j.get(k).and_then(Value::as_u64).map_or(d, |v| v as usize);
        let max_soft_tokens = num("max_soft_tokens", 280);
        if !SOFT_TOKEN_BUDGETS.contains(&max_soft_tokens) {
            return Err(format!(
                "max_soft_tokens {max_soft_tokens} is not one of {SOFT_TOKEN_BUDGETS:?}"
            ));
        }
        if let Some(r) = j.get("resample").and_then(Value::as_u64) {
            if r != 3 {
                return Err(format!("resample {r} is not supported (3, bicubic, is)"));
            }
        }
        let three = |k: &str, d: f32| -> [f32; 3] {
            let mut out = [d; 3];
            if let Some(a) = j.get(k).and_then(Value::as_array) {
                for (o, v) in out.iter_mut().zip(a) {
                    *o = v.as_f64().unwrap_or(d as f64) as f32;
                }
            }
            out
        };
        let normalize = j
            .get("do_normalize")
            .and_then(Value::as_bool)
            .unwrap_or(false)
            .then(|| (three("image_mean", 0.0), three("image_std", 1.0)));
        let rescale = if j.get("do_rescale").and_then(Value::as_bool) == Some(false) {
            1.0
        } else {
            j.get("rescale_factor")
                .and_then(Value::as_f64)
                .unwrap_or(1.0 / 255.0) as f32
        };
        Ok(ImageProcessor {
            patch: num("patch_size", patch),
            pool: num("pooling_kernel_size", pool),
            max_soft_tokens,
            rescale,
            normalize,
        })
    }

    /// The size (height, width) an image of `h × w` is resized to
    /// (`get_aspect_ratio_preserving_size`).
    pub fn target_size(&self, h: usize, w: usize) -> Result<(usize, usize), String> {
        let max_patches = self.max_soft_tokens * self.pool * self.pool;
        let target_px = (max_patches * self.patch * self.patch) as f64;
        let factor = (target_px / (h * w) as f64).sqrt();
        let side = self.pool * self.patch;
        let mut th = ((factor * h as f64) / side as f64).floor() as usize * side;
        let mut tw = ((factor * w as f64) / side as f64).floor() as usize * side;
        let max_side = (max_patches / (self.pool * self.pool)) * side;
        if th == 0 && tw == 0 {
            return Err(format!("a {w}×{h} image resizes to nothing"));
        }
        if th == 0 {
            th = side;
            tw = (w / h * side).min(max_side);
        } else if tw == 0 {
            tw = side;
            th = (h / w * side).min(max_side);
        }
        if (th * tw) as f64 > target_px {
            return Err(format!(
                "a {w}×{h} image resized to {tw}×{th} exceeds {max_patches} patches"
            ));
        }
        Ok((th, tw))
    }

    /// Soft tokens an image of `h × w` becomes.
    pub fn soft_tokens(&self, h: usize, w: usize) -> Result<usize, String> {
        let (th, tw) = self.target_size(h, w)?;
        Ok((th / self.patch) * (tw / self.patch) / (self.pool * self.pool))
    }

    /// Resizes, rescales and patches `img`.
    pub fn preprocess(&self, img: &RgbImage) -> Result<Patches, String> {
        let (h, w) = (img.height as usize, img.width as usize);
        let (th, tw) = self.target_size(h, w)?;
        let img = resized_bicubic(img, tw as u32, th as u32);
        let p = self.patch;
        let (rows, cols) = (th / p, tw / p);
        let mut values = Vec::with_capacity(th * tw * 3);
        for r in 0..rows {
            for c in 0..cols {
                for y in 0..p {
                    let at = ((r * p + y) * tw + c * p) * 3;
                    for (k, &v) in img.pixels[at..at + p * 3].iter().enumerate() {
                        let mut f = v as f32 * self.rescale;
                        if let Some((mean, std)) = &self.normalize {
                            f = (f - mean[k % 3]) / std[k % 3];
                        }
                        values.push(f);
                    }
                }
            }
        }
        Ok(Patches { values, rows, cols })
    }
}
