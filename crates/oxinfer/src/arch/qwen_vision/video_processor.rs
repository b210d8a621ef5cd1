//! Qwen 3.5's video processor (transformers `Qwen3VLVideoProcessor`, which `qwen3_5` maps to,
//! with the timestamps of `Qwen3VLProcessor._calculate_timestamps`): frames sampled at `fps`
//! per second of video (`sample_frames`: between `min_frames` and `max_frames`, evenly spread,
//! indices rounded half to even as NumPy does), one size for all of them from the video
//! `smart_resize` (the pixel budget counts every sampled frame), torchvision's antialiased
//! bicubic resize of uint8 frames, rescale and normalize, then the frames taken
//! `temporal_patch` at a time — the last frame repeated to fill the last group — each group
//! patched as one image ([`ImageProcessor::patches`]).

use super::config::VisionConfig;
use super::image_processor::{ImageProcessor, VisionPatches};
use crate::media::{resize_bicubic_torch, RgbImage, VideoClip};
use serde_json::Value;

/// `IMAGENET_STANDARD_MEAN` / `_STD`, the class defaults.
const STANDARD: ([f32; 3], [f32; 3]) = ([0.5; 3], [0.5; 3]);

/// The frame rate assumed for a video whose rate is unknown (transformers: 24).
pub const DEFAULT_VIDEO_FPS: f64 = 24.0;

/// Settings of `video_preprocessor_config.json` (the class defaults where absent).
#[derive(Clone, Debug, PartialEq)]
pub struct VideoProcessor {
    /// Patch sides, pixel budget (over all sampled frames), rescale and normalization.
    pub pixels: ImageProcessor,
    /// Frames sampled per second of video (`fps`, default 2), unless `num_frames` is given.
    pub fps: Option<f64>,
    /// A fixed number of frames to sample.
    pub num_frames: Option<usize>,
    /// Fewest frames sampled (`min_frames`, default 4; fewer when the video has fewer).
    pub min_frames: usize,
    /// Most frames sampled (`max_frames`, default 768).
    pub max_frames: usize,
    /// `do_sample_frames` (default true); false: every frame is used.
    pub sample: bool,
    /// `cap_pixels_per_frame` (unset: false): each frame's pixels capped at
    /// `max_video_tokens` merged patches or its share of the budget.
    pub cap_pixels_per_frame: bool,
    /// `max_video_tokens` (default 768): soft tokens per frame under the cap.
    pub max_video_tokens: usize,
}

/// A video ready for the tower.
#[derive(Clone, Debug, PartialEq)]
pub struct VideoPatches {
    /// One entry per frame group (`temporal_patch` frames), in order.
    pub groups: Vec<VisionPatches>,
    /// Each group's time in seconds.
    pub seconds: Vec<f64>,
    /// The frame indices sampled (before the last is repeated).
    pub indices: Vec<usize>,
}

impl VideoProcessor {
    /// Reads `video_preprocessor_config.json` (`json`, or the `video_processor` part of
    /// `processor_config.json`; `None`: the class defaults) against the tower.
    pub fn from_json(json: Option<&Value>, tower: &VisionConfig) -> Result<Self, String> {
        let empty = Value::Null;
        let j = json
            .map(|j| j.get("video_processor").unwrap_or(j))
            .unwrap_or(&empty);
        let pixels = ImageProcessor::parse(j, tower, (128 * 32 * 32, 32 * 32 * 768), STANDARD)?;
        let num = |k: &str, d: Option<usize>| match j.get(k) {
            None | Some(Value::Null) => Ok(d),
            Some(v) => v
                .as_u64()
                .map(|v| Some(v as usize))
                .ok_or_else(|| format!("{k} must be a whole number, got {v}")),
        };
        let fps = match j.get("fps") {
            None => Some(2.0),
            Some(Value::Null) => None,
            Some(v) => Some(
                v.as_f64()
                    .filter(|f| *f > 0.0)
                    .ok_or_else(|| format!("fps must be a positive number, got {v}"))?,
            ),
        };
        let flag = |k: &str, d: bool| j.get(k).and_then(Value::as_bool).unwrap_or(d);
        let p = VideoProcessor {
            pixels,
            fps,
            num_frames: num("num_frames", None)?,
            min_frames: num("min_frames", Some(4))?.unwrap_or(4),
            max_frames: num("max_frames", Some(768))?.unwrap_or(768),
            sample: flag("do_sample_frames", true),
            cap_pixels_per_frame: flag("cap_pixels_per_frame", false),
            max_video_tokens: num("max_video_tokens", Some(768))?.unwrap_or(768),
        };
        if p.sample && p.fps.is_some() && p.num_frames.is_some() {
            return Err("fps and num_frames are mutually exclusive (as transformers says)".into());
        }
        if p.sample && p.fps.is_none() && p.num_frames.is_none() && p.max_frames == 0 {
            return Err("max_frames is 0".into());
        }
        Ok(p)
    }

