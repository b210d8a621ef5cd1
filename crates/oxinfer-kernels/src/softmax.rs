//! The softmax of one row of attention scores, scaled first: `row[j] = exp(s·row[j] − m) / Σ`
//! with `m = max_j s·row[j]` and `Σ = Σ_j exp(s·row[j] − m)`. The SIMD paths (a polynomial
//! `exp` of about 1 ulp on 8 lanes with AVX2+FMA, the same polynomial on 16 with AVX-512; 32 or
//! 64 partial sums in f32, added in f64 at the end) run where the kernel set is `auto`;
//! otherwise the reference (`f32::exp`, the sum in f64 term by term), which
//! `OXINFER_KERNELS=scalar` runs.

use crate::dispatch::{detected_isa, kernel_set, Isa, KernelSet};

/// [`softmax_scaled_isa`] on this process's kernel set: the AVX2 path under `auto` where the
/// CPU has it, the reference otherwise.
pub fn softmax_scaled(row: &mut [f32], scale: f32) {
    let isa = if kernel_set() == KernelSet::Auto {
        detected_isa()
    } else {
        Isa::Scalar
    };
    softmax_scaled_isa(row, scale, isa);
}

/// The scaled softmax of `row` in place on `isa` (AVX2 where [`Isa::has_avx2`], the reference
/// otherwise). An empty row is left empty; a row of `−∞` after scaling gives NaN, as the
/// reference does.
pub fn softmax_scaled_isa(row: &mut [f32], scale: f32, isa: Isa) {
    #[cfg(target_arch = "x86_64")]
    if isa.has_vnni() {
        // SAFETY: an Avx512Vnni level is only handed out when the CPU has AVX-512 F (and AVX2,
        // FMA).
        unsafe { avx512::softmax_scaled(row, scale) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: has_avx2 holds only when the CPU reports avx2, fma and f16c.
        unsafe { avx2::softmax_scaled(row, scale) };
        return;
    }
    let _ = isa;
    reference(row, scale);
}

/// The reference: scale, max, `exp(v − max)` summed in f64, times `1 / Σ`.
fn reference(row: &mut [f32], scale: f32) {
    row.iter_mut().for_each(|s| *s *= scale);
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
    let mut sum = 0f64;
    for s in row.iter_mut() {
        *s = (*s - max).exp();
        sum += f64::from(*s);
    }
    let inv = (1.0 / sum) as f32;
    row.iter_mut().for_each(|s| *s *= inv);
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use crate::act::avx2::exp8;
    use std::arch::x86_64::*;

    /// Horizontal maximum of eight lanes.
    #[inline(always)]
    fn hmax(v: __m256) -> f32 {
        // SAFETY: plain register arithmetic; the enclosing function has avx2.
        unsafe {
            let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            let m = _mm_max_ss(m, _mm_shuffle_ps::<0b01>(m, m));
            _mm_cvtss_f32(m)
        }
    }

    /// [`super::softmax_scaled_isa`]'s AVX2 path: scale and maximum in one pass, `exp` and
    /// the sums in a second, the normalization in a third; the tail (`len % 8`) one value at a
    /// time with the same polynomial.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn softmax_scaled(row: &mut [f32], scale: f32) {
        let n = row.len();
        if n == 0 {
            return;
        }
        let body = n - n % 8;
        let p = row.as_mut_ptr();
        let vs = _mm256_set1_ps(scale);
        let mut vmax = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut i = 0;
        while i < body {
            // SAFETY: i + 8 <= body <= n.
            let v = unsafe { _mm256_mul_ps(_mm256_loadu_ps(p.add(i)), vs) };
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(p.add(i), v) };
            vmax = _mm256_max_ps(vmax, v);
            i += 8;
        }
        let mut max = hmax(vmax);
        for s in &mut row[body..] {
            *s *= scale;
            max = max.max(*s);
        }
        let vm = _mm256_set1_ps(max);
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i < body {
            // SAFETY: i + 8 <= body <= n.
            let e = exp8(_mm256_sub_ps(unsafe { _mm256_loadu_ps(p.add(i)) }, vm));
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(p.add(i), e) };
            let a = &mut acc[(i / 8) % 4];
            *a = _mm256_add_ps(*a, e);
            i += 8;
        }
        let mut sum = 0f64;
        for a in acc {
            let mut lanes = [0f32; 8];
            // SAFETY: lanes holds eight floats.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), a) };
            sum += lanes.iter().map(|&v| f64::from(v)).sum::<f64>();
        }
        let mut tail = [0f32; 8];
        let rest = n - body;
        tail[..rest].copy_from_slice(&row[body..]);
        // SAFETY: tail holds eight floats.
        let e = exp8(_mm256_sub_ps(unsafe { _mm256_loadu_ps(tail.as_ptr()) }, vm));
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(tail.as_mut_ptr(), e) };
        for (s, &e) in row[body..].iter_mut().zip(&tail[..rest]) {
            *s = e;
            sum += f64::from(e);
        }
        let vinv = _mm256_set1_ps((1.0 / sum) as f32);
        let mut i = 0;
        while i < body {
            // SAFETY: i + 8 <= body <= n.
            unsafe { _mm256_storeu_ps(p.add(i), _mm256_mul_ps(_mm256_loadu_ps(p.add(i)), vinv)) };
            i += 8;
        }
        let inv = (1.0 / sum) as f32;
        row[body..].iter_mut().for_each(|s| *s *= inv);
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    use crate::act::{EXP_POLY, EXP_RANGE, LN2_SPLIT};
    use std::arch::x86_64::*;

    /// `exp(x)` for sixteen lanes: 2^n · e^r with [`EXP_POLY`] on |r| ≤ ln2/2 (as
    /// [`crate::act`]'s eight-lane `exp8`), inputs clamped to [`EXP_RANGE`].
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(crate) fn exp16(x: __m512) -> __m512 {
        let x = _mm512_min_ps(
            _mm512_max_ps(x, _mm512_set1_ps(EXP_RANGE.0)),
            _mm512_set1_ps(EXP_RANGE.1),
        );
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
        );
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_SPLIT.0), x);
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_SPLIT.1), r);
        let mut p = _mm512_set1_ps(EXP_POLY[0]);
        for c in &EXP_POLY[1..] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(*c));
        }
        let r2 = _mm512_mul_ps(r, r);
        let e = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0));
        let pow2 = _mm512_slli_epi32::<23>(_mm512_add_epi32(
            _mm512_cvtps_epi32(n),
            _mm512_set1_epi32(127),
        ));
        _mm512_mul_ps(e, _mm512_castsi512_ps(pow2))
    }

    /// [`super::softmax_scaled_isa`]'s AVX-512 path: as the AVX2 one on sixteen lanes, the
    /// tail (`len % 16`) through masked loads and stores.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn softmax_scaled(row: &mut [f32], scale: f32) {
        let n = row.len();
        if n == 0 {
            return;
        }
        let p = row.as_mut_ptr();
        let body = n - n % 16;
        let tail = if n > body {
            (1u16 << (n - body)) - 1
        } else {
            0
        };
        let vs = _mm512_set1_ps(scale);
        let mut vmax = _mm512_set1_ps(f32::NEG_INFINITY);
        let mut i = 0;
        while i < body {
            // SAFETY: i + 16 <= body <= n.
            unsafe {
                let v = _mm512_mul_ps(_mm512_loadu_ps(p.add(i)), vs);
                _mm512_storeu_ps(p.add(i), v);
                vmax = _mm512_max_ps(vmax, v);
            }
            i += 16;
        }
        // SAFETY: the mask covers the n - body (< 16) values left.
        unsafe {
            let v = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, p.add(body)), vs);
            _mm512_mask_storeu_ps(p.add(body), tail, v);
            vmax = _mm512_mask_max_ps(vmax, tail, vmax, v);
        }
        let vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut i = 0;
        while i < body {
            // SAFETY: i + 16 <= body <= n.
            unsafe {
                let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(p.add(i)), vm));
                _mm512_storeu_ps(p.add(i), e);
                let a = &mut acc[(i / 16) % 4];
                *a = _mm512_add_ps(*a, e);
            }
            i += 16;
        }
        // SAFETY: as above; lanes outside the mask add 0.
        unsafe {
            let e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, p.add(body)), vm));
            _mm512_mask_storeu_ps(p.add(body), tail, e);
            acc[0] = _mm512_mask_add_ps(acc[0], tail, acc[0], e);
        }
        let mut sum = 0f64;
        for a in acc {
            let mut lanes = [0f32; 16];
            // SAFETY: lanes holds sixteen floats.
            unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), a) };
            sum += lanes.iter().map(|&v| f64::from(v)).sum::<f64>();
        }
        let vinv = _mm512_set1_ps((1.0 / sum) as f32);
        let mut i = 0;
        while i < body {
            // SAFETY: i + 16 <= body <= n.
            unsafe { _mm512_storeu_ps(p.add(i), _mm512_mul_ps(_mm512_loadu_ps(p.add(i)), vinv)) };
            i += 16;
        }
        // SAFETY: the mask covers the values left.
        unsafe {
            let v = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, p.add(body)), vinv);
            _mm512_mask_storeu_ps(p.add(body), tail, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX2 path within a few ulp of the reference, for lengths around the vector width
    /// and rows with large spreads (values that underflow to 0 after the shift).
    #[test]
    fn simd_matches_reference() {
        let isas: Vec<Isa> = crate::vecdot::available_isas()
            .into_iter()
            .filter(|i| i.has_avx2())
            .collect();
        if isas.is_empty() {
            eprintln!("skipped: no AVX2 on this CPU");
            return;
        }
        for isa in isas {
            let mut seed = 7u64;
            for n in [1usize, 3, 7, 8, 9, 15, 16, 17, 31, 64, 77, 1000, 4096] {
                for spread in [0.1f32, 4.0, 60.0] {
                    let row: Vec<f32> = (0..n)
                        .map(|_| {
                            seed ^= seed << 13;
                            seed ^= seed >> 7;
                            seed ^= seed << 17;
                            ((seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * spread
                        })
                        .collect();
                    let (mut a, mut b) = (row.clone(), row);
                    reference(&mut a, 0.3);
                    softmax_scaled_isa(&mut b, 0.3, isa);
                    let total: f32 = b.iter().sum();
                    assert!((total - 1.0).abs() < 1e-5, "{isa:?} n {n}: sum {total}");
                    for (j, (x, y)) in a.iter().zip(&b).enumerate() {
                        assert!(
                            (x - y).abs() <= 4e-7 * x.abs().max(1e-30) + 1e-30,
                            "{isa:?} n {n} spread {spread} j {j}: {x} vs {y}"
                        );
                    }
                }
            }
        }
    }

    /// The reference on a known row: equal scores give equal weights.
    #[test]
    fn reference_uniform() {
        let mut row = vec![2.0f32; 5];
        softmax_scaled_isa(&mut row, 0.5, Isa::Scalar);
        assert!(row.iter().all(|&v| (v - 0.2).abs() < 1e-7));
    }
}
