//! Gemma 4's audio feature extractor (transformers `Gemma4AudioFeatureExtractor`): 16 kHz
//! samples → log-mel frames.
//!
//! As transformers computes it: the clip is cut at 30 s (`max_length`, 480 000 samples) and
//! zero-padded to a multiple of 128 samples; `frame_length / 2` zeros go in front (semicausal
//! padding); frames of `frame_length` samples every `hop_length` (20 ms and 10 ms: 320 and
//! 160) are multiplied by a periodic Hann window, zero-padded to the FFT length (512), and
//! their magnitude spectra go through an HTK mel filter bank (unnormalized triangles in Hz,
//! 0 – 8000 Hz); features are `ln(mel + mel_floor)` (optionally minus a per-bin mean, over a
//! per-bin deviation). A frame is valid when its whole window lies inside the clip (not in the
//! 128-sample padding); invalid frames are zeroed, and the mask travels to the encoder.

use realfft::RealFftPlanner;
use serde_json::Value;

/// Longest clip the extractor reads, in samples at 16 kHz (transformers' `max_length`).
pub const MAX_SAMPLES: usize = 480_000;
/// The clip is zero-padded to a multiple of this many samples (`pad_to_multiple_of`).
pub const PAD_MULTIPLE: usize = 128;

/// Settings and precomputed tables of the extractor.
#[derive(Clone, Debug, PartialEq)]
pub struct AudioFeatureExtractor {
    /// Mel bins per frame (`feature_size`).
    pub n_mel: usize,
    /// Samples per frame and between frames.
    pub frame: usize,
    pub hop: usize,
    /// FFT length (the next power of two of `frame`, doubled with `fft_overdrive`).
    pub fft: usize,
    mel_floor: f64,
    preemphasis: f32,
    preemphasis_htk: bool,
    input_scale: f32,
    /// `[frame]` periodic Hann window (computed in f64, stored as f32 as transformers does).
    window: Vec<f32>,
    /// `[fft / 2 + 1, n_mel]` triangular filters.
    filters: Vec<f64>,
    /// Per-bin `(mean, stddev)` normalization, each optional.
    mean: Option<Vec<f64>>,
    stddev: Option<Vec<f64>>,
}

/// Log-mel frames of one clip.
#[derive(Clone, Debug, PartialEq)]
pub struct MelFrames {
    /// `[frames, n_mel]`, invalid frames zero.
    pub values: Vec<f32>,
    /// Per frame: whether its window lies inside the clip.
    pub valid: Vec<bool>,
    pub n_mel: usize,
}

/// HTK mel of `hz`.
fn hz_to_mel(hz: f64) -> f64 {
    2595.0 * (1.0 + hz / 700.0).log10()
}

/// Hz of HTK mel `mel`.
fn mel_to_hz(mel: f64) -> f64 {
    700.0 * (10f64.powf(mel / 2595.0) - 1.0)
}

/// `n` values from `a` to `b` inclusive, as `numpy.linspace` spaces them.
fn linspace(a: f64, b: f64, n: usize) -> Vec<f64> {
    let step = (b - a) / (n.max(2) - 1) as f64;
    let mut v: Vec<f64> = (0..n).map(|i| a + i as f64 * step).collect();
    if let Some(last) = v.last_mut().filter(|_| n > 1) {
        *last = b;
    }
    v
}

/// transformers' `mel_filter_bank(..., norm=None, mel_scale="htk")`: `[bins, n_mel]`.
fn mel_filters(bins: usize, n_mel: usize, fmin: f64, fmax: f64, rate: u32) -> Vec<f64> {
    let centers: Vec<f64> = linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mel + 2)
        .into_iter()
        .map(mel_to_hz)
        .collect();
    let freqs = linspace(0.0, (rate / 2) as f64, bins);
    let mut out = vec![0f64; bins * n_mel];
    for (b, f) in freqs.iter().enumerate() {
        for m in 0..n_mel {
            let down = -(centers[m] - f) / (centers[m + 1] - centers[m]);
            let up = (centers[m + 2] - f) / (centers[m + 2] - centers[m + 1]);
            out[b * n_mel + m] = down.min(up).max(0.0);
        }
    }
    out
}