    /// The frame indices sampled from a video of `total` frames at `fps` (`sample_frames`).
    pub fn sample_indices(&self, total: usize, fps: f64) -> Vec<usize> {
        if !self.sample {
            return (0..total).collect();
        }
        let n = match (self.num_frames, self.fps) {
            (Some(n), _) => n,
            (None, Some(target)) => {
                // Python's int() truncates toward zero.
                let n = (total as f64 / fps * target) as usize;
                n.max(self.min_frames).min(self.max_frames).min(total)
            }
            (None, None) => total.max(self.min_frames).min(self.max_frames),
        };
        // np.linspace(0, total - 1, n).round(): i · step, the last exactly total − 1.
        let stop = total.saturating_sub(1) as f64;
        (0..n)
            .map(|i| {
                if n > 1 && i == n - 1 {
                    stop as usize
                } else if n > 1 {
                    (i as f64 * (stop / (n - 1) as f64)).round_ties_even() as usize
                } else {
                    0
                }
            })
            .collect()
    }

    /// The size (height, width) every frame of a video of `frames` sampled `h × w` frames is
    /// resized to: the video `smart_resize` (Python's rounding), the budget over all frames.
    pub fn target_size(&self, frames: usize, h: usize, w: usize) -> Result<(usize, usize), String> {
        let p = &self.pixels;
        let tf = p.temporal_patch;
        if frames < tf {
            return Err(format!(
                "{frames} frame(s) sampled: a video needs at least {tf} (the temporal patch); \
                 give a still picture as an image"
            ));
        }
        if !p.resize {
            return p.target_size(h, w);
        }
        let factor = (p.patch * p.merge) as f64;
        let (mut hf, mut wf) = (h as f64, w as f64);
        if hf < factor || wf < factor {
            let scale = (factor / hf).max(factor / wf);
            hf = (hf * scale).trunc();
            wf = (wf * scale).trunc();
        }
        if hf.max(wf) / hf.min(wf) > 200.0 {
            return Err(format!(
                "{w}×{h} frames: the aspect ratio must be under 200 (as the Qwen processor \
                 requires)"
            ));
        }
        let mut max_pixels = p.max_pixels;
        if self.cap_pixels_per_frame {
            let cap = self.max_video_tokens * p.patch * p.merge * p.patch * p.merge;
            let per = cap
                .min(p.max_pixels / frames)
                .max((p.min_pixels as f64 * 1.05) as usize);
            max_pixels = per * frames;
        }
        let t = frames as f64;
        let mut th = (hf / factor).round_ties_even() * factor;
        let mut tw = (wf / factor).round_ties_even() * factor;
        let tt = (t / tf as f64).round_ties_even() * tf as f64;
        if tt * th * tw > max_pixels as f64 {
            let beta = (t * hf * wf / max_pixels as f64).sqrt();
            th = factor.max((hf / beta / factor).floor() * factor);
            tw = factor.max((wf / beta / factor).floor() * factor);
        } else if tt * th * tw < p.min_pixels as f64 {
            let beta = (p.min_pixels as f64 / (t * hf * wf)).sqrt();
            th = (hf * beta / factor).ceil() * factor;
            tw = (wf * beta / factor).ceil() * factor;
        }
        Ok((th as usize, tw as usize))
    }

