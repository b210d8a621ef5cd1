//! LayerNorm over the last dimension: `(x − mean) / sqrt(var + eps) · w + b` (BERT-style
//! encoders).

use crate::error::LoadError;
use crate::loader::TensorStore;
use oxinfer_kernels::pool::for_each_mut;

/// Layer normalization with a per-feature gain and bias.
pub struct LayerNorm {
    /// Per-feature gain `[dim]`.
    pub weight: Vec<f32>,
    /// Per-feature bias `[dim]`.
    pub bias: Vec<f32>,
    /// Added to the variance.
    pub eps: f32,
}

impl LayerNorm {
    /// Loads `{stem}.weight` and `{stem}.bias`, each of length `dim`.
    pub fn load(
        store: &dyn TensorStore,
        stem: &str,
        dim: usize,
        eps: f32,
    ) -> Result<Self, LoadError> {
        let weight = store
            .require_shape(&format!("{stem}.weight"), &[dim])?
            .to_f32()?;
        let bias = store
            .require_shape(&format!("{stem}.bias"), &[dim])?
            .to_f32()?;
        Ok(LayerNorm { weight, bias, eps })
    }

    /// Normalizes each row of `x` (`[t, dim]`) in place, rows in parallel parts.
    pub fn forward_inplace(&self, x: &mut [f32]) {
        let dim = self.weight.len();
        if dim == 0 {
            return;
        }
        const ROWS_PER_PART: usize = 32;
        let mut parts: Vec<&mut [f32]> = x.chunks_mut(ROWS_PER_PART * dim).collect();
        for_each_mut(&mut parts, |_, part| {
            for row in part.chunks_exact_mut(dim) {
                layer_norm_row(row, &self.weight, &self.bias, self.eps);
            }
        });
    }
}

/// `row ← (row − mean) / sqrt(var + eps) · w + b`, the statistics accumulated in f64.
pub fn layer_norm_row(row: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let n = row.len() as f64;
    let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = row
        .iter()
        .map(|&v| (f64::from(v) - mean).powi(2))
        .sum::<f64>()
        / n;
    let inv = 1.0 / (var + f64::from(eps)).sqrt();
    for ((v, &g), &bias) in row.iter_mut().zip(w).zip(b) {
        *v = ((f64::from(*v) - mean) * inv) as f32 * g + bias;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_to_zero_mean_unit_variance() {
        let mut row = [1.0f32, 2.0, 3.0, 4.0];
        layer_norm_row(&mut row, &[1.0; 4], &[0.5; 4], 0.0);
        let want = [-1.341_640_8, -0.447_213_6, 0.447_213_6, 1.341_640_8];
        for (g, w) in row.iter().zip(want) {
            assert!((g - (w + 0.5)).abs() < 1e-6, "{g} vs {w}");
        }
    }
}
