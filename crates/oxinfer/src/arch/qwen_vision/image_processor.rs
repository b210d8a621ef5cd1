//! Qwen 3.5's image processor (transformers `Qwen2VLImageProcessorPil`, which `qwen3_5` maps
//! to): `smart_resize` to sides that are multiples of `patch · merge` with a pixel count within
//! `[min_pixels, max_pixels]` (Pillow bicubic), rescale and normalize, then the patches
//! flattened as the Conv3d patch embedding reads them — grouped by `merge × merge` blocks
//! (row-major over blocks, then within a block), each patch `(channel, frame, row, column)`
//! with the image repeated over the `temporal_patch` frames.

use super::config::VisionConfig;
use crate::media::{resized_bicubic, RgbImage};
use serde_json::Value;

/// OpenAI CLIP's per-channel mean and standard deviation (the class defaults).
const CLIP_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
const CLIP_STD: [f32; 3] = [0.268_629_54, 0.261_302_6, 0.275_777_1];

/// The patches of one image, in the order the vision tower reads them.
#[derive(Clone, Debug, PartialEq)]
pub struct VisionPatches {
    /// `[rows · cols, channels · temporal_patch · patch²]`, in merge-block order.
    pub values: Vec<f32>,
    /// Grid of patches (before merging): rows, columns.
    pub rows: usize,
    pub cols: usize,
}

/// Settings of `preprocessor_config.json` (the class defaults where absent).
#[derive(Clone, Debug, PartialEq)]
pub struct ImageProcessor {
    pub patch: usize,
    pub merge: usize,
    pub temporal_patch: usize,
    /// Bounds of the resized pixel count (`size.shortest_edge` / `size.longest_edge`, or the
    /// older `min_pixels` / `max_pixels`).
    pub min_pixels: usize,
    pub max_pixels: usize,
    pub resize: bool,
    pub rescale: f32,
    /// Per-channel `(mean, std)` when `do_normalize`.
    pub normalize: Option<([f32; 3], [f32; 3])>,
}

impl ImageProcessor {
    /// Reads the processor settings (`json`: `preprocessor_config.json`, or the
    /// `image_processor` part of `processor_config.json`), falling back on the tower's patch,
    /// merge and temporal sides; the processor must agree with the tower.
    pub fn from_json(json: Option<&Value>, tower: &VisionConfig) -> Result<Self, String> {
        let empty = Value::Null;
        let j = json
            .map(|j| j.get("image_processor").unwrap_or(j))
            .unwrap_or(&empty);
        Self::parse(j, tower, (56 * 56, 28 * 28 * 1280), (CLIP_MEAN, CLIP_STD))
    }

    /// Reads the settings shared by the image and the video processor from `j`, with the
    /// class defaults `pixels` (min, max) and `mean_std` where absent.
    pub(super) fn parse(
        j: &Value,
        tower: &VisionConfig,
        pixels: (usize, usize),
        mean_std: ([f32; 3], [f32; 3]),
    ) -> Result<Self, String> {
        let num = |k: &str| j.get(k).and_then(Value::as_u64).map(|v| v as usize);
        let size = j.get("size");
        let bound = |k: &str, old: &str, d: usize| {
            size.and_then(|s| s.get(k))
                .and_then(Value::as_u64)
                .map(|v| v as usize)
                .or(num(old))
                .unwrap_or(d)
        };
        if let Some(r) = j.get("resample").and_then(Value::as_u64) {
            if r != 3 {
                return Err(format!("resample {r} is not supported (3, bicubic, is)"));
            }
        }
        let three = |k: &str, d: [f32; 3]| -> [f32; 3] {
            let mut out = d;
            if let Some(a) = j.get(k).and_then(Value::as_array) {
                for (o, v) in out.iter_mut().zip(a) {
                    *o = v.as_f64().map_or(*o, |x| x as f32);
                }
            }
            out
        };
        let flag = |k: &str| j.get(k).and_then(Value::as_bool).unwrap_or(true);
        let p = ImageProcessor {
            patch: num("patch_size").unwrap_or(tower.patch),
            merge: num("merge_size").unwrap_or(tower.merge),
            temporal_patch: num("temporal_patch_size").unwrap_or(tower.temporal_patch),
            min_pixels: bound("shortest_edge", "min_pixels", pixels.0),
            max_pixels: bound("longest_edge", "max_pixels", pixels.1),
            resize: flag("do_resize"),
            rescale: if flag("do_rescale") {
                j.get("rescale_factor")
                    .and_then(Value::as_f64)
                    .unwrap_or(1.0 / 255.0) as f32
            } else {
                1.0
            },
            normalize: flag("do_normalize").then(|| {
                (
                    three("image_mean", mean_std.0),
                    three("image_std", mean_std.1),
                )
            }),
        };
        if (p.patch, p.merge, p.temporal_patch) != (tower.patch, tower.merge, tower.temporal_patch)
        {
            return Err(format!(
                "patch {} / merge {} / temporal patch {} differ from the vision tower's {} / {} / {}",
                p.patch, p.merge, p.temporal_patch, tower.patch, tower.merge, tower.temporal_patch
            ));
        }
        if p.min_pixels > p.max_pixels {
            return Err(format!(
                "size.shortest_edge {} (min pixels) exceeds size.longest_edge {} (max pixels)",
                p.min_pixels, p.max_pixels
            ));
        }
        Ok(p)
    }

