//! On-load conversion: every streamed weight matrix of a safetensors checkpoint (2-D F32, F16
//! or BF16 tensors; norms and other vectors stay as they are) converted to the requested
//! precision on the kernel thread pool, and a [`TensorStore`] that serves the converted
//! tensors in place of the file's.

use super::Precision;
use crate::error::LoadError;
use crate::loader::safetensors::{dtype_format, SafetensorsModel};
use crate::loader::{TensorStore, TensorView};
use oxinfer_kernels::quantize::quantize_matrix;
use oxinfer_kernels::WeightFormat;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// What a conversion did.
#[derive(Clone, Debug)]
pub struct QuantReport {
    /// The target precision.
    pub precision: Precision,
    /// Matrices converted.
    pub converted: usize,
    /// Matrices left as stored (already in the target format, or rows not a multiple of 32).
    pub kept: usize,
    /// Bytes of the converted matrices as stored in the file.
    pub bytes_in: u64,
    /// Bytes of their converted form (quants + scales).
    pub bytes_out: u64,
    /// Wall time of the conversion in seconds.
    pub seconds: f64,
}

impl QuantReport {
    /// Conversion speed: stored bytes read per second, in GB/s (10⁹ bytes).
    pub fn gb_per_s(&self) -> f64 {
        self.bytes_in as f64 / self.seconds.max(1e-9) / 1e9
    }

    /// One line for stderr.
    pub fn summary(&self) -> String {
        format!(
            "quantized {} matrices to {} ({:.1} MB -> {:.1} MB; {} kept as stored) in {:.2} s, {:.2} GB/s",
            self.converted,
            self.precision,
            self.bytes_in as f64 / 1e6,
            self.bytes_out as f64 / 1e6,
            self.kept,
            self.seconds,
            self.gb_per_s()
        )
    }
}

/// The converted tensors of a checkpoint, by name.
pub struct Converted {
    /// Converted tensors (held in memory), by their name in the checkpoint.
    pub tensors: BTreeMap<String, TensorView>,
    /// What was done.
    pub report: QuantReport,
}

/// Whether a tensor is a streamed weight matrix the conversion applies to: a 2-D float tensor,
/// or a stacked 3-D `[experts, rows, cols]` float tensor of an MoE layer (its name holds
/// `experts`; converted as `experts * rows` rows, so each expert's rows stay one contiguous
/// block of quants and one of scales). Other 3-D tensors (convolution kernels) stay as stored.
fn convertible(name: &str, dtype: &str, shape: &[usize]) -> bool {
    let stacked_experts = shape.len() == 3 && name.contains("experts");
    (shape.len() == 2 || stacked_experts) && dtype_format(dtype).is_some()
}

/// [`convert`] to `precision` when one is given (`--quant`), else nothing to overlay.
///
/// # Errors
/// As [`convert`].
pub fn convert_to(
    st: &SafetensorsModel,
    precision: Option<Precision>,
) -> Result<Option<Converted>, LoadError> {
    precision.map(|p| convert(st, p)).transpose()
}

/// Converts every 2-D float matrix and stacked 3-D expert tensor of `st` to `precision` (norms,
/// biases and other vectors stay as stored; so do matrices already in the target format, and
/// Q8/Q4 matrices whose rows are not a multiple of 32 weights).
///
/// # Errors
/// A tensor that cannot be read, or holds a NaN / infinite weight (named in the message).
pub fn convert(st: &SafetensorsModel, precision: Precision) -> Result<Converted, LoadError> {
    let t0 = Instant::now();
    let target = precision.format();
    let mut tensors = BTreeMap::new();
    let (mut kept, mut bytes_in, mut bytes_out) = (0, 0u64, 0u64);
    let names: Vec<String> = st
        .entries()
        .filter(|(n, e)| convertible(n, &e.dtype, &e.shape))
        .map(|(n, _)| n.clone())
        .collect();
    for name in names {
        let view = st.require(&name)?;
        let (_, cols) = view.rows_cols();
        if view.format == target || target.row_bytes(cols).is_none() {
            kept += 1;
            continue;
        }
        let q = quantize_matrix(&view.matrix()?, target)
            .map_err(|e| LoadError::tensor(view.path(), &name, e.to_string()))?;
        bytes_in += view.bytes().len() as u64;
        bytes_out += (q.data.len() + q.scales.len()) as u64;
        let converted = TensorView::from_owned(
            view.path(),
            &name,
            target,
            view.shape.clone(),
            q.data,
            q.scales,
        );
        tensors.insert(name, converted);
    }
    let report = QuantReport {
        precision,
        converted: tensors.len(),
        kept,
        bytes_in,
        bytes_out,
        seconds: t0.elapsed().as_secs_f64(),
    };
    Ok(Converted { tensors, report })
}

/// A store that serves `over`'s tensors in place of `base`'s (converted weights over the file).
pub struct Overlay<'a> {
    /// The checkpoint.
    pub base: &'a dyn TensorStore,
    /// Replacements by name.
    pub over: Option<&'a BTreeMap<String, TensorView>>,
}

impl<'a> Overlay<'a> {
    /// `base` with the tensors of `converted` (when given) read in place of its own.
    pub fn new(base: &'a dyn TensorStore, converted: Option<&'a Converted>) -> Self {
        Overlay {
            base,
            over: converted.map(|c| &c.tensors),
        }
    }
}

impl TensorStore for Overlay<'_> {
    fn path(&self) -> &Path {
        self.base.path()
    }

    fn get(&self, name: &str) -> Option<Result<TensorView, LoadError>> {
        match self.over.and_then(|m| m.get(name)) {
            Some(v) => Some(Ok(v.clone())),
            None => self.base.get(name),
        }
    }
}

/// Whether `format` is one this module produces (for `info` and the writer).
pub fn is_target(format: WeightFormat) -> bool {
    Precision::ALL.iter().any(|p| p.format() == format)
}
