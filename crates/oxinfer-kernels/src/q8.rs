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

/// [`quantize_block_scalar`] with AVX2 where the CPU has it: the same bytes and scale (the
/// maximum is exact, the multiply by `1 / d` is the same, and rounding is half away from zero
/// as `f32::round`); blocks that are all zero or hold a NaN or an infinity take the scalar path.
fn quantize_block(x: &[f32], qs: &mut [i8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if crate::dispatch::detected_isa().has_avx2()
        && x.len().is_multiple_of(32)
        && qs.len() == x.len()
    {
        // SAFETY: the CPU has AVX2 (and FMA, F16C: detected together); lengths checked.
        if let Some(d) = unsafe { avx2::quantize_block(x, qs) } {
            return d;
        }
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if x.len().is_multiple_of(16) && qs.len() == x.len() {
        if let Some(d) = simd128::quantize_block(x, qs) {
            return d;
        }
    }
    quantize_block_scalar(x, qs)
}

fn quantize_block_scalar(x: &[f32], qs: &mut [i8]) -> f32 {
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
    #[cfg(target_arch = "x86_64")]
    if crate::dispatch::detected_isa().has_avx2() {
        // SAFETY: the CPU has AVX2 (and FMA, F16C: detected together); lengths checked.
        unsafe { avx2::quantize_q8(x, out) };
        return;
    }
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
    #[cfg(target_arch = "x86_64")]
    if crate::dispatch::detected_isa().has_avx2() {
        // SAFETY: the CPU has AVX2 (and FMA, F16C: detected together); lengths checked.
        unsafe { avx2::quantize_q8k(x, out) };
        return;
    }
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

/// The block quantizer on wasm SIMD128 (the scalar one's bytes and scale, as on AVX2): where
/// the portable code rounds each value with a `roundf` call (wasm has no round-half-away
/// instruction), this rounds four at a time: truncate, then step away from zero where the
/// (exact) remainder is at least one half.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128 {
    use std::arch::wasm32::*;

    /// `x` (a multiple of 16 values) into `qs` (as many); `None` for a block that is all zero
    /// or holds a NaN or an infinity (the scalar path's cases).
    pub(super) fn quantize_block(x: &[f32], qs: &mut [i8]) -> Option<f32> {
        let load = |i: usize| {
            let b: &[f32; 4] = x[4 * i..4 * i + 4].try_into().expect("4 values");
            // SAFETY: `b` is 16 readable bytes; wasm loads have no alignment requirement.
            unsafe { v128_load(b.as_ptr().cast()) }
        };
        let (mut amax, mut finite) = (f32x4_splat(0.0), u32x4_splat(u32::MAX));
        for i in 0..x.len() / 4 {
            let a = f32x4_abs(load(i));
            finite = v128_and(finite, f32x4_le(a, f32x4_splat(f32::MAX)));
            amax = f32x4_max(amax, a);
        }
        if !i32x4_all_true(finite) {
            return None;
        }
        let amax = f32x4_extract_lane::<0>(amax)
            .max(f32x4_extract_lane::<1>(amax))
            .max(f32x4_extract_lane::<2>(amax))
            .max(f32x4_extract_lane::<3>(amax));
        if amax == 0.0 {
            return None;
        }
        let d = amax / 127.0;
        let id = f32x4_splat(1.0 / d);
        // `(v * id).round().clamp(-127.0, 127.0) as i8`, four lanes at a time.
        let quant = |i: usize| {
            let p = f32x4_mul(load(i), id);
            let t = f32x4_trunc(p);
            let away = f32x4_ge(f32x4_abs(f32x4_sub(p, t)), f32x4_splat(0.5));
            let one = v128_or(v128_and(p, f32x4_splat(-0.0)), f32x4_splat(1.0));
            let r = f32x4_add(t, v128_and(one, away));
            let r = f32x4_min(f32x4_max(r, f32x4_splat(-127.0)), f32x4_splat(127.0));
            i32x4_trunc_sat_f32x4(r)
        };
        for (c, out) in qs.chunks_exact_mut(16).enumerate() {
            let lo = i16x8_narrow_i32x4(quant(4 * c), quant(4 * c + 1));
            let hi = i16x8_narrow_i32x4(quant(4 * c + 2), quant(4 * c + 3));
            let out: &mut [i8; 16] = out.try_into().expect("16 bytes");
            // SAFETY: `out` is 16 writable bytes; wasm stores have no alignment requirement.
            unsafe { v128_store(out.as_mut_ptr().cast(), i8x16_narrow_i16x8(lo, hi)) };
        }
        Some(d)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{quantize_block_scalar, BlockQ8, BlockQ8K};
    use std::arch::x86_64::*;

    /// [`super::quantize_q8`] on AVX2: every block in one call (no per-block dispatch), the
    /// quant sum taken from the vector quantizer's integer lanes (exact, so `s` has the scalar
    /// path's bits).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `x.len() == 32 * out.len()`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn quantize_q8(x: &[f32], out: &mut [BlockQ8]) {
        let mut sums = [0i32; 2];
        for (b, xs) in out.iter_mut().zip(x.chunks_exact(32)) {
            // SAFETY: forwarded contract; 32 values, 32 quants, 2 sums.
            match unsafe { quantize_block_sums(xs, &mut b.qs, &mut sums) } {
                Some(d) => {
                    b.d = d;
                    b.s = d * (sums[0] + sums[1]) as f32;
                }
                None => {
                    b.d = quantize_block_scalar(xs, &mut b.qs);
                    b.s = b.d * b.qs.iter().map(|&q| i32::from(q)).sum::<i32>() as f32;
                }
            }
        }
    }

    /// [`super::quantize_q8k`] on AVX2, the group sums from the vector quantizer's lanes.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `x.len() == 256 * out.len()`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn quantize_q8k(x: &[f32], out: &mut [BlockQ8K]) {
        let mut sums = [0i32; 16];
        for (b, xs) in out.iter_mut().zip(x.chunks_exact(256)) {
            // SAFETY: forwarded contract; 256 values, 256 quants, 16 sums.
            match unsafe { quantize_block_sums(xs, &mut b.qs, &mut sums) } {
                Some(d) => {
                    b.d = d;
                    for (o, &v) in b.bsums.iter_mut().zip(&sums) {
                        // |Σ| ≤ 16 · 127 = 2032: fits i16.
                        *o = v as i16;
                    }
                }
                None => {
                    b.d = quantize_block_scalar(xs, &mut b.qs);
                    for (g, o) in b.bsums.iter_mut().enumerate() {
                        *o = b.qs[16 * g..16 * g + 16]
                            .iter()
                            .map(|&q| i16::from(q))
                            .sum();
                    }
                }
            }
        }
    }

    /// [`quantize_block`], also writing the sum of each 16 consecutive quants to `sums`
    /// (`x.len() / 16` of them).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn quantize_block_sums(x: &[f32], qs: &mut [i8], sums: &mut [i32]) -> Option<f32> {
        // SAFETY: forwarded contract.
        unsafe { quantize_impl::<true>(x, qs, sums) }
    }

    /// Quantizes `x` (a multiple of 32 values) into `qs` (as long), `None` (nothing written
    /// that matters) when the block is all zero or holds a NaN or an infinity.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn quantize_block(x: &[f32], qs: &mut [i8]) -> Option<f32> {
        // SAFETY: forwarded contract; no sums asked for.
        unsafe { quantize_impl::<false>(x, qs, &mut []) }
    }

    /// The vector quantizer; with `SUMS`, `sums[g]` = Σ `qs[16g .. 16g + 16]` (exact i32 adds of
    /// the quantized lanes before they are narrowed).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn quantize_impl<const SUMS: bool>(
        x: &[f32],
        qs: &mut [i8],
        sums: &mut [i32],
    ) -> Option<f32> {
        let n = x.len();
        let absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
        let mut mx = _mm256_setzero_ps();
        let mut nan = _mm256_setzero_ps();
        let mut i = 0;
        while i < n {
            // SAFETY: i + 8 <= n (n is a multiple of 32).
            let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(i)) };
            mx = _mm256_max_ps(mx, _mm256_and_ps(v, absm));
            nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
            i += 8;
        }
        if _mm256_movemask_ps(nan) != 0 {
            return None;
        }
        let m = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps::<1>(mx));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ss(m, _mm_movehdup_ps(m));
        let amax = _mm_cvtss_f32(m);
        if amax == 0.0 || !amax.is_finite() {
            return None;
        }
        let d = amax / 127.0;
        let id = _mm256_set1_ps(1.0 / d);
        let half = _mm256_set1_ps(0.5);
        let one = _mm256_set1_ps(1.0);
        let sign = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN));
        let (lo, hi) = (_mm256_set1_ps(-127.0), _mm256_set1_ps(127.0));
        // (A macro, not a closure: a closure is not compiled with the function's target
        // features and was left as an out-of-line call per 8 values.)
        macro_rules! round {
            ($v:expr) => {{
                let v: __m256 = $v;
                // Half away from zero, like f32::round: truncate, then step away from zero
                // when the dropped fraction is at least one half (v - t is exact here).
                let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
                let frac = _mm256_and_ps(_mm256_sub_ps(v, t), absm);
                let step = _mm256_and_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(frac, half), one);
                let r = _mm256_add_ps(t, _mm256_or_ps(step, _mm256_and_ps(v, sign)));
                _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi))
            }};
        }
        let mut i = 0;
        while i < n {
            // SAFETY: i + 32 <= n = qs.len(); 32 bytes written at qs + i.
            unsafe {
                let ld = |o: usize| _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(i + o)), id);
                let q = [round!(ld(0)), round!(ld(8)), round!(ld(16)), round!(ld(24))];
                if SUMS {
                    // Lanes of q[0] + q[1] hold values i .. i + 16 (two per lane), those of
                    // q[2] + q[3] values i + 16 .. i + 32; two horizontal adds and one across
                    // the halves leave the two group sums in lanes 0 and 1.
                    let h = _mm256_hadd_epi32(
                        _mm256_add_epi32(q[0], q[1]),
                        _mm256_add_epi32(q[2], q[3]),
                    );
                    let h = _mm256_hadd_epi32(h, h);
                    let t =
                        _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
                    sums[i / 16] = _mm_cvtsi128_si32(t);
                    sums[i / 16 + 1] = _mm_extract_epi32::<1>(t);
                }
                let a = _mm256_packs_epi32(q[0], q[1]);
                let b = _mm256_packs_epi32(q[2], q[3]);
                let p = _mm256_packs_epi16(a, b);
                let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
                _mm256_storeu_si256(qs.as_mut_ptr().add(i) as *mut __m256i, p);
            }
            i += 32;
        }
        Some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SIMD block quantizer writes the scalar one's bytes and scale: ties, values that
    /// round to ±127, zeros, NaN and infinities (those fall back to the scalar path).
    #[test]
    fn simd_blocks_match_scalar() {
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for case in 0..400 {
            let n = if case % 2 == 0 { 32 } else { 256 };
            let mut x: Vec<f32> = (0..n)
                .map(|_| ((next() % 20001) as f32 / 10000.0 - 1.0) * 3.0)
                .collect();
            match case % 10 {
                // Exact ties: amax 127 so id = 1 and halves stay halves.
                1 | 2 => {
                    x.iter_mut().for_each(|v| *v = (*v * 40.0).round() * 0.5);
                    x[3] = 127.0;
                }
                3 => x.fill(0.0),
                4 => x[5] = f32::NAN,
                5 => x[n - 1] = f32::INFINITY,
                6 => x[0] = -1e30,
                _ => {}
            }
            let (mut a, mut b) = (vec![0i8; n], vec![0i8; n]);
            let da = quantize_block(&x, &mut a);
            let db = quantize_block_scalar(&x, &mut b);
            assert_eq!(da.to_bits(), db.to_bits(), "case {case}");
            assert_eq!(a, b, "case {case}");
        }
    }

    /// `quantize_q8` / `quantize_q8k` (the AVX2 row quantizers, where the CPU has AVX2) give
    /// the scalar blocks bit for bit: quants, scale, `s` and the group sums, on random rows with
    /// all-zero, NaN and infinite blocks among them.
    #[test]
    fn row_quantizers_match_scalar_blocks() {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for case in 0..60 {
            let blocks = 1 + case % 5;
            let mut x: Vec<f32> = (0..256 * blocks)
                .map(|_| ((next() % 20001) as f32 / 10000.0 - 1.0) * 2.5)
                .collect();
            match case % 6 {
                1 => x[..32].fill(0.0),
                2 => x[40] = f32::NAN,
                3 => x[256 * blocks - 1] = f32::NEG_INFINITY,
                4 => x.iter_mut().for_each(|v| *v = (*v * 40.0).round() * 0.5),
                _ => {}
            }
            let mut q = vec![BlockQ8::default(); 8 * blocks];
            quantize_q8(&x, &mut q);
            for (b, xs) in q.iter().zip(x.chunks_exact(32)) {
                let mut qs = [0i8; 32];
                let d = quantize_block_scalar(xs, &mut qs);
                let sum: i32 = qs.iter().map(|&v| i32::from(v)).sum();
                assert_eq!(b.qs, qs, "case {case}");
                assert_eq!(b.d.to_bits(), d.to_bits(), "case {case}");
                assert_eq!(b.s.to_bits(), (d * sum as f32).to_bits(), "case {case}");
            }
            let mut k = vec![BlockQ8K::default(); blocks];
            quantize_q8k(&x, &mut k);
            for (b, xs) in k.iter().zip(x.chunks_exact(256)) {
                let mut qs = [0i8; 256];
                let d = quantize_block_scalar(xs, &mut qs);
                assert_eq!(b.qs, qs, "case {case}");
                assert_eq!(b.d.to_bits(), d.to_bits(), "case {case}");
                for g in 0..16 {
                    let want: i16 = qs[16 * g..16 * g + 16].iter().map(|&v| i16::from(v)).sum();
                    assert_eq!(b.bsums[g], want, "case {case} group {g}");
                }
            }
        }
    }

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
