//! Activations quantized to int8 blocks, so quantized weights can be multiplied with integer
//! dot products: [`BlockQ8`] (32 values, for the 32-weight formats) and [`BlockQ8K`] (256
//! values with per-16 sums, for the K-quants).

/// 32 activations as `d * qs[i]`, with `s = d * Σ qs` for formats that carry a minimum.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct BlockQ8 {
    /// Scale.
    pub d: f32,
    /// `d * Σ qs`.
    pub s: f32,
    /// Quantized values.
    pub qs: [i8; 32],
}

/// 256 activations as `d * qs[i]`, with the sum of each group of 16 quants.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct BlockQ8K {
    /// Scale.
    pub d: f32,
    /// Quantized values.
    pub qs: [i8; 256],
    /// `Σ qs[16 g .. 16 g + 16]` for each group `g`.
    pub bsums: [i16; 16],
}

impl Default for BlockQ8 {
    fn default() -> Self {
        BlockQ8 {
            d: 0.0,
            s: 0.0,
            qs: [0; 32],
        }
    }
}

impl Default for BlockQ8K {
    fn default() -> Self {
        BlockQ8K {
            d: 0.0,
            qs: [0; 256],
            bsums: [0; 16],
        }
    }
}

fn quantize_block(x: &[f32], qs: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    if amax == 0.0 || !amax.is_finite() {
        qs.fill(0);
        return if amax.is_finite() { 0.0 } else { f32::NAN };
    }
    let d = amax / 127.0;
    let id = 1.0 / d;
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = (v * id).round().clamp(-127.0, 127.0) as i8;
    }
    d
}

/// Quantizes `x` (length a multiple of 32) into `x.len() / 32` blocks.
///
/// # Panics
/// If `out.len() * 32 != x.len()`.
pub fn quantize_q8(x: &[f32], out: &mut [BlockQ8]) {
    assert_eq!(out.len() * 32, x.len(), "x must hold 32 values per block");
    for (b, xs) in out.iter_mut().zip(x.chunks_exact(32)) {
        b.d = quantize_block(xs, &mut b.qs);
        b.s = b.d * b.qs.iter().map(|&q| i32::from(q)).sum::<i32>() as f32;
    }
}

/// Quantizes `x` (length a multiple of 256) into `x.len() / 256` blocks.
///
/// # Panics
/// If `out.len() * 256 != x.len()`.
pub fn quantize_q8k(x: &[f32], out: &mut [BlockQ8K]) {
    assert_eq!(out.len() * 256, x.len(), "x must hold 256 values per block");
    for (b, xs) in out.iter_mut().zip(x.chunks_exact(256)) {
        b.d = quantize_block(xs, &mut b.qs);
        for (g, s) in b.bsums.iter_mut().enumerate() {
            *s = b.qs[16 * g..16 * g + 16]
                .iter()
                .map(|&q| i16::from(q))
                .sum();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_error_is_within_half_a_step() {
        let x: Vec<f32> = (0..256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
            .collect();
        let mut b = vec![BlockQ8K::default(); 1];
        quantize_q8k(&x, &mut b);
        for (i, &v) in x.iter().enumerate() {
            assert!((b[0].d * b[0].qs[i] as f32 - v).abs() <= b[0].d * 0.5 + 1e-7);
        }
        let mut q = vec![BlockQ8::default(); 8];
        quantize_q8(&x, &mut q);
        for (blk, xs) in q.iter().zip(x.chunks_exact(32)) {
            let s: i32 = blk.qs.iter().map(|&v| v as i32).sum();
            assert!((blk.s - blk.d * s as f32).abs() < 1e-6);
            for (qv, v) in blk.qs.iter().zip(xs) {
                assert!((blk.d * *qv as f32 - v).abs() <= blk.d * 0.5 + 1e-7);
            }
        }
    }
}
