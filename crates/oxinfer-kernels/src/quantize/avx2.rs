//! AVX2 twins of the scalar quantizers in `super`: the same arithmetic, operation for operation
//! (one f32 multiply per weight, Q4's `+ 8.5` then floor, Q8's round half away from zero built
//! from truncation plus an exact remainder test, BF16's round-to-nearest-even), so every byte
//! they write equals the scalar reference's. Blocks the vector path would treat differently
//! (a Q8 block whose inverse scale overflows to infinity) go to the scalar code. Every function
//! requires AVX2 + F16C; the caller checks with run-time detection.
#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

/// Largest `|v|` of 32 values, and the 32-bit mask of the lanes equal to it.
#[inline]
#[target_feature(enable = "avx2")]
fn amax_32(v: &[__m256; 4]) -> (f32, u32) {
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let a = v.map(|x| _mm256_and_ps(x, abs));
    let m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
    let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_movehdup_ps(m));
    let amax = _mm_cvtss_f32(m);
    let all = _mm256_set1_ps(amax);
    let mut mask = 0u32;
    for (k, x) in a.iter().enumerate() {
        let eq = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(*x, all)) as u32;
        mask |= eq << (8 * k);
    }
    (amax, mask)
}

/// The 32 f32 of one block.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load_32(p: *const f32) -> [__m256; 4] {
    // SAFETY: the caller guarantees 32 readable f32 at `p`.
    unsafe {
        [
            _mm256_loadu_ps(p),
            _mm256_loadu_ps(p.add(8)),
            _mm256_loadu_ps(p.add(16)),
            _mm256_loadu_ps(p.add(24)),
        ]
    }
}

/// Whether any of `x` is NaN or infinite.
#[target_feature(enable = "avx2")]
pub unsafe fn any_non_finite(x: &[f32]) -> bool {
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let inf = _mm256_set1_ps(f32::INFINITY);
    let mut bad = _mm256_setzero_ps();
    let main = x.len() / 8 * 8;
    for i in (0..main).step_by(8) {
        // SAFETY: i + 8 <= main <= x.len().
        let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(i)) };
        // not (|v| < inf): true for infinities and NaN
        bad = _mm256_or_ps(
            bad,
            _mm256_cmp_ps::<_CMP_NLT_UQ>(_mm256_and_ps(v, abs), inf),
        );
    }
    _mm256_movemask_ps(bad) != 0 || x[main..].iter().any(|v| !v.is_finite())
}

/// Q8 (see `super::scalar::q8_row`): `x` is whole blocks of 32, finite.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn q8_row(x: &[f32], qs: &mut [u8], scales: &mut [u8]) {
    let half = _mm256_set1_ps(0.5);
    let one = _mm256_set1_ps(1.0);
    let sign = _mm256_set1_ps(-0.0);
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let (lo, hi) = (_mm256_set1_ps(-127.0), _mm256_set1_ps(127.0));
    for ((xs, q), s) in x
        .chunks_exact(32)
        .zip(qs.chunks_exact_mut(32))
        .zip(scales.chunks_exact_mut(4))
    {
        // SAFETY: `xs` is 32 f32.
        let v = unsafe { load_32(xs.as_ptr()) };
        let (amax, _) = amax_32(&v);
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        s.copy_from_slice(&d.to_le_bytes());
        if !id.is_finite() {
            // v * inf gives NaN / inf lanes: leave those to the scalar code's casts
            super::scalar::q8_row(xs, q, s);
            continue;
        }
        let idv = _mm256_set1_ps(id);
        let ints = v.map(|x| {
            let p = _mm256_mul_ps(x, idv);
            // round half away from zero: truncate, then step away from zero when the exact
            // remainder p - trunc(p) is at least one half
            let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(p);
            let rem = _mm256_and_ps(_mm256_sub_ps(p, t), abs);
            let step = _mm256_or_ps(_mm256_and_ps(p, sign), one);
            let up = _mm256_cmp_ps::<_CMP_GE_OQ>(rem, half);
            let r = _mm256_add_ps(t, _mm256_and_ps(up, step));
            _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi))
        });
        let w16 = |a: __m256i| {
            _mm_packs_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256::<1>(a))
        };
        let b0 = _mm_packs_epi16(w16(ints[0]), w16(ints[1]));
        let b1 = _mm_packs_epi16(w16(ints[2]), w16(ints[3]));
        // SAFETY: `q` is 32 bytes.
        unsafe {
            _mm_storeu_si128(q.as_mut_ptr() as *mut __m128i, b0);
            _mm_storeu_si128(q.as_mut_ptr().add(16) as *mut __m128i, b1);
        }
    }
}

