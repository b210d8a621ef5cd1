//! AVX2 micro-kernels over the packed layouts: one 256-bit register holds four quants of each
//! of eight rows, one broadcast of four activation bytes serves all eight rows, and up to four
//! tokens share every unpacked weight register. Every function requires AVX2, FMA and F16C.
//!
//! Integer headroom: `maddubs` of a 4-bit quant (0..15) and an int8 activation (|x| ≤ 127)
//! gives pair sums ≤ 3810, so eight of them add up in i16 (≤ 30480) before one `madd` widens
//! them; 5-bit quants (≤ 31) give ≤ 7874, so four of them; 6-bit quants (≤ 63) give ≤ 16002, so two of them; int8 weights need the sign trick
//! and widen after every `maddubs`.

use super::pack::{q4k, q5k, q6k, qh_offset, qs_offset};
use super::x86::{
    bcast4, f16x8, format_of, high1, high2, prefetch_ahead, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
};
use super::{LANES, TILE_TOKENS};
use crate::fast::Acts;
use crate::format::WeightFormat;
use crate::q8::{BlockQ8, BlockQ8K};
use std::arch::x86_64::*;

/// See `super::run_tile`: dispatches on format and tile width.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `g` must be a whole packed group of `nb` blocks of
/// `format`, and `acts` must hold `nb` blocks per token for tokens `ti .. ti + n`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn tile(
    format: WeightFormat,
    g: &[u8],
    nb: usize,
    acts: &Acts,
    ti: usize,
    n: usize,
    tile: &mut [[f32; LANES]; TILE_TOKENS],
) {
    let gp = g.as_ptr();
    // SAFETY (every arm): forwarded contract; the pointers below start the activation rows of
    // tokens ti .. ti + n (bounds checked by the slicing).
    unsafe {
        match acts {
            Acts::Q8(q) => {
                let x = |k: usize| q[(ti + k) * nb..(ti + k + 1) * nb].as_ptr();
                macro_rules! go {
                    ($f:expr) => {
                        match n {
                            1 => tile32::<{ $f }, 1>(gp, nb, [x(0)], tile),
                            2 => tile32::<{ $f }, 2>(gp, nb, [x(0), x(1)], tile),
                            3 => tile32::<{ $f }, 3>(gp, nb, [x(0), x(1), x(2)], tile),
                            _ => tile32::<{ $f }, 4>(gp, nb, [x(0), x(1), x(2), x(3)], tile),
                        }
                    };
                }
                match format {
                    WeightFormat::Q4_0 => go!(Q4_0),
                    WeightFormat::Q4_1 => go!(Q4_1),
                    WeightFormat::Q5_0 => go!(Q5_0),
                    WeightFormat::Q5_1 => go!(Q5_1),
                    _ => go!(Q8_0),
                }
            }
            Acts::Q8K(q) => {
                let x = |k: usize| q[(ti + k) * nb..(ti + k + 1) * nb].as_ptr();
                macro_rules! go {
                    ($kern:ident) => {
                        match n {
                            1 => $kern::<1>(gp, nb, [x(0)], tile),
                            2 => $kern::<2>(gp, nb, [x(0), x(1)], tile),
                            3 => $kern::<3>(gp, nb, [x(0), x(1), x(2)], tile),
                            _ => $kern::<4>(gp, nb, [x(0), x(1), x(2), x(3)], tile),
                        }
                    };
                }
                match format {
                    WeightFormat::Q4K => go!(tile_q4k_),
                    WeightFormat::Q5K => go!(tile_q5k_),
                    _ => go!(tile_q6k),
                }
            }
            Acts::F32(_) => unreachable!("float formats are not packed"),
        }
    }
}

/// Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0: `N` tokens × eight rows.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile32<const F: u8, const N: usize>(
    g: *const u8,
    nb: usize,
    xs: [*const BlockQ8; N],
    out: &mut [[f32; LANES]; TILE_TOKENS],
) {
    let pb = match F {
        Q4_0 => 144,
        Q4_1 => 160,
        Q5_0 => 176,
        Q5_1 => 192,
        _ => 272,
    };
    let qo = qs_offset(format_of(F));
    let five = F == Q5_0 || F == Q5_1;
    let m4 = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    for i in 0..nb {
        // SAFETY: block i of the group spans [i*pb, (i+1)*pb) (the group holds nb blocks);
        // token k's block i exists (nb blocks per token); offsets follow the layout.
        unsafe {
            let p = g.add(i * pb);
            prefetch_ahead(p, pb);
            let d = f16x8(p);
            let qs = p.add(qo);
            let mut s32 = [_mm256_setzero_si256(); N];
            if F == Q8_0 {
                for j in 0..8 {
                    let w = _mm256_loadu_si256(qs.add(32 * j) as *const __m256i);
                    let wa = _mm256_sign_epi8(w, w);
                    for k in 0..N {
                        let xb = bcast4((*xs[k].add(i)).qs.as_ptr().add(4 * j));
                        let p16 = _mm256_maddubs_epi16(wa, _mm256_sign_epi8(xb, w));
                        s32[k] = _mm256_add_epi32(s32[k], _mm256_madd_epi16(p16, ones));
                    }
                }
            } else {
                // 5-bit quants: pair sums ≤ 7874, so widen after every four maddubs.
                let hb = if five {
                    _mm256_loadu_si256(p.add(qh_offset(format_of(F))) as *const __m256i)
                } else {
                    _mm256_setzero_si256()
                };
                let mut s16 = [_mm256_setzero_si256(); N];
                for c in 0..4 {
                    let v = _mm256_loadu_si256(qs.add(32 * c) as *const __m256i);
                    let mut lo = _mm256_and_si256(v, m4);
                    let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                    if five {
                        lo = _mm256_or_si256(lo, high1(hb, 2 * c));
                        hi = _mm256_or_si256(hi, high1(hb, 2 * c + 1));
                    }
                    for k in 0..N {
                        let xq = (*xs[k].add(i)).qs.as_ptr().add(8 * c);
                        let a = _mm256_maddubs_epi16(lo, bcast4(xq));
                        let b = _mm256_maddubs_epi16(hi, bcast4(xq.add(4)));
                        s16[k] = _mm256_add_epi16(s16[k], _mm256_add_epi16(a, b));
                    }
                    if five && c == 1 {
                        for k in 0..N {
                            s32[k] = _mm256_madd_epi16(s16[k], ones);
                            s16[k] = _mm256_setzero_si256();
                        }
                    }
                }
                for k in 0..N {
                    s32[k] = _mm256_add_epi32(s32[k], _mm256_madd_epi16(s16[k], ones));
                }
            }
            let mw = match F {
                Q4_1 | Q5_1 => f16x8(p.add(16)),
                Q5_0 => _mm256_mul_ps(d, _mm256_set1_ps(16.0)),
                _ => _mm256_mul_ps(d, _mm256_set1_ps(8.0)),
            };
            for k in 0..N {
                let y = &*xs[k].add(i);
                let dd = _mm256_mul_ps(d, _mm256_set1_ps(y.d));
                acc[k] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s32[k]), acc[k]);
                match F {
                    Q4_1 | Q5_1 => acc[k] = _mm256_fmadd_ps(mw, _mm256_set1_ps(y.s), acc[k]),
                    Q4_0 | Q5_0 => acc[k] = _mm256_fnmadd_ps(mw, _mm256_set1_ps(y.s), acc[k]),
                    _ => {}
                }
            }
        }
    }
    for k in 0..N {
        // SAFETY: out[k] holds 8 f32.
        unsafe { _mm256_storeu_ps(out[k].as_mut_ptr(), acc[k]) };
    }
}

/// [`tile_q4k`] for Q4_K.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_q4k_<const N: usize>(
    g: *const u8,
    nb: usize,
    xs: [*const BlockQ8K; N],
    out: &mut [[f32; LANES]; TILE_TOKENS],
) {
    // SAFETY: forwarded contract.
    unsafe { tile_q4k::<N, false>(g, nb, xs, out) }
}

