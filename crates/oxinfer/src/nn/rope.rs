//! Rotary position embeddings: frequency tables (with Llama-3 / linear / proportional scaling or
//! explicit per-dimension factors) applied in interleaved or half-split layout.

use crate::config::{RopeConfig, RopeScaling, RopeStyle};
use crate::plan::RopeOp;

/// Precomputed inverse frequencies of one RoPE configuration.
#[derive(Clone, Debug)]
pub struct Rope {
    /// `dim / 2` inverse frequencies (radians per position).
    inv_freq: Vec<f32>,
    /// Rotated dimensions per head.
    dim: usize,
    style: RopeStyle,
}

impl Rope {
    /// Builds the table for `cfg`. `freq_factors` (GGUF's `rope_freqs.weight`, `dim / 2` values)
    /// divides each frequency, which is how GGUF files carry Llama-3 scaling.
    pub fn new(cfg: &RopeConfig, freq_factors: Option<&[f32]>) -> Self {
        let half = cfg.dim / 2;
        let mut inv_freq: Vec<f32> = (0..half)
            .map(|i| {
                let exponent = (2 * i) as f32 / cfg.dim as f32;
                (1.0 / f64::from(cfg.theta).powf(f64::from(exponent))) as f32
            })
            .collect();
        match cfg.scaling {
            RopeScaling::None => {}
            RopeScaling::Proportional {
                factor,
                partial_rotary_factor,
            } => {
                // transformers: int(partial · head_dim // 2) rotating pairs, the rest fixed.
                let rotated = (partial_rotary_factor * cfg.dim as f64 / 2.0).floor() as usize;
                for (i, f) in inv_freq.iter_mut().enumerate() {
                    *f = if i < rotated { *f / factor } else { 0.0 };
                }
            }
            RopeScaling::Linear { factor } => inv_freq.iter_mut().for_each(|f| *f /= factor),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position,
            } => {
                let low_wavelen = original_max_position / low_freq_factor;
                let high_wavelen = original_max_position / high_freq_factor;
                for f in inv_freq.iter_mut() {
                    let wavelen = 2.0 * std::f32::consts::PI / *f;
                    if wavelen > low_wavelen {
                        *f /= factor;
                    } else if wavelen >= high_wavelen {
                        let smooth = (original_max_position / wavelen - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        *f = (1.0 - smooth) * *f / factor + smooth * *f;
                    }
                }
            }
        }
        if let Some(factors) = freq_factors {
            for (f, &k) in inv_freq.iter_mut().zip(factors) {
                *f /= k;
            }
        }
        Rope {
            inv_freq,
            dim: cfg.dim,
            style: cfg.style,
        }
    }

    /// The inverse frequencies, `dim / 2` of them.
    pub fn inv_freq(&self) -> &[f32] {
        &self.inv_freq
    }

    /// Rotated dimensions per head.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Whether pairs are interleaved `(2j, 2j+1)` (else `(j, j + dim/2)`).
    pub fn interleaved(&self) -> bool {
        matches!(self.style, RopeStyle::Interleaved)
    }

    /// The cosines and sines [`Rope::apply`] uses for positions `pos0 .. pos0 + t`, into
    /// `cos`/`sin` (`[t, dim / 2]` each), for backends that rotate on the device.
    pub fn tables(&self, pos0: usize, t: usize, cos: &mut [f32], sin: &mut [f32]) {
        let half = self.dim / 2;
        for i in 0..t {
            let pos = (pos0 + i) as f32;
            for j in 0..half {
                let angle = pos * self.inv_freq[j];
                cos[i * half + j] = angle.cos();
                sin[i * half + j] = angle.sin();
            }
        }
    }

    /// Rotates `x` (`[t, heads, head_dim]`, row-major) in place; row `i` is at position
    /// `pos0 + i`. Only the first `dim` dimensions of each head rotate.
    pub fn apply(&self, x: &mut [f32], t: usize, heads: usize, head_dim: usize, pos0: usize) {
        debug_assert_eq!(x.len(), t * heads * head_dim);
        let _prof = oxinfer_kernels::profile::scope(|| "rope".to_string(), (x.len() * 4) as u64, 0);
        let half = self.dim / 2;
        let mut cos = vec![0f32; half];
        let mut sin = vec![0f32; half];
        for (i, row) in x.chunks_exact_mut(heads * head_dim).enumerate() {
            let pos = (pos0 + i) as f32;
            for j in 0..half {
                let angle = pos * self.inv_freq[j];
                cos[j] = angle.cos();
                sin[j] = angle.sin();
            }
            for h in row.chunks_exact_mut(head_dim) {
                match self.style {
                    RopeStyle::Interleaved => {
                        for j in 0..half {
                            let (a, b) = (h[2 * j], h[2 * j + 1]);
                            h[2 * j] = a * cos[j] - b * sin[j];
                            h[2 * j + 1] = a * sin[j] + b * cos[j];
                        }
                    }
                    RopeStyle::Half => rotate_half_pairs(h, &cos, &sin),
                }
            }
        }
    }
}

/// Rotates the pairs `(j, j + half)` of one head (`half` = `cos.len()`; the values past
/// `2 · half` stay) by the angles whose cosines and sines are given (transformers'
/// `rotate_half` layout).
pub fn rotate_half_pairs(head: &mut [f32], cos: &[f32], sin: &[f32]) {
    let half = cos.len();
    for j in 0..half {
        let (a, b) = (head[j], head[j + half]);
        head[j] = a * cos[j] - b * sin[j];
        head[j + half] = b * cos[j] + a * sin[j];
    }
}

impl RopeOp for Rope {
    fn dim(&self) -> usize {
        Rope::dim(self)
    }

    fn interleaved(&self) -> bool {
        Rope::interleaved(self)
    }

    fn tables(&self, pos0: usize, t: usize, cos: &mut [f32], sin: &mut [f32]) {
        Rope::tables(self, pos0, t, cos, sin);
    }

    fn apply(&self, x: &mut [f32], t: usize, heads: usize, head_dim: usize, pos0: usize) {
        Rope::apply(self, x, t, heads, head_dim, pos0);
    }
}
