//! The scalar reference row quantizers (the AVX2 twins in `avx2.rs` write the same bytes).

use crate::error::KernelError;
use crate::format::WeightFormat;

/// `Ok` when every value of `x` is finite, else the error naming the first that is not.
pub(super) fn finite(format: WeightFormat, x: &[f32]) -> Result<(), KernelError> {
    match x.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(index) => Err(KernelError::NonFinite {
            format,
            index,
            value: x[index].to_string(),
        }),
    }
}

/// Q8: per block of 32, `d = max|x| / 127`, `q = round(x / d)` (so `|x - d q| ≤ d / 2`).
pub(super) fn q8_row(x: &[f32], qs: &mut [u8], scales: &mut [u8]) {
    for ((xs, q), s) in x
        .chunks_exact(32)
        .zip(qs.chunks_exact_mut(32))
        .zip(scales.chunks_exact_mut(4))
    {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        for (qj, &v) in q.iter_mut().zip(xs) {
            *qj = (v * id).round().clamp(-127.0, 127.0) as i8 as u8;
        }
        s.copy_from_slice(&d.to_le_bytes());
    }
}

/// Q4 (Q4_0's rule): per block of 32, `m` = the value of largest magnitude, `d = m / -8` (stored
/// as f16; the quants are computed with the stored value), `q = clamp(floor(x / d + 8.5), 0, 15)`.
/// So `|x - d (q - 8)| ≤ |d| / 2`, except values of the opposite sign to `m` beyond `7.5 |d|`,
/// which clamp to `q = 15` (error at most `|d|`).
pub(super) fn q4_row(x: &[f32], qs: &mut [u8], scales: &mut [u8]) -> Result<(), KernelError> {
    for (bi, ((xs, q), s)) in x
        .chunks_exact(32)
        .zip(qs.chunks_exact_mut(16))
        .zip(scales.chunks_exact_mut(2))
        .enumerate()
    {
        let (im, m) =
            xs.iter().enumerate().fold(
                (0, 0f32),
                |(i, m), (j, &v)| {
                    if v.abs() > m.abs() {
                        (j, v)
                    } else {
                        (i, m)
                    }
                },
            );
        let dh = half::f16::from_f32(m / -8.0);
        let d = dh.to_f32();
        if !d.is_finite() {
            return Err(q4_overflow(bi * 32 + im, m));
        }
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let quant = |v: f32| (v * id + 8.5).floor().clamp(0.0, 15.0) as u8;
        for j in 0..16 {
            q[j] = quant(xs[j]) | (quant(xs[j + 16]) << 4);
        }
        s.copy_from_slice(&dh.to_le_bytes());
    }
    Ok(())
}

/// The error for a Q4 block maximum `m` (weight `index` of the row) whose scale overflows f16.
pub(super) fn q4_overflow(index: usize, m: f32) -> KernelError {
    KernelError::NonFinite {
        format: WeightFormat::Q4,
        index,
        value: format!("{} (a block maximum whose Q4 scale overflows f16)", m),
    }
}
