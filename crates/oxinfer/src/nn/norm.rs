//! RMSNorm, plain (`x / rms · w`) or zero-centred (`x / rms · (1 + w)`, Gemma).

use crate::error::LoadError;
use crate::loader::TensorStore;
use crate::plan::NormOp;

/// Root-mean-square normalization over the last dimension.
pub struct RmsNorm {
    /// Per-feature gain, already including the `1 +` of zero-centred variants.
    pub weight: Vec<f32>,
    pub eps: f32,
}

impl RmsNorm {
    /// Loads the gain vector `name` of length `dim`; `unit_offset` adds 1 to it (zero-centred
    /// norms store `w` and compute with `1 + w`).
    pub fn load(
        store: &dyn TensorStore,
        name: &str,
        dim: usize,
        eps: f32,
        unit_offset: bool,
    ) -> Result<Self, LoadError> {
        let mut weight = store.require_shape(name, &[dim])?.to_f32()?;
        if unit_offset {
            weight.iter_mut().for_each(|w| *w += 1.0);
        }
        Ok(RmsNorm { weight, eps })
    }

    /// Normalizes each row of `x` (`[t, dim]`) in place.
    pub fn forward_inplace(&self, x: &mut [f32]) {
        let _prof =
            oxinfer_kernels::profile::scope(|| "rms_norm".to_string(), (x.len() * 4) as u64, 0);
        let dim = self.weight.len();
        if dim == 0 {
            return;
        }
        let rows = x.len() / dim;
        // Rows are independent: split them over the pool when there is enough work (each row
        // computes exactly as in the serial loop).
        const MIN_TASK_VALUES: usize = 16 * 1024;
        let per_task = MIN_TASK_VALUES.div_ceil(dim).max(1);
        if rows <= per_task {
            for row in x.chunks_exact_mut(dim) {
                rms_norm_row(row, &self.weight, self.eps);
            }
            return;
        }
        let mut chunks: Vec<std::sync::Mutex<&mut [f32]>> = x[..rows * dim]
            .chunks_mut(per_task * dim)
            .map(std::sync::Mutex::new)
            .collect();
        let chunks = &mut chunks[..];
        let chunks: &[std::sync::Mutex<&mut [f32]>] = chunks;
        oxinfer_kernels::pool::parallel_for(chunks.len(), &|i| {
            let mut c = chunks[i].lock().unwrap_or_else(|e| e.into_inner());
            for row in c.chunks_exact_mut(dim) {
                rms_norm_row(row, &self.weight, self.eps);
            }
        });
    }

    /// Normalizes each row of `x` (`[t, dim]`) into a new buffer.
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        let mut y = x.to_vec();
        self.forward_inplace(&mut y);
        y
    }
}

impl NormOp for RmsNorm {
    fn gain(&self) -> &[f32] {
        &self.weight
    }

    fn eps(&self) -> f32 {
        self.eps
    }

    fn forward_inplace(&self, x: &mut [f32]) {
        RmsNorm::forward_inplace(self, x);
    }
}

/// `row ← row / sqrt(mean(row²) + eps) · w`, accumulating in f64 like a careful reference
/// (eight interleaved f64 partial sums, so the loop vectorizes instead of waiting on one add
/// chain).
pub fn rms_norm_row(row: &mut [f32], w: &[f32], eps: f32) {
    let mut acc = [0f64; 8];
    let mut chunks = row.chunks_exact(8);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f64::from(v) * f64::from(v);
        }
    }
    let tail: f64 = chunks
        .remainder()
        .iter()
        .map(|&v| f64::from(v) * f64::from(v))
        .sum();
    let ss: f64 = acc.iter().sum::<f64>() + tail;
    let inv = (1.0 / (ss / row.len() as f64 + f64::from(eps)).sqrt()) as f32;
    for (v, &g) in row.iter_mut().zip(w) {
        *v = *v * inv * g;
    }
}
