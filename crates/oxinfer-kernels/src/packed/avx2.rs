//! AVX2 micro-kernels over the packed layouts: one 256-bit register holds four quants of each
//! of eight rows, one broadcast of four activation bytes serves all eight rows, and up to four
//! tokens share every unpacked weight register. Every function requires AVX2, FMA and F16C.
//! The kernels are [`super::tiles`]' skeleton; this file holds its integer hooks.
//!
//! Integer headroom: `maddubs` of a 4-bit quant (0..15) and an int8 activation (|x| ≤ 127)
//! gives pair sums ≤ 3810, so eight of them add up in i16 (≤ 30480) before one `madd` widens
//! them; 5-bit quants (≤ 31) give ≤ 7874, so four of them; 6-bit quants (≤ 63) give ≤ 16002,
//! so two of them; int8 weights need the sign trick and widen after every `maddubs`.

use super::x86::{bcast4, nibble_pair};
use std::arch::x86_64::*;

super::tiles::packed_tiles!($ features = "avx2,fma,f16c", wide = []);

/// Σ over the eight signed quant registers at `qs` × the 32 activation bytes at `xq[k]`.
#[inline(always)]
unsafe fn q8_0_sums<const N: usize>(qs: *const u8, xq: [*const i8; N]) -> [__m256i; N] {
    // SAFETY: the caller guarantees 256 quant bytes at `qs` and 32 activations at each xq[k]
    // (the second half's 16 start 16 bytes in); the enclosing kernel has AVX2.
    unsafe {
        let w = |j: usize| _mm256_loadu_si256(qs.add(32 * j) as *const __m256i);
        // Quants 0..16 of each lane, then 16..32: integer sums, so their order is free.
        let lo = signed_sums4([w(0), w(1), w(2), w(3)], xq);
        let hi = signed_sums4([w(4), w(5), w(6), w(7)], xq.map(|p| p.add(16)));
        std::array::from_fn(|k| _mm256_add_epi32(lo[k], hi[k]))
    }
}

/// Per lane, Σ over the four signed quant registers `w` (`W_j`: quants `4j .. 4j + 4` of each
/// lane) × the 16 activation bytes at `xq[k]`, widened to i32 after every `maddubs` (the
/// sign trick keeps `|w| · |x|` pair sums ≤ 32258).
#[inline(always)]
unsafe fn signed_sums4<const N: usize>(w: [__m256i; 4], xq: [*const i8; N]) -> [__m256i; N] {
    let mut s32 = [_mm256_setzero_si256(); N];
    // SAFETY: the caller guarantees 16 activations at each xq[k]; the enclosing kernel has
    // AVX2.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        for (j, &wj) in w.iter().enumerate() {
            let wa = _mm256_sign_epi8(wj, wj);
            for k in 0..N {
                let xb = bcast4(xq[k].add(4 * j));
                let p16 = _mm256_maddubs_epi16(wa, _mm256_sign_epi8(xb, wj));
                s32[k] = _mm256_add_epi32(s32[k], _mm256_madd_epi16(p16, ones));
            }
        }
    }
    s32
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
    // SAFETY: the caller guarantees 128 quant bytes at `qs` and 32 activations at each xq[k];
    // the enclosing kernel has AVX2.
    unsafe {
        // The scale of each lane as an i16 pair, so `madd` scales while it widens.
        let w16 = if SCALED {
            _mm256_or_si256(sc, _mm256_slli_epi32::<16>(sc))
        } else {
            _mm256_set1_epi16(1)
        };
        let mut s16 = [_mm256_setzero_si256(); N];
        for c in 0..4 {
            let (lo, hi) = nibble_pair::<FIVE>(qs, hb, c);
            for k in 0..N {
                let x = xq[k].add(8 * c);
                let a = _mm256_maddubs_epi16(lo, bcast4(x));
                let b = _mm256_maddubs_epi16(hi, bcast4(x.add(4)));
                s16[k] = _mm256_add_epi16(s16[k], _mm256_add_epi16(a, b));
            }
            if FIVE && c == 1 {
                // 5-bit pair sums ≤ 7874: widen after four maddubs.
                for k in 0..N {
                    s32[k] = _mm256_add_epi32(s32[k], _mm256_madd_epi16(s16[k], w16));
                    s16[k] = _mm256_setzero_si256();
                }
            }
        }
        for k in 0..N {
            s32[k] = _mm256_add_epi32(s32[k], _mm256_madd_epi16(s16[k], w16));
        }
    }
}

/// The Q6_K group scales of a sub-block as the i16 pairs `madd` takes: lanes r hold
/// `(sc[2s], sc[2s])` and `(sc[2s + 1], sc[2s + 1])`.
#[inline(always)]
fn q6k_scales(scq: __m256i) -> (__m256i, __m256i) {
    // SAFETY: plain register arithmetic; the enclosing kernel has AVX2.
    unsafe {
        (
            _mm256_shufflehi_epi16::<0b10_10_00_00>(_mm256_shufflelo_epi16::<0b10_10_00_00>(scq)),
            _mm256_shufflehi_epi16::<0b11_11_01_01>(_mm256_shufflelo_epi16::<0b11_11_01_01>(scq)),
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
    // AVX2.
    unsafe {
        for k in 0..N {
            let x = xq[k];
            let a = _mm256_add_epi16(
                _mm256_maddubs_epi16(w[0], bcast4(x)),
                _mm256_maddubs_epi16(w[1], bcast4(x.add(4))),
            );
            let b = _mm256_add_epi16(
                _mm256_maddubs_epi16(w[2], bcast4(x.add(8))),
                _mm256_maddubs_epi16(w[3], bcast4(x.add(12))),
            );
            let ab = _mm256_add_epi32(_mm256_madd_epi16(a, scv), _mm256_madd_epi16(b, scv));
            s32[k] = _mm256_add_epi32(s32[k], ab);
        }
    }
}