/// [`tile_q4k`] for Q5_K.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_q5k_<const N: usize>(
    g: *const u8,
    nb: usize,
    xs: [*const BlockQ8K; N],
    out: &mut [[f32; LANES]; TILE_TOKENS],
) {
    // SAFETY: forwarded contract.
    unsafe { tile_q4k::<N, true>(g, nb, xs, out) }
}

/// Q4_K (Q5_K with `FIVE`: the fifth bits of each sub-block at `q5k::qh(s)`): `N` tokens ×
/// eight rows.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_q4k<const N: usize, const FIVE: bool>(
    g: *const u8,
    nb: usize,
    xs: [*const BlockQ8K; N],
    out: &mut [[f32; LANES]; TILE_TOKENS],
) {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = [_mm256_setzero_ps(); N];
    for i in 0..nb {
        // SAFETY: block i of the group spans [i*1184, (i+1)*1184); token k's super-block i
        // exists; offsets follow the layout.
        unsafe {
            let pb = if FIVE { q5k::BYTES } else { q4k::BYTES };
            let p = g.add(i * pb);
            prefetch_ahead(p, pb);
            let mut s32 = [_mm256_setzero_si256(); N];
            for s in 0..8 {
                let sc =
                    _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(q4k::SC + 8 * s) as *const __m128i));
                let scp = _mm256_or_si256(sc, _mm256_slli_epi32::<16>(sc));
                let qs = p.add(if FIVE { q5k::qs(s) } else { q4k::QS + 128 * s });
                let hb = if FIVE {
                    _mm256_loadu_si256(p.add(q5k::qh(s)) as *const __m256i)
                } else {
                    _mm256_setzero_si256()
                };
                let mut s16 = [_mm256_setzero_si256(); N];
                for c in 0..4 {
                    let v = _mm256_loadu_si256(qs.add(32 * c) as *const __m256i);
                    let mut lo = _mm256_and_si256(v, m4);
                    let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                    if FIVE {
                        lo = _mm256_or_si256(lo, high1(hb, 2 * c));
                        hi = _mm256_or_si256(hi, high1(hb, 2 * c + 1));
                    }
                    for k in 0..N {
                        let xq = (*xs[k].add(i)).qs.as_ptr().add(32 * s + 8 * c);
                        let a = _mm256_maddubs_epi16(lo, bcast4(xq));
                        let b = _mm256_maddubs_epi16(hi, bcast4(xq.add(4)));
                        s16[k] = _mm256_add_epi16(s16[k], _mm256_add_epi16(a, b));
                    }
                    if FIVE && c == 1 {
                        // 5-bit pair sums ≤ 7874: widen after four maddubs.
                        for k in 0..N {
                            s32[k] = _mm256_add_epi32(s32[k], _mm256_madd_epi16(s16[k], scp));
                            s16[k] = _mm256_setzero_si256();
                        }
                    }
                }
                for k in 0..N {
                    s32[k] = _mm256_add_epi32(s32[k], _mm256_madd_epi16(s16[k], scp));
                }
            }
            let d = f16x8(p);
            let dmin = f16x8(p.add(q4k::DMIN));
            for k in 0..N {
                let y = &*xs[k].add(i);
                // i16 sums of sub-block pairs: lanes 0..4 of each 128-bit half hold
                // (bsums[2s] + bsums[2s + 1]) for s = 0..4 (low half) and 4..8 (high half).
                let b = _mm256_loadu_si256(y.bsums.as_ptr() as *const __m256i);
                let h = _mm256_hadd_epi16(b, b);
                let mut mins = _mm256_setzero_si256();
                for (pair, idx) in [0, 1, 4, 5].into_iter().enumerate() {
                    let mp = _mm256_cvtepu8_epi16(_mm_loadu_si128(
                        p.add(q4k::MIN + 16 * pair) as *const __m128i
                    ));
                    let bs = _mm256_permutevar8x32_epi32(h, _mm256_set1_epi32(idx));
                    mins = _mm256_add_epi32(mins, _mm256_madd_epi16(mp, bs));
                }
                let dy = _mm256_set1_ps(y.d);
                acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(s32[k]), acc[k]);
                acc[k] =
                    _mm256_fnmadd_ps(_mm256_mul_ps(dmin, dy), _mm256_cvtepi32_ps(mins), acc[k]);
            }
        }
    }
    for k in 0..N {
        // SAFETY: out[k] holds 8 f32.
        unsafe { _mm256_storeu_ps(out[k].as_mut_ptr(), acc[k]) };
    }
}

