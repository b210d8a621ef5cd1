//! Linear layer `y = x Wᵀ + b` over a weight matrix in any storage format.

use crate::error::LoadError;
use crate::loader::{TensorStore, TensorView};
use oxinfer_kernels::WeightMatrix;

/// A linear layer whose weight `[n_out, n_in]` stays in its file's format (borrowed, not copied).
pub struct Linear {
    weight: TensorView,
    bias: Option<Vec<f32>>,
    /// Output features.
    pub n_out: usize,
    /// Input features.
    pub n_in: usize,
}

impl Linear {
    /// Loads `name` (shape `[n_out, n_in]`) and, when present, the bias named by replacing the
    /// `weight` suffix with `bias`.
    pub fn load(
        store: &dyn TensorStore,
        name: &str,
        n_out: usize,
        n_in: usize,
    ) -> Result<Self, LoadError> {
        let weight = store.require_shape(name, &[n_out, n_in])?;
        let bias = match name.strip_suffix("weight") {
            Some(stem) => match store.get(&format!("{stem}bias")) {
                Some(b) => {
                    let b = b?;
                    if b.shape != [n_out] {
                        return Err(LoadError::tensor(
                            store.path(),
                            &b.name,
                            format!("shape {:?}, expected [{n_out}]", b.shape),
                        ));
                    }
                    Some(b.to_f32()?)
                }
                None => None,
            },
            None => None,
        };
        Self::from_view(weight, bias)
    }

    /// Wraps a weight already fetched (e.g. a tied embedding table used as the output head).
    pub fn from_view(weight: TensorView, bias: Option<Vec<f32>>) -> Result<Self, LoadError> {
        let (n_out, n_in) = match weight.shape[..] {
            [o, i] => (o, i),
            _ => {
                return Err(LoadError::tensor(
                    weight.path(),
                    &weight.name,
                    format!("expected a matrix, shape is {:?}", weight.shape),
                ))
            }
        };
        weight.matrix()?;
        Ok(Linear {
            weight,
            bias,
            n_out,
            n_in,
        })
    }

    /// The weight as the kernels see it.
    pub fn matrix(&self) -> WeightMatrix<'_> {
        WeightMatrix {
            format: self.weight.format,
            data: self.weight.bytes(),
            scales: self.weight.scales_bytes(),
            rows: self.n_out,
            cols: self.n_in,
        }
    }

    /// The weight tensor.
    pub fn weight(&self) -> &TensorView {
        &self.weight
    }

    /// `x` is `[t, n_in]`; returns `[t, n_out]`.
    pub fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        let mut y = vec![0f32; t * self.n_out];
        self.forward_into(x, t, &mut y);
        y
    }

    /// `x` is `[t, n_in]`, `y` is `[t, n_out]` (overwritten).
    pub fn forward_into(&self, x: &[f32], t: usize, y: &mut [f32]) {
        debug_assert_eq!(x.len(), t * self.n_in);
        debug_assert_eq!(y.len(), t * self.n_out);
        oxinfer_kernels::matmul(&self.matrix(), x, t, y);
        if let Some(b) = &self.bias {
            for row in y.chunks_exact_mut(self.n_out) {
                for (v, bv) in row.iter_mut().zip(b) {
                    *v += bv;
                }
            }
        }
    }
}
