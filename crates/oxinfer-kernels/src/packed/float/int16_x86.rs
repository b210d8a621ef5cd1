//! The AVX-512 VNNI tile of the int16 GEMM ([`super::int16`]): 12 tokens × 16 rows of int32
//! accumulators, one `vpdpwssd` per (token, feature pair) with the token's pair broadcast from
//! memory, then the sums scaled to f32 and written into the output with masked stores.

use std::arch::x86_64::*;

use super::int16::Dest16;
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
    unsafe {
        match n {
            1 => tile_n::<1>(a, lda, b, kp, dest),
            2 => tile_n::<2>(a, lda, b, kp, dest),
            3 => tile_n::<3>(a, lda, b, kp, dest),
            4 => tile_n::<4>(a, lda, b, kp, dest),
            5 => tile_n::<5>(a, lda, b, kp, dest),
            6 => tile_n::<6>(a, lda, b, kp, dest),
            7 => tile_n::<7>(a, lda, b, kp, dest),
            8 => tile_n::<8>(a, lda, b, kp, dest),
            9 => tile_n::<9>(a, lda, b, kp, dest),
            10 => tile_n::<10>(a, lda, b, kp, dest),
            11 => tile_n::<11>(a, lda, b, kp, dest),
            12 => tile_n::<12>(a, lda, b, kp, dest),
            n => unreachable!("a tile of {n} tokens"),
        }
    }
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
        let mask: __mmask16 = if dest.live >= NR {
            0xffff
        } else {
            (1u16 << dest.live) - 1
        };
        let ws = _mm512_loadu_ps(dest.ws);
        let base = if !dest.first || dest.bias.is_null() {
            _mm512_setzero_ps()
        } else {
            _mm512_maskz_loadu_ps(mask, dest.bias)
        };
        for (i, c) in acc.into_iter().enumerate() {
            let p = dest.ptr.add(i * dest.ldo);
            let add = if dest.first {
                base
            } else {
                _mm512_maskz_loadu_ps(mask, p)
            };
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

/// `q[j] = round(v[j] · s)` (to nearest, ties to even), saturated to int16; `q` as long as `v`.
///
/// # Safety
/// The CPU has AVX-512 F; `q.len() >= v.len()`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn quantize(v: &[f32], s: f32, q: &mut [i16]) {
    let scale = _mm512_set1_ps(s);
    let mut j = 0;
    // SAFETY: j + 16 <= v.len() <= q.len() in the loop; the tail is read and written with a
    // mask of the v.len() - j (< 16) values left.
    unsafe {
        while j + 16 <= v.len() {
            let x = _mm512_mul_ps(_mm512_loadu_ps(v.as_ptr().add(j)), scale);
            let r = _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(x));
            _mm256_storeu_si256(q.as_mut_ptr().add(j).cast(), r);
            j += 16;
        }
        let mask = (1u16 << (v.len() - j)) - 1;
        let x = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, v.as_ptr().add(j)), scale);
        _mm512_mask_cvtsepi32_storeu_epi16(
            q.as_mut_ptr().add(j).cast(),
            mask,
            _mm512_cvtps_epi32(x),
        );
    }
}
