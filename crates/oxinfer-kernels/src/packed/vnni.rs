//! AVX-512 VNNI micro-kernels over the packed layouts, on 256-bit registers (AVX512-VL):
//! `vpdpbusd` multiplies the four unsigned quant bytes of each row's 32-bit lane with four
//! signed activation bytes and adds the four products into that lane's i32, replacing AVX2's
//! `maddubs` + `add` + `madd` chain (and its i16 headroom limits). Same layouts, same integer
//! sums and the same float operations in the same order as `avx2.rs` and the scalar twin, so
//! all three agree bit for bit. Every function requires AVX2, FMA, F16C, AVX512F, AVX512VL
//! and AVX512-VNNI.
//!
//! Tiles are up to eight tokens wide (AVX-512VL gives 32 vector registers): each weight
//! register is unpacked once for eight tokens, whose eight i32 chains keep enough `vpdpbusd`
//! in flight; narrower tiles give each token two chains (even and odd quant registers).

use super::pack::{q4k, q5k, q6k, qh_offset, qs_offset};
use super::x86::{
    bcast4, f16x8, format_of, high1, high2, prefetch_ahead, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
};
use super::{LANES, TILE_TOKENS};
use crate::fast::Acts;
use crate::format::WeightFormat;
use crate::q8::{BlockQ8, BlockQ8K};
use std::arch::x86_64::*;

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

/// See `super::run_tile`: dispatches on format and tile width.
///
/// # Safety
/// The CPU must have AVX2, FMA, F16C, AVX512F, AVX512VL and AVX512-VNNI; `g` must be a whole
/// packed group of `nb` blocks of `format`, and `acts` must hold `nb` blocks per token for
/// tokens `ti .. ti + n`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
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
                            8 => tile32::<{ $f }, 8>(gp, nb, std::array::from_fn(x), tile),
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
                            8 => $kern::<8>(gp, nb, std::array::from_fn(x), tile),
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
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
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
    let mut acc = [_mm256_setzero_ps(); N];
    for i in 0..nb {
        // SAFETY: block i of the group spans [i*pb, (i+1)*pb) (the group holds nb blocks);
        // token k's block i exists (nb blocks per token); offsets follow the layout.
        unsafe {
            let p = g.add(i * pb);
            prefetch_ahead(p, pb);
            let d = f16x8(p);
            let qs = p.add(qo);
            let mut ea = [_mm256_setzero_si256(); N];
            let mut oa = [_mm256_setzero_si256(); N];
            if F == Q8_0 {
                // Signed weights: |w| as the unsigned operand, the sign moved onto x.
                for j in (0..8).step_by(2) {
                    let w0 = _mm256_loadu_si256(qs.add(32 * j) as *const __m256i);
                    let w1 = _mm256_loadu_si256(qs.add(32 * j + 32) as *const __m256i);
                    let (a0, a1) = (_mm256_abs_epi8(w0), _mm256_abs_epi8(w1));
                    for k in 0..N {
                        let xq = (*xs[k].add(i)).qs.as_ptr().add(4 * j);
                        let (x0, x1) = (bcast4(xq), bcast4(xq.add(4)));
                        let (x0, x1) = (_mm256_sign_epi8(x0, w0), _mm256_sign_epi8(x1, w1));
                        if N >= 8 {
                            ea[k] = dp(dp(ea[k], a0, x0), a1, x1);
                        } else {
                            ea[k] = dpn::<N>(ea[k], a0, x0);
                            oa[k] = dpn::<N>(oa[k], a1, x1);
                        }
                    }
                }
            } else {
                let hb = if five {
                    _mm256_loadu_si256(p.add(qh_offset(format_of(F))) as *const __m256i)
                } else {
                    _mm256_setzero_si256()
                };
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
                        if N >= 8 {
                            ea[k] = dp(dp(ea[k], lo, bcast4(xq)), hi, bcast4(xq.add(4)));
                        } else {
                            ea[k] = dpn::<N>(ea[k], lo, bcast4(xq));
                            oa[k] = dpn::<N>(oa[k], hi, bcast4(xq.add(4)));
                        }
                    }
                }
            }
            let mw = match F {
                Q4_1 | Q5_1 => f16x8(p.add(16)),
                Q5_0 => _mm256_mul_ps(d, _mm256_set1_ps(16.0)),
                _ => _mm256_mul_ps(d, _mm256_set1_ps(8.0)),
            };
            for k in 0..N {
                let y = &*xs[k].add(i);
                let s32 = _mm256_add_epi32(ea[k], oa[k]);
                let dd = _mm256_mul_ps(d, _mm256_set1_ps(y.d));
                acc[k] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s32), acc[k]);
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
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
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
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
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
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
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
                let qs = p.add(if FIVE { q5k::qs(s) } else { q4k::QS + 128 * s });
                let hb = if FIVE {
                    _mm256_loadu_si256(p.add(q5k::qh(s)) as *const __m256i)
                } else {
                    _mm256_setzero_si256()
                };
                let mut ea = [_mm256_setzero_si256(); N];
                let mut oa = [_mm256_setzero_si256(); N];
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
                        if N >= 8 {
                            ea[k] = dp(dp(ea[k], lo, bcast4(xq)), hi, bcast4(xq.add(4)));
                        } else {
                            ea[k] = dpn::<N>(ea[k], lo, bcast4(xq));
                            oa[k] = dpn::<N>(oa[k], hi, bcast4(xq.add(4)));
                        }
                    }
                }
                for k in 0..N {
                    let part = _mm256_add_epi32(ea[k], oa[k]);
                    s32[k] = _mm256_add_epi32(s32[k], _mm256_mullo_epi32(part, sc));
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
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
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
                // Lanes r: (sc[2s], sc[2s + 1]) as i16; as i32 each on its own.
                let scq = _mm256_cvtepi8_epi16(_mm_loadu_si128(
                    p.add(q6k::SC + 16 * s) as *const __m128i
                ));
                let sc0 = _mm256_srai_epi32::<16>(_mm256_slli_epi32::<16>(scq));
                let sc1 = _mm256_srai_epi32::<16>(scq);
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
                        let a = dp(
                            dp(_mm256_setzero_si256(), w0, bcast4(xq)),
                            w1,
                            bcast4(xq.add(4)),
                        );
                        let b = dp(
                            dp(_mm256_setzero_si256(), w2, bcast4(xq.add(8))),
                            w3,
                            bcast4(xq.add(12)),
                        );
                        let part = _mm256_add_epi32(a, b);
                        s32[k] = _mm256_add_epi32(s32[k], _mm256_mullo_epi32(part, scv));
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