/// Q6_K: `N` tokens × eight rows.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_q6k<const N: usize>(
    g: *const u8,
    nb: usize,
    xs: [*const BlockQ8K; N],
    out: &mut [[f32; LANES]; TILE_TOKENS],
) {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = [_mm256_setzero_ps(); N];
    for i in 0..nb {
        // SAFETY: block i of the group spans [i*1680, (i+1)*1680); token k's super-block i
        // exists; offsets follow the layout.
        unsafe {
            let p = g.add(i * q6k::BYTES);
            prefetch_ahead(p, q6k::BYTES);
            let mut s32 = [_mm256_setzero_si256(); N];
            for s in 0..8 {
                // Lanes r: (sc[2s], sc[2s + 1]) as i16.
                let scq = _mm256_cvtepi8_epi16(_mm_loadu_si128(
                    p.add(q6k::SC + 16 * s) as *const __m128i
                ));
                let sc0 = _mm256_shufflehi_epi16::<0b10_10_00_00>(_mm256_shufflelo_epi16::<
                    0b10_10_00_00,
                >(scq));
                let sc1 = _mm256_shufflehi_epi16::<0b11_11_01_01>(_mm256_shufflelo_epi16::<
                    0b11_11_01_01,
                >(scq));
                let ql = p.add(q6k::ql(s));
                let qh = p.add(q6k::qh(s));
                for (h, scv) in [(0usize, sc0), (1, sc1)] {
                    let hb = _mm256_loadu_si256(qh.add(32 * h) as *const __m256i);
                    let v0 = _mm256_loadu_si256(ql.add(64 * h) as *const __m256i);
                    let v1 = _mm256_loadu_si256(ql.add(64 * h + 32) as *const __m256i);
                    let w0 = _mm256_or_si256(_mm256_and_si256(v0, m4), high2::<0>(hb));
                    let w1 = _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(v0), m4),
                        high2::<1>(hb),
                    );
                    let w2 = _mm256_or_si256(_mm256_and_si256(v1, m4), high2::<2>(hb));
                    let w3 = _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(v1), m4),
                        high2::<3>(hb),
                    );
                    for k in 0..N {
                        let xq = (*xs[k].add(i)).qs.as_ptr().add(32 * s + 16 * h);
                        let a = _mm256_add_epi16(
                            _mm256_maddubs_epi16(w0, bcast4(xq)),
                            _mm256_maddubs_epi16(w1, bcast4(xq.add(4))),
                        );
                        let b = _mm256_add_epi16(
                            _mm256_maddubs_epi16(w2, bcast4(xq.add(8))),
                            _mm256_maddubs_epi16(w3, bcast4(xq.add(12))),
                        );
                        let ab =
                            _mm256_add_epi32(_mm256_madd_epi16(a, scv), _mm256_madd_epi16(b, scv));
                        s32[k] = _mm256_add_epi32(s32[k], ab);
                    }
                }
                for k in 0..N {
                    // -32 · (sc[2s] · bsums[2s] + sc[2s + 1] · bsums[2s + 1]) per lane.
                    let y = &*xs[k].add(i);
                    let bs = _mm256_set1_epi32(std::ptr::read_unaligned(
                        y.bsums.as_ptr().add(2 * s) as *const i32,
                    ));
                    let corr = _mm256_slli_epi32::<5>(_mm256_madd_epi16(scq, bs));
                    s32[k] = _mm256_sub_epi32(s32[k], corr);
                }
            }
            let d = f16x8(p);
            for k in 0..N {
                let y = &*xs[k].add(i);
                let dd = _mm256_mul_ps(d, _mm256_set1_ps(y.d));
                acc[k] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s32[k]), acc[k]);
            }
        }
    }
    for k in 0..N {
        // SAFETY: out[k] holds 8 f32.
        unsafe { _mm256_storeu_ps(out[k].as_mut_ptr(), acc[k]) };
    }
}
