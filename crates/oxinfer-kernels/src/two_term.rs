//! Two-term int8 activations: `x ≈ d1·q1 + d2·q2`, where `q1` is the usual int8 quantization
//! of `x` (the blocks the weight's kernels take: [`crate::q8::BlockQ8`] or
//! [`crate::q8::BlockQ8K`]) and `q2` the int8 quantization of what it left over. The rounding
//! error falls from half a step of `d1` to half a step of `d2 ≈ d1 / 254`, so a product is
//! within about 0.4 % of the int8 error of the exact (f32-activation) result, for the price of
//! a second integer dot product per weight.
//!
//! It is built from the existing kernels, not beside them: [`split_two_term`] turns `t` input
//! rows into `2t` (each row followed by its rounding residual), the ordinary matmul multiplies
//! those (the packed kernels keep both rows of a token in one token tile, so every weight is
//! still read and unpacked once), and [`sum_two_term`] adds each pair of output rows. Used
//! where the extra dot products cost nothing measurable: the output head, which prompt
//! processing and decoding run for one token at a time (memory-bound), and whose rounding
//! lands straight on the logits.

use crate::format::WeightFormat;
use crate::q8::{quantize_q8, quantize_q8k, BlockQ8, BlockQ8K};
use crate::vecdot::{act_kind, ActKind};

/// Whether the kernels of `format` quantize activations (int8 blocks), so that
/// [`split_two_term`] makes their product closer to exact; false for float weights, whose
/// kernels take f32 activations.
pub fn rounds_activations(format: WeightFormat) -> bool {
    act_kind(format) != ActKind::F32
}

/// `x` (`[t, cols]` row-major f32) as `[2t, cols]`: row `2k` is row `k` of `x`, row `2k + 1`
/// its residual `x_k - d1·q1`, the part that the int8 quantizer of `format`'s kernels
/// ([`quantize_q8`] for 32-weight formats, [`quantize_q8k`] for K-quants, per block of 32 or
/// 256 values) rounds away. Multiplying the result and adding each pair of output rows
/// ([`sum_two_term`]) gives the product with two-term activations. For float formats (no
/// rounding) the residual rows are zero.
///
/// # Panics
/// If `x.len() != t * cols`, or `cols` is not a multiple of the activation block (32, or 256
/// for K-quants) for a format that rounds activations.
pub fn split_two_term(format: WeightFormat, x: &[f32], t: usize, cols: usize) -> Vec<f32> {
    assert_eq!(x.len(), t * cols, "x must be [t = {t}, cols = {cols}]");
    let mut out = vec![0f32; 2 * t * cols];
    let mut rounded = vec![0f32; cols];
    for (xs, pair) in x.chunks_exact(cols).zip(out.chunks_exact_mut(2 * cols)) {
        let (first, residual) = pair.split_at_mut(cols);
        first.copy_from_slice(xs);
        if !round_trip(format, xs, &mut rounded) {
            continue;
        }
        for ((r, &v), &q) in residual.iter_mut().zip(xs).zip(&rounded) {
            *r = v - q;
        }
    }
    out
}

/// `y[k] = y2[2k] + y2[2k + 1]` for each of the `t` output rows of `rows` values: the
/// product with two-term activations from the product of [`split_two_term`]'s rows.
///
/// # Panics
/// If `y2.len() != 2 * t * rows` or `y.len() != t * rows`.
pub fn sum_two_term(y2: &[f32], t: usize, rows: usize, y: &mut [f32]) {
    assert_eq!(
        y2.len(),
        2 * t * rows,
        "y2 must be [2t = {}, rows = {rows}]",
        2 * t
    );
    assert_eq!(y.len(), t * rows, "y must be [t = {t}, rows = {rows}]");
    if rows == 0 {
        return;
    }
    for (pair, out) in y2.chunks_exact(2 * rows).zip(y.chunks_exact_mut(rows)) {
        let (a, b) = pair.split_at(rows);
        for ((o, &u), &v) in out.iter_mut().zip(a).zip(b) {
            *o = u + v;
        }
    }
}

/// `out` = `x` quantized the way `format`'s kernels quantize activations, and back (`d·q`);
/// false (nothing written) when `format`'s kernels take f32 activations.
fn round_trip(format: WeightFormat, x: &[f32], out: &mut [f32]) -> bool {
    match act_kind(format) {
        ActKind::F32 => false,
        ActKind::Q8 => {
            let mut q = vec![BlockQ8::default(); x.len() / 32];
            quantize_q8(x, &mut q);
            for (b, o) in q.iter().zip(out.chunks_exact_mut(32)) {
                for (v, &qv) in o.iter_mut().zip(&b.qs) {
                    *v = b.d * f32::from(qv);
                }
            }
            true
        }
        ActKind::Q8K => {
            let mut q = vec![BlockQ8K::default(); x.len() / 256];
            quantize_q8k(x, &mut q);
            for (b, o) in q.iter().zip(out.chunks_exact_mut(256)) {
                for (v, &qv) in o.iter_mut().zip(&b.qs) {
                    *v = b.d * f32::from(qv);
                }
            }
            true
        }
    }
}

#[cfg(test)]
mod tests;