    /// The size (height, width) an image of `h × w` is resized to: transformers'
    /// `smart_resize` (Python's round-half-to-even included).
    pub fn target_size(&self, h: usize, w: usize) -> Result<(usize, usize), String> {
        if h == 0 || w == 0 {
            return Err(format!("a {w}×{h} image is empty"));
        }
        let (hf, wf) = (h as f64, w as f64);
        if hf.max(wf) / hf.min(wf) > 200.0 {
            return Err(format!(
                "a {w}×{h} image: the aspect ratio must be under 200 (as the Qwen processor \
                 requires)"
            ));
        }
        if !self.resize {
            let f = self.patch * self.merge;
            if !h.is_multiple_of(f) || !w.is_multiple_of(f) {
                return Err(format!(
                    "a {w}×{h} image with do_resize false: the sides must be multiples of {f}"
                ));
            }
            return Ok((h, w));
        }
        let factor = (self.patch * self.merge) as f64;
        let mut th = (hf / factor).round_ties_even() * factor;
        let mut tw = (wf / factor).round_ties_even() * factor;
        if th * tw > self.max_pixels as f64 {
            let beta = (hf * wf / self.max_pixels as f64).sqrt();
            th = factor.max((hf / beta / factor).floor() * factor);
            tw = factor.max((wf / beta / factor).floor() * factor);
        } else if th * tw < self.min_pixels as f64 {
            let beta = (self.min_pixels as f64 / (hf * wf)).sqrt();
            th = (hf * beta / factor).ceil() * factor;
            tw = (wf * beta / factor).ceil() * factor;
        }
        if th < factor || tw < factor {
            return Err(format!("a {w}×{h} image resizes to nothing"));
        }
        Ok((th as usize, tw as usize))
    }

    /// The soft tokens' grid `[rows, cols]` of an image of `h × w` (after merging).
    pub fn merged_grid(&self, h: usize, w: usize) -> Result<[usize; 2], String> {
        let (th, tw) = self.target_size(h, w)?;
        let side = self.patch * self.merge;
        Ok([th / side, tw / side])
    }

    /// Resizes, rescales, normalizes and patches `img` (repeated over the temporal patch).
    pub fn preprocess(&self, img: &RgbImage) -> Result<VisionPatches, String> {
        let (h, w) = (img.height as usize, img.width as usize);
        let (th, tw) = self.target_size(h, w)?;
        let img = resized_bicubic(img, tw as u32, th as u32);
        Ok(self.patches(&vec![img.as_ref(); self.temporal_patch]))
    }

    /// Rescales, normalizes and patches `frames` (one temporal patch: `temporal_patch`
    /// frames of one size, whose sides are multiples of `patch · merge`).
    pub fn patches(&self, frames: &[&RgbImage]) -> VisionPatches {
        let (th, tw) = (frames[0].height as usize, frames[0].width as usize);
        let value = |f: usize, y: usize, x: usize, c: usize| -> f32 {
            let mut v = frames[f].pixels[(y * tw + x) * 3 + c] as f32 * self.rescale;
            if let Some((mean, std)) = &self.normalize {
                v = (v - mean[c]) / std[c];
            }
            v
        };
        let (p, m) = (self.patch, self.merge);
        let (rows, cols) = (th / p, tw / p);
        let mut values = Vec::with_capacity(rows * cols * 3 * frames.len() * p * p);
        for br in 0..rows / m {
            for bc in 0..cols / m {
                for ir in 0..m {
                    for ic in 0..m {
                        let (y0, x0) = ((br * m + ir) * p, (bc * m + ic) * p);
                        for c in 0..3 {
                            for f in 0..frames.len() {
                                for y in 0..p {
                                    for x in 0..p {
                                        values.push(value(f, y0 + y, x0 + x, c));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        VisionPatches { values, rows, cols }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(min: usize, max: usize) -> ImageProcessor {
        ImageProcessor {
            patch: 16,
            merge: 2,
            temporal_patch: 2,
            min_pixels: min,
            max_pixels: max,
            resize: true,
            rescale: 1.0 / 255.0,
            normalize: None,
        }
    }

    #[test]
    fn smart_resize_matches_transformers() {
        // Values from transformers' smart_resize(h, w, factor=32, min, max).
        let p = proc(56 * 56, 28 * 28 * 1280);
        assert_eq!(p.target_size(896, 896).unwrap(), (896, 896));
        // round(48 / 32) = round(1.5) = 2 and round(80 / 32) = round(2.5) = 2 (half to even).
        assert_eq!(p.target_size(48, 80).unwrap(), (64, 64));
        // Over max_pixels: floor(h / beta / factor) · factor.
        assert_eq!(p.target_size(2000, 3000).unwrap(), (800, 1216));
        // Under min_pixels: ceil.
        assert_eq!(
            proc(256 * 256, 1 << 24).target_size(20, 40).unwrap(),
            (192, 384)
        );
        assert!(p.target_size(10, 4000).is_err());
    }
}
