//! Weight quantization (used at load time and by `oxinfer quantize`): f32 rows → the split
//! formats `Q8` (32 i8 weights per f32 scale) and `Q4` (Q4_0-style: 32 4-bit weights per f16
//! scale), or → BF16. [`quantize_matrix`] converts a whole matrix on the thread pool.
//!
//! The scalar functions here are the reference; the AVX2 twins in `avx2` write the same bytes
//! (tested on every rounding tie and edge case), chosen at run time by [`quantize_row`].
//!
//! The result is exactly what the kernels read, so it can be written to a file and borrowed back.

use crate::dispatch::{detected_isa, Isa};
use crate::error::KernelError;
use crate::format::WeightFormat;
use crate::matrix::WeightMatrix;
use crate::pool::parallel_for;
use std::sync::Mutex;

#[cfg(target_arch = "x86_64")]
mod avx2;
mod scalar;

use scalar::{finite, q4_row, q8_row};

/// Formats [`quantize_row`] and [`quantize_matrix`] produce.
pub const TARGETS: [WeightFormat; 3] = [WeightFormat::BF16, WeightFormat::Q8, WeightFormat::Q4];

/// Quantizes one row `x` into `format` (one of [`TARGETS`]): the quants into `qs`
/// (`format.row_bytes(x.len())` bytes) and, for the split formats, the scales into `scales`
/// (`format.row_scale_bytes(x.len())` bytes; empty for BF16). Uses the best instruction set
/// of the CPU ([`quantize_row_isa`]; the scalar reference under `OXINFER_KERNELS=scalar`): the
/// bytes are the same with any.
///
/// # Errors
/// [`KernelError::NonFinite`] for a NaN or infinite weight (or a Q4 scale beyond f16),
/// [`KernelError::NotBlockMultiple`] / [`KernelError::RowBytes`] / [`KernelError::Scales`] for
/// buffers of the wrong size, [`KernelError::Scales`] for a format not in [`TARGETS`].
pub fn quantize_row(
    format: WeightFormat,
    x: &[f32],
    qs: &mut [u8],
    scales: &mut [u8],
) -> Result<(), KernelError> {
    let isa = match crate::dispatch::kernel_set() {
        crate::dispatch::KernelSet::Auto => detected_isa(),
        crate::dispatch::KernelSet::Scalar => Isa::Scalar,
    };
    quantize_row_isa(format, x, qs, scales, isa)
}

/// [`quantize_row`] with the instruction set chosen by the caller (tests and benches compare
/// them): [`Isa::Avx2`] runs the AVX2 twins, anything else the scalar reference.
pub fn quantize_row_isa(
    format: WeightFormat,
    x: &[f32],
    qs: &mut [u8],
    scales: &mut [u8],
    isa: Isa,
) -> Result<(), KernelError> {
    let n = x.len();
    if !TARGETS.contains(&format) {
        return Err(KernelError::Scales {
            format,
            what: "not a quantization target (BF16, Q8, Q4)".into(),
        });
    }
    let (Some(want_q), Some(want_s)) = (format.row_bytes(n), format.row_scale_bytes(n)) else {
        return Err(KernelError::NotBlockMultiple {
            format,
            n,
            block_size: format.block_size(),
        });
    };
    if qs.len() != want_q {
        return Err(KernelError::RowBytes {
            format,
            n,
            expected: want_q,
            actual: qs.len(),
        });
    }
    if scales.len() != want_s {
        return Err(KernelError::Scales {
            format,
            what: format!(
                "a row of {n} weights takes {want_s} scale bytes, but {} were given",
                scales.len()
            ),
        });
    }
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: an AVX2 level is only handed out when the CPU has AVX2 + FMA + F16C; sizes
        // checked above.
        unsafe {
            if avx2::any_non_finite(x) {
                return finite(format, x);
            }
            match format {
                WeightFormat::Q8 => avx2::q8_row(x, qs, scales),
                WeightFormat::Q4 => {
                    avx2::q4_row(x, qs, scales).map_err(|(i, m)| scalar::q4_overflow(i, m))?
                }
                _ => avx2::bf16_row(x, qs),
            }
        }
        return Ok(());
    }
    let _ = isa;
    finite(format, x)?;
    match format {
        WeightFormat::Q8 => q8_row(x, qs, scales),
        WeightFormat::Q4 => q4_row(x, qs, scales)?,
        _ => {
            for (b, &v) in qs.chunks_exact_mut(2).zip(x) {
                b.copy_from_slice(&half::bf16::from_f32(v).to_le_bytes());
            }
        }
    }
    Ok(())
}