    /// Samples, resizes, rescales, normalizes and patches `video`.
    pub fn preprocess(&self, video: &VideoClip) -> Result<VideoPatches, String> {
        let Some(first) = video.frames.first() else {
            return Err("the video has no frames".into());
        };
        let fps = video.fps.unwrap_or(DEFAULT_VIDEO_FPS);
        let indices = self.sample_indices(video.frames.len(), fps);
        let (h, w) = (first.height as usize, first.width as usize);
        let (th, tw) = self.target_size(indices.len(), h, w)?;
        let mut frames: Vec<RgbImage> = Vec::with_capacity(indices.len() + 1);
        for &i in &indices {
            let f = &video.frames[i];
            if (f.height as usize, f.width as usize) != (h, w) {
                return Err(format!(
                    "frame {i} is {}×{}, frame 0 {w}×{h}: a video's frames must have one size",
                    f.width, f.height
                ));
            }
            frames.push(if (h, w) == (th, tw) {
                f.clone()
            } else {
                resize_bicubic_torch(f, tw as u32, th as u32)
            });
        }
        let tf = self.pixels.temporal_patch;
        let groups = frames
            .chunks(tf)
            .map(|c| {
                // The last group: its last frame repeated (transformers' patchify).
                let g: Vec<&RgbImage> = (0..tf).map(|k| &c[k.min(c.len() - 1)]).collect();
                self.pixels.patches(&g)
            })
            .collect();
        Ok(VideoPatches {
            groups,
            seconds: group_seconds(&indices, fps, tf),
            indices,
        })
    }
}

/// Each frame group's time (`Qwen3VLProcessor._calculate_timestamps`): the indices padded by
/// repeating the last to a multiple of `group`, each index / `fps`, then the mean of each
/// group's first and last.
pub fn group_seconds(indices: &[usize], fps: f64, group: usize) -> Vec<f64> {
    let mut t: Vec<f64> = indices.iter().map(|&i| i as f64 / fps).collect();
    if let Some(&last) = t.last() {
        while !t.len().is_multiple_of(group) {
            t.push(last);
        }
    }
    t.chunks(group)
        .map(|c| (c[0] + c[c.len() - 1]) / 2.0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The class defaults (patch 16, merge 2, temporal 2, 2 fps, 4..768 frames).
    fn proc() -> VideoProcessor {
        VideoProcessor {
            pixels: ImageProcessor {
                patch: 16,
                merge: 2,
                temporal_patch: 2,
                min_pixels: 128 * 32 * 32,
                max_pixels: 32 * 32 * 768,
                resize: true,
                rescale: 1.0 / 255.0,
                normalize: Some(STANDARD),
            },
            fps: Some(2.0),
            num_frames: None,
            min_frames: 4,
            max_frames: 768,
            sample: true,
            cap_pixels_per_frame: false,
            max_video_tokens: 768,
        }
    }

    #[test]
    fn sampling_and_sizes_follow_qwen3vl_video_processor() {
        // Values from transformers 5.24: Qwen3VLVideoProcessor().sample_frames and
        // video_processing_qwen3_vl.smart_resize (patch 16, merge 2: factor 32).
        let p = proc();
        // 300 frames at 30 fps, 2 fps wanted: int(300 / 30 · 2) = 20 frames.
        let idx = p.sample_indices(300, 30.0);
        assert_eq!(idx.len(), 20);
        assert_eq!(&idx[..4], &[0, 16, 31, 47]);
        assert_eq!(idx[19], 299);
        // Fewer than min_frames: all of them.
        assert_eq!(p.sample_indices(3, 10.0), vec![0, 1, 2]);
        // Unknown rate (24 assumed): int(7 / 24 · 2) = 0, raised to min_frames.
        assert_eq!(p.sample_indices(7, DEFAULT_VIDEO_FPS), vec![0, 2, 4, 6]);
        assert_eq!(p.target_size(20, 480, 640).unwrap(), (160, 224));
        // Under min_pixels: ceil; over max_pixels (768 frames): floor, at least one factor.
        assert_eq!(p.target_size(4, 28, 40).unwrap(), (160, 224));
        assert_eq!(p.target_size(768, 1080, 1920).unwrap(), (32, 32));
        assert!(p.target_size(1, 64, 64).is_err());
        assert_eq!(group_seconds(&[0, 2, 3, 5], 4.0, 2), vec![0.25, 1.0]);
        assert_eq!(group_seconds(&[0, 1, 2], 10.0, 2), vec![0.05, 0.2]);
    }
}