impl AudioFeatureExtractor {
    /// Reads the settings (`json`: the `feature_extractor` part of `processor_config.json`, or
    /// a `preprocessor_config.json` of the extractor), transformers' defaults where absent.
    pub fn from_json(json: Option<&Value>) -> Result<Self, String> {
        let empty = Value::Null;
        let j = json
            .map(|j| j.get("feature_extractor").unwrap_or(j))
            .unwrap_or(&empty);
        let f = |k: &str, d: f64| j.get(k).and_then(Value::as_f64).unwrap_or(d);
        let rate = f("sampling_rate", 16000.0);
        if rate != 16000.0 {
            return Err(format!("sampling_rate {rate} is not supported (16000 is)"));
        }
        if f("dither", 0.0) != 0.0 {
            return Err("dither (random noise added to the input) is not supported".into());
        }
        let n_mel = f("feature_size", 128.0) as usize;
        let frame = (16000.0 * f("frame_length_ms", 20.0) / 1000.0).round() as usize;
        let hop = (16000.0 * f("hop_length_ms", 10.0) / 1000.0).round() as usize;
        if n_mel == 0 || frame < 2 || hop == 0 {
            return Err(format!(
                "feature_size {n_mel}, frame {frame} samples and hop {hop} samples are not usable"
            ));
        }
        let mut fft = frame.next_power_of_two();
        if j.get("fft_overdrive").and_then(Value::as_bool) == Some(true) {
            fft *= 2;
        }
        let bins = fft / 2 + 1;
        let per_bin = |k: &str| -> Result<Option<Vec<f64>>, String> {
            match j.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Array(a)) if a.len() == n_mel => {
                    Ok(Some(a.iter().map(|v| v.as_f64().unwrap_or(0.0)).collect()))
                }
                Some(_) => Err(format!("{k} must be {n_mel} numbers")),
            }
        };
        let window = (0..frame)
            .map(|n| {
                let c = (2.0 * std::f64::consts::PI * n as f64 / frame as f64).cos();
                (0.5 - 0.5 * c) as f32
            })
            .collect();
        Ok(AudioFeatureExtractor {
            n_mel,
            frame,
            hop,
            fft,
            mel_floor: f("mel_floor", 1e-3),
            preemphasis: f("preemphasis", 0.0) as f32,
            preemphasis_htk: j
                .get("preemphasis_htk_flavor")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            input_scale: f("input_scale_factor", 1.0) as f32,
            window,
            filters: mel_filters(
                bins,
                n_mel,
                f("min_frequency", 0.0),
                f("max_frequency", 8000.0),
                16000,
            ),
            mean: per_bin("per_bin_mean")?,
            stddev: per_bin("per_bin_stddev")?,
        })
    }

    /// Frames of a clip of `samples` samples (after the 30 s cut and the padding).
    pub fn frames(&self, samples: usize) -> usize {
        let padded = samples.min(MAX_SAMPLES).div_ceil(PAD_MULTIPLE) * PAD_MULTIPLE;
        let total = self.frame / 2 + padded;
        if total < self.frame + 1 {
            0
        } else {
            (total - self.frame - 1) / self.hop + 1
        }
    }

    /// Log-mel frames of 16 kHz mono `samples`; an error when the clip is too short for one
    /// frame.
    pub fn extract(&self, samples: &[f32]) -> Result<MelFrames, String> {
        let n = samples.len().min(MAX_SAMPLES);
        let frames = self.frames(n);
        if frames == 0 || n <= self.frame / 2 {
            return Err(format!(
                "audio of {n} samples is too short (at least {} samples, {} ms, are needed)",
                self.frame / 2 + 1,
                (self.frame / 2 + 1) * 1000 / 16000
            ));
        }
        let pad = self.frame / 2;
        // Sample `i` of the left-padded, scaled clip (zero outside it).
        let at = |i: usize| -> f32 {
            match i.checked_sub(pad) {
                Some(j) if j < n => samples[j] * self.input_scale,
                _ => 0.0,
            }
        };
        let bins = self.fft / 2 + 1;
        let mut planner = RealFftPlanner::<f64>::new();
        let rfft = planner.plan_fft_forward(self.fft);
        let mut input = rfft.make_input_vec();
        let mut spectrum = rfft.make_output_vec();
        let mut scratch = rfft.make_scratch_vec();
        let mut values = vec![0f32; frames * self.n_mel];
        let mut valid = vec![false; frames];
        let mut mags = vec![0f64; bins];
        for (i, out) in values.chunks_exact_mut(self.n_mel).enumerate() {
            let start = i * self.hop;
            // The frame's window ends at sample `start + frame` of the unfolded (frame + 1)
            // samples; it is valid when that sample is real audio.
            valid[i] = start + self.frame < pad + n;
            if !valid[i] {
                continue;
            }
            input.fill(0.0);
            for (k, slot) in input.iter_mut().enumerate().take(self.frame) {
                let x = if self.preemphasis > 0.0 {
                    let (cur, next) = (at(start + k), at(start + k + 1));
                    if self.preemphasis_htk {
                        if k == 0 {
                            cur * (1.0 - self.preemphasis)
                        } else {
                            cur - self.preemphasis * at(start + k - 1)
                        }
                    } else {
                        next - self.preemphasis * cur
                    }
                } else {
                    at(start + k)
                };
                *slot = (x * self.window[k]) as f64;
            }
            rfft.process_with_scratch(&mut input, &mut spectrum, &mut scratch)
                .map_err(|e| format!("FFT: {e}"))?;
            for (m, c) in mags.iter_mut().zip(&spectrum) {
                *m = c.norm();
            }
            for (b, o) in out.iter_mut().enumerate() {
                let mel: f64 = mags
                    .iter()
                    .enumerate()
                    .map(|(k, m)| m * self.filters[k * self.n_mel + b])
                    .sum();
                let mut v = (mel + self.mel_floor).ln();
                if let Some(mean) = &self.mean {
                    v -= mean[b];
                }
                if let Some(sd) = &self.stddev {
                    v /= sd[b];
                }
                *o = v as f32;
            }
        }
        Ok(MelFrames {
            values,
            valid,
            n_mel: self.n_mel,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_counts_follow_the_padding_rules() {
        let fe = AudioFeatureExtractor::from_json(None).unwrap();
        assert_eq!((fe.n_mel, fe.frame, fe.hop, fe.fft), (128, 320, 160, 512));
        // 23190 samples → padded to 23296 → 145 frames, the last past the clip.
        assert_eq!(fe.frames(23190), 145);
        let m = fe.extract(&vec![0.1; 23190]).unwrap();
        assert_eq!(m.valid.iter().filter(|v| **v).count(), 144);
        assert!(fe.extract(&[0.0; 100]).is_err());
        assert_eq!(fe.frames(10 * MAX_SAMPLES), fe.frames(MAX_SAMPLES));
    }

    #[test]
    fn a_tone_peaks_in_its_mel_bin() {
        let fe = AudioFeatureExtractor::from_json(Some(&serde_json::json!({"feature_size": 32})))
            .unwrap();
        let tone: Vec<f32> = (0..16000)
            .map(|i| (2.0 * std::f32::consts::PI * 1000.0 * i as f32 / 16000.0).sin())
            .collect();
        let m = fe.extract(&tone).unwrap();
        let row = &m.values[50 * 32..51 * 32];
        let peak = (0..32).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
        // 1000 Hz is 1000 mel (HTK); the 32 bins span 0 – 2840 mel: bin ≈ 1000 / 2840 · 33 − 1.
        assert!((10..=11).contains(&peak), "peak bin {peak}");
    }
}