/// Q4 (see `super::scalar::q4_row`): `x` is whole blocks of 32, finite. Returns the index within `x`
/// of the first block maximum whose scale overflows f16, with that maximum.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn q4_row(x: &[f32], qs: &mut [u8], scales: &mut [u8]) -> Result<(), (usize, f32)> {
    let (zero, fifteen, bias) = (
        _mm256_setzero_ps(),
        _mm256_set1_ps(15.0),
        _mm256_set1_ps(8.5),
    );
    for (bi, ((xs, q), s)) in x
        .chunks_exact(32)
        .zip(qs.chunks_exact_mut(16))
        .zip(scales.chunks_exact_mut(2))
        .enumerate()
    {
        // SAFETY: `xs` is 32 f32.
        let v = unsafe { load_32(xs.as_ptr()) };
        let (amax, mask) = amax_32(&v);
        // the first value of largest magnitude (0.0 for an all-zero block, as the scalar fold)
        let (im, m) = if amax > 0.0 {
            let i = mask.trailing_zeros() as usize;
            (i, xs[i])
        } else {
            (0, 0.0)
        };
        let dh = half::f16::from_f32(m / -8.0);
        let d = dh.to_f32();
        if !d.is_finite() {
            return Err((bi * 32 + im, m));
        }
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let idv = _mm256_set1_ps(id);
        let ints = v.map(|x| {
            let y = _mm256_floor_ps(_mm256_add_ps(_mm256_mul_ps(x, idv), bias));
            _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(y, zero), fifteen))
        });
        // byte j = quant j | quant (j + 16) << 4
        let c0 = _mm256_or_si256(ints[0], _mm256_slli_epi32::<4>(ints[2]));
        let c1 = _mm256_or_si256(ints[1], _mm256_slli_epi32::<4>(ints[3]));
        let w16 = |a: __m256i| {
            _mm_packus_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256::<1>(a))
        };
        let b = _mm_packus_epi16(w16(c0), w16(c1));
        // SAFETY: `q` is 16 bytes.
        unsafe { _mm_storeu_si128(q.as_mut_ptr() as *mut __m128i, b) };
        s.copy_from_slice(&dh.to_le_bytes());
    }
    Ok(())
}

/// BF16, round to nearest even (finite `x`; as `half::bf16::from_f32`): little-endian bytes.
#[target_feature(enable = "avx2")]
pub unsafe fn bf16_row(x: &[f32], out: &mut [u8]) {
    let main = x.len() / 8 * 8;
    let (one, bias) = (_mm256_set1_epi32(1), _mm256_set1_epi32(0x7fff));
    for i in (0..main).step_by(8) {
        // SAFETY: i + 8 <= main <= x.len(); `out` holds 2 bytes per value.
        unsafe {
            let b = _mm256_castps_si256(_mm256_loadu_ps(x.as_ptr().add(i)));
            let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(b), one);
            let r = _mm256_srli_epi32::<16>(_mm256_add_epi32(b, _mm256_add_epi32(bias, lsb)));
            let h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256::<1>(r));
            _mm_storeu_si128(out.as_mut_ptr().add(2 * i) as *mut __m128i, h);
        }
    }
    for (b, &v) in out[2 * main..].chunks_exact_mut(2).zip(&x[main..]) {
        b.copy_from_slice(&half::bf16::from_f32(v).to_le_bytes());
    }
}
