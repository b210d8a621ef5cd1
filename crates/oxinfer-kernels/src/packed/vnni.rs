//! AVX-512 VNNI micro-kernels over the packed layouts, on 256-bit registers (AVX512-VL):
//! `vpdpbusd` multiplies the four unsigned quant bytes of each row's 32-bit lane with four
//! signed activation bytes and adds the four products into that lane's i32, replacing AVX2's
//! `maddubs` + `add` + `madd` chain (and its i16 headroom limits). The kernels are
//! [`super::tiles`]' skeleton, as in `avx2.rs`; this file holds its integer hooks, so all
//! three (with the scalar twin) agree bit for bit. Every function requires AVX2, FMA, F16C,
//! AVX512F, AVX512VL and AVX512-VNNI.
//!
//! Tiles are up to eight tokens wide (AVX-512VL gives 32 vector registers): each weight
//! register is unpacked once for eight tokens, whose eight i32 chains keep enough `vpdpbusd`
//! in flight; narrower tiles give each token two chains (even and odd quant registers).

use super::x86::{bcast4, nibble_pair};
use std::arch::x86_64::*;

super::tiles::packed_tiles!($ features = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni", wide = [8]);

/// `acc + Σ u8(w) · i8(x)` over each 32-bit lane's four bytes.
#[inline(always)]
fn dp(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
    // SAFETY: plain register arithmetic; the enclosing kernel has avx512vnni + avx512vl.
    unsafe { _mm256_dpbusd_epi32(acc, w, x) }
}

/// [`dp`] for a tile of `N` tokens: with four or three tokens, the per-token chains keep
/// enough `vpdpbusd` in flight; with fewer, each product starts from zero and is added
/// (a one-cycle add instead of waiting on the previous `vpdpbusd`).
#[inline(always)]
fn dpn<const N: usize>(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
    if N >= 3 {
        dp(acc, w, x)
    } else {
        // SAFETY: plain register arithmetic; the enclosing kernel has AVX2.
        unsafe { _mm256_add_epi32(acc, dp(_mm256_setzero_si256(), w, x)) }
    }
}

/// Token `k`'s chains after one pair of quant registers `(w0, w1)` against activation
/// registers `(x0, x1)`: one chain at eight tokens, even/odd chains below.
#[inline(always)]
fn dp_pair<const N: usize>(
    ea: &mut __m256i,
    oa: &mut __m256i,
    (w0, x0): (__m256i, __m256i),
    (w1, x1): (__m256i, __m256i),
) {
    if N >= 8 {
        *ea = dp(dp(*ea, w0, x0), w1, x1);
    } else {
        *ea = dpn::<N>(*ea, w0, x0);
        *oa = dpn::<N>(*oa, w1, x1);
    }
}

/// Σ over the eight signed quant registers at `qs` × the 32 activation bytes at `xq[k]`.
#[inline(always)]
unsafe fn q8_0_sums<const N: usize>(qs: *const u8, xq: [*const i8; N]) -> [__m256i; N] {
    let mut ea = [_mm256_setzero_si256(); N];
    let mut oa = [_mm256_setzero_si256(); N];
    // SAFETY: the caller guarantees 256 quant bytes at `qs` and 32 activations at each xq[k];
    // the enclosing kernel has AVX2 and VNNI.
    unsafe {
        // Signed weights: |w| as the unsigned operand, the sign moved onto x.
        for j in (0..8).step_by(2) {
            let w0 = _mm256_loadu_si256(qs.add(32 * j) as *const __m256i);
            let w1 = _mm256_loadu_si256(qs.add(32 * j + 32) as *const __m256i);
            let (a0, a1) = (_mm256_abs_epi8(w0), _mm256_abs_epi8(w1));
            for k in 0..N {
                let x = xq[k].add(4 * j);
                let (x0, x1) = (bcast4(x), bcast4(x.add(4)));
                let (x0, x1) = (_mm256_sign_epi8(x0, w0), _mm256_sign_epi8(x1, w1));
                dp_pair::<N>(&mut ea[k], &mut oa[k], (a0, x0), (a1, x1));
            }
        }
        for k in 0..N {
            ea[k] = _mm256_add_epi32(ea[k], oa[k]);
        }
    }
    ea
}

/// Per lane, Σ over the four signed quant registers `w` (`W_j`: quants `4j .. 4j + 4` of each
/// lane) × the 16 activation bytes at `xq[k]` (`|w|` as the unsigned operand, the sign moved
/// onto x).
#[inline(always)]
unsafe fn signed_sums4<const N: usize>(w: [__m256i; 4], xq: [*const i8; N]) -> [__m256i; N] {
    let mut ea = [_mm256_setzero_si256(); N];
    let mut oa = [_mm256_setzero_si256(); N];
    // SAFETY: the caller guarantees 16 activations at each xq[k]; the enclosing kernel has
    // AVX2 and VNNI.
    unsafe {
        let a = [
            _mm256_abs_epi8(w[0]),
            _mm256_abs_epi8(w[1]),
            _mm256_abs_epi8(w[2]),
            _mm256_abs_epi8(w[3]),
        ];
        for j in (0..4).step_by(2) {
            for k in 0..N {
                let x = xq[k].add(4 * j);
                let x0 = _mm256_sign_epi8(bcast4(x), w[j]);
                let x1 = _mm256_sign_epi8(bcast4(x.add(4)), w[j + 1]);
                dp_pair::<N>(&mut ea[k], &mut oa[k], (a[j], x0), (a[j + 1], x1));
            }
        }
        for k in 0..N {
            ea[k] = _mm256_add_epi32(ea[k], oa[k]);
        }
    }
    ea
}

/// Adds the four nibble chunks at `qs` (fifth bits from `hb` with `FIVE`) × the 32 activation
/// bytes at `xq[k]` to `s32[k]`, times the lanes' scales `sc` with `SCALED`.
#[inline(always)]
unsafe fn nibble_sums<const N: usize, const FIVE: bool, const SCALED: bool>(
    qs: *const u8,
    hb: __m256i,
    xq: [*const i8; N],
    sc: __m256i,
    s32: &mut [__m256i; N],
) {
    let mut ea = [_mm256_setzero_si256(); N];
    let mut oa = [_mm256_setzero_si256(); N];
    // SAFETY: the caller guarantees 128 quant bytes at `qs` and 32 activations at each xq[k];
    // the enclosing kernel has AVX2 and VNNI.
    unsafe {
        for c in 0..4 {
            let (lo, hi) = nibble_pair::<FIVE>(qs, hb, c);
            for k in 0..N {
                let x = xq[k].add(8 * c);
                dp_pair::<N>(
                    &mut ea[k],
                    &mut oa[k],
                    (lo, bcast4(x)),
                    (hi, bcast4(x.add(4))),
                );
            }
        }
        for k in 0..N {
            let part = _mm256_add_epi32(ea[k], oa[k]);
            let part = if SCALED {
                _mm256_mullo_epi32(part, sc)
            } else {
                part
            };
            s32[k] = _mm256_add_epi32(s32[k], part);
        }
    }
}

/// The Q6_K group scales of a sub-block as i32 lanes: `sc[2s]` and `sc[2s + 1]` of lane r.
#[inline(always)]
fn q6k_scales(scq: __m256i) -> (__m256i, __m256i) {
    // SAFETY: plain register arithmetic; the enclosing kernel has AVX2.
    unsafe {
        (
            _mm256_srai_epi32::<16>(_mm256_slli_epi32::<16>(scq)),
            _mm256_srai_epi32::<16>(scq),
        )
    }
}

/// Adds `scv` × Σ of the four 6-bit quant registers `w` × the 16 activation bytes at `xq[k]`
/// to `s32[k]`.
#[inline(always)]
unsafe fn q6k_sums<const N: usize>(
    w: [__m256i; 4],
    xq: [*const i8; N],
    scv: __m256i,
    s32: &mut [__m256i; N],
) {
    // SAFETY: the caller guarantees 16 activations at each xq[k]; the enclosing kernel has
    // AVX2 and VNNI.
    unsafe {
        for k in 0..N {
            let x = xq[k];
            let a = dp(
                dp(_mm256_setzero_si256(), w[0], bcast4(x)),
                w[1],
                bcast4(x.add(4)),
            );
            let b = dp(
                dp(_mm256_setzero_si256(), w[2], bcast4(x.add(8))),
                w[3],
                bcast4(x.add(12)),
            );
            let part = _mm256_add_epi32(a, b);
            s32[k] = _mm256_add_epi32(s32[k], _mm256_mullo_epi32(part, scv));
        }
    }
}
