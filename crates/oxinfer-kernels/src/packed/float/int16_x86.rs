//! The AVX-512 VNNI tile of the int16 GEMM ([`super::int16`]): 12 tokens × 16 rows of int32
//! accumulators, one `vpdpwssd` per (token, feature pair) with the token's pair broadcast from
//! memory, then the sums scaled to f32 and written into the output with masked stores.

use std::arch::x86_64::*;

use super::int16::{Dest16, QMAX};
use super::x86::{by_tokens, live_mask, row_prior, slice_base};
use super::NR;

/// Tile of `n` tokens (1 ..= 12) over `kp` feature pairs.
///
/// # Safety
/// The CPU has AVX-512 F and VNNI; `a` points at `n` rows of `2 · kp` int16 values `lda` apart,
/// `b` at `kp · 32`; `dest` is valid as [`Dest16`] says for `n` tokens, its rows writable by
/// this call alone.
#[target_feature(enable = "avx512f,avx512vnni")]
pub(super) unsafe fn tile(
    a: *const i16,
    lda: usize,
    b: *const i16,
    kp: usize,
    n: usize,
    dest: &Dest16,
) {
    // SAFETY: forwarded from this function's contract.
    unsafe { by_tokens!(tile_n, n, (a, lda, b, kp, dest); 1 2 3 4 5 6 7 8 9 10 11 12) }
}

#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn tile_n<const MR: usize>(
    a: *const i16,
    lda: usize,
    b: *const i16,
    kp: usize,
    dest: &Dest16,
) {
    // SAFETY: (for the whole body) j < kp, so b + 32j .. b + 32j + 32 and the pair at
    // a + i*lda + 2j for i < MR stay inside the caller's slices; the masked loads and stores
    // touch only the `live` floats of each destination row and of the bias, xs holds MR values
    // and ws 16 (the contract).
    unsafe {
        let mut acc = [_mm512_setzero_si512(); MR];
        for j in 0..kp {
            let w = _mm512_loadu_si512(b.add(j * 2 * NR).cast());
            for (i, c) in acc.iter_mut().enumerate() {
                let pair = std::ptr::read_unaligned(a.add(i * lda + 2 * j).cast::<i32>());
                *c = _mm512_dpwssd_epi32(*c, _mm512_set1_epi32(pair), w);
            }
        }
        let mask = live_mask(dest.live);
        let ws = _mm512_loadu_ps(dest.ws);
        let base = slice_base(dest.first, dest.bias, mask);
        for (i, c) in acc.into_iter().enumerate() {
            let p = dest.ptr.add(i * dest.ldo);
            let add = row_prior(p, dest.first, base, mask);
            let scale = _mm512_mul_ps(_mm512_set1_ps(*dest.xs.add(i)), ws);
            let v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), scale, add);
            _mm512_mask_storeu_ps(p, mask, v);
        }
    }
}

/// The largest `|v[j]|` and `Σ v[j]²` (in f32, 16 lanes), the statistics of one row's scale.
///
/// # Safety
/// The CPU has AVX-512 F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn absmax_sumsq(v: &[f32]) -> (f32, f32) {
    let chunks = v.chunks_exact(16);
    let rest = chunks.remainder();
    // SAFETY: each chunk holds 16 floats; the rest (< 16) is read with a mask.
    unsafe {
        let (mut m, mut s) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        for c in chunks {
            let x = _mm512_loadu_ps(c.as_ptr());
            m = _mm512_max_ps(m, _mm512_abs_ps(x));
            s = _mm512_fmadd_ps(x, x, s);
        }
        let x = _mm512_maskz_loadu_ps((1u16 << rest.len()) - 1, rest.as_ptr());
        m = _mm512_max_ps(m, _mm512_abs_ps(x));
        s = _mm512_fmadd_ps(x, x, s);
        (_mm512_reduce_max_ps(m), _mm512_reduce_add_ps(s))
    }
}

/// `q[j] = round(v[j] · s)` (to nearest, ties to even), clamped to ±32767 as the scalar
/// twin (the int16 saturation alone would give −32768, which the tile's `vpmaddwd` must never
/// see); `q` as long as `v`.
///
/// # Safety
/// The CPU has AVX-512 F; `q.len() >= v.len()`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn quantize(v: &[f32], s: f32, q: &mut [i16]) {
    let (lo, hi) = (_mm512_set1_ps(-QMAX), _mm512_set1_ps(QMAX));
    let clamp = |x: __m512| _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    let scale = _mm512_set1_ps(s);
    let mut j = 0;
    // SAFETY: j + 16 <= v.len() <= q.len() in the loop; the tail is read and written with a
    // mask of the v.len() - j (< 16) values left.
    unsafe {
        while j + 16 <= v.len() {
            let x = clamp(_mm512_mul_ps(_mm512_loadu_ps(v.as_ptr().add(j)), scale));
            let r = _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(x));
            _mm256_storeu_si256(q.as_mut_ptr().add(j).cast(), r);
            j += 16;
        }
        let mask = (1u16 << (v.len() - j)) - 1;
        let x = clamp(_mm512_mul_ps(
            _mm512_maskz_loadu_ps(mask, v.as_ptr().add(j)),
            scale,
        ));
        _mm512_mask_cvtsepi32_storeu_epi16(
            q.as_mut_ptr().add(j).cast(),
            mask,
            _mm512_cvtps_epi32(x),
        );
    }
}
