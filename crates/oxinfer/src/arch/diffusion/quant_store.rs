//! On-load quantization of the UNet (`--quant q8|q4`): a tensor store over the UNet's weights
//! that hands out its linear layers (`[out, in]`) and its convolutions — unfolded to the
//! `[out, k · k · in]` layout of [`crate::nn::conv2d`] — quantized to Q8 (32 int8 weights per f32
//! scale) or Q4, where the row length is a multiple of 32. Everything else (norms, biases,
//! short rows such as `conv_in`'s 4 × 9 inputs) is served as stored.

use super::layers::unfold_conv_weight;
use crate::error::LoadError;
use crate::loader::{TensorStore, TensorView};
use crate::quant::Precision;
use oxinfer_kernels::quantize::quantize_matrix;
use oxinfer_kernels::WeightFormat;
use std::path::Path;

/// `base` with its weight matrices and convolution kernels quantized to `precision`.
pub struct QuantizedStore<'a> {
    /// The UNet's weights as stored.
    pub base: &'a dyn TensorStore,
    /// What matrices become (`Q8` or `Q4`; `BF16` converts float matrices to bf16).
    pub precision: Precision,
}

impl QuantizedStore<'_> {
    /// `t` quantized when it is a float weight matrix or kernel whose rows fit the format.
    fn convert(&self, name: &str, t: TensorView) -> Result<TensorView, LoadError> {
        let float = matches!(
            t.format,
            WeightFormat::F32 | WeightFormat::F16 | WeightFormat::BF16
        );
        if !name.ends_with(".weight") || !float {
            return Ok(t);
        }
        let matrix = match t.shape.len() {
            2 => t,
            4 => unfold_conv_weight(&t)?,
            _ => return Ok(t),
        };
        let target = self.precision.format();
        let (_, cols) = matrix.rows_cols();
        if matrix.format == target || target.row_bytes(cols).is_none() {
            return Ok(matrix);
        }
        let q = quantize_matrix(&matrix.matrix()?, target)
            .map_err(|e| LoadError::tensor(matrix.path(), name, e.to_string()))?;
        Ok(TensorView::from_owned(
            matrix.path(),
            name,
            target,
            matrix.shape.clone(),
            q.data,
            q.scales,
        ))
    }
}

impl TensorStore for QuantizedStore<'_> {
    fn path(&self) -> &Path {
        self.base.path()
    }

    fn get(&self, name: &str) -> Option<Result<TensorView, LoadError>> {
        Some(self.base.get(name)?.and_then(|t| self.convert(name, t)))
    }
}