/// A matrix converted by [`quantize_matrix`]: `data` is `rows * format.row_bytes(cols)` bytes,
/// `scales` `rows * format.row_scale_bytes(cols)` bytes (empty for BF16), rows back to back.
#[derive(Clone, Debug)]
pub struct Quantized {
    /// The format of `data` / `scales`.
    pub format: WeightFormat,
    /// The quants (or bf16 values).
    pub data: Vec<u8>,
    /// The per-block scales of a split format.
    pub scales: Vec<u8>,
}

impl Quantized {
    /// The result as a matrix the kernels read.
    pub fn matrix(&self, rows: usize, cols: usize) -> Result<WeightMatrix<'_>, KernelError> {
        WeightMatrix::new_split(self.format, &self.data, &self.scales, rows, cols)
    }
}

/// Converts every row of `src` (any readable format) into `format` (one of [`TARGETS`]),
/// rows spread over the kernel thread pool. Deterministic: the same input gives the same bytes
/// whatever the thread count.
///
/// # Errors
/// As [`quantize_row`] (the first failing row's error, with its row number in the message for
/// non-finite weights), and [`KernelError::NotBlockMultiple`] when `src.cols` is not a multiple
/// of 32 for a split format.
pub fn quantize_matrix(src: &WeightMatrix, format: WeightFormat) -> Result<Quantized, KernelError> {
    let (rows, cols) = (src.rows, src.cols);
    let (Some(rq), Some(rs)) = (format.row_bytes(cols), format.row_scale_bytes(cols)) else {
        return Err(KernelError::NotBlockMultiple {
            format,
            n: cols,
            block_size: format.block_size(),
        });
    };
    let overflow = || KernelError::Overflow {
        format,
        what: format!("a [{rows} x {cols}] matrix"),
    };
    let mut data = vec![0u8; rq.checked_mul(rows).ok_or_else(overflow)?];
    let mut scales = vec![0u8; rs.checked_mul(rows).ok_or_else(overflow)?];
    // Tasks of whole row ranges: each owns disjoint chunks of `data` and `scales`.
    let per_task = (1 << 16) / cols.max(1) + 1;
    let n_tasks = rows.div_ceil(per_task);
    let first_err: Mutex<Option<(usize, KernelError)>> = Mutex::new(None);
    {
        let parts: Vec<Mutex<(&mut [u8], &mut [u8])>> = data
            .chunks_mut((rq * per_task).max(1))
            .zip(
                scales
                    .chunks_mut((rs * per_task).max(1))
                    .chain(std::iter::repeat_with(|| -> &mut [u8] { &mut [] })),
            )
            .map(Mutex::new)
            .collect();
        parallel_for(n_tasks.min(parts.len()), &|task| {
            let mut guard = parts[task].lock().unwrap_or_else(|e| e.into_inner());
            let (q, s) = &mut *guard;
            let mut row = vec![0f32; cols];
            let r0 = task * per_task;
            let r1 = (r0 + per_task).min(rows);
            for r in r0..r1 {
                let i = r - r0;
                src.dequantize_row_into(r, &mut row);
                let res = quantize_row(
                    format,
                    &row,
                    &mut q[i * rq..(i + 1) * rq],
                    &mut s[i * rs..(i + 1) * rs],
                );
                if let Err(e) = res {
                    let mut fe = first_err.lock().unwrap_or_else(|e| e.into_inner());
                    if fe.as_ref().is_none_or(|(fr, _)| r < *fr) {
                        *fe = Some((r, e));
                    }
                    return;
                }
            }
        });
    }
    if let Some((r, e)) = first_err.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(match e {
            KernelError::NonFinite {
                format,
                index,
                value,
            } => KernelError::NonFinite {
                format,
                index: r * cols + index,
                value,
            },
            other => other,
        });
    }
    Ok(Quantized {
        format,
        data,
        scales,
    })
}

#[cfg(test)]
mod tests;
