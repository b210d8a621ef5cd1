//! Q4_K and Q6_K kernels on 512-bit registers: two packed groups (16 rows) at once, group `g`
//! in the low 256 bits and group `g + 1` in the high ones, against one to four tokens, so one
//! broadcast of four activation bytes, one `vpdpbusd`, one scale multiply and one float
//! update serve sixteen rows instead of eight. At one token (decode) the eight-row kernels in
//! `vnni.rs` are bound by instruction count (unpacking nibbles, activation broadcasts,
//! per-sub-block scale products) below what memory delivers; these halve the instructions per
//! weight byte. For prefill they halve the `vpdpbusd` count per product.
//!
//! Each lane sees the same integer sums and the same float operations in the same order as
//! the eight-row kernels, so the results are bit-identical to them (and to the scalar twin).
//! Every function requires AVX2, FMA, F16C, AVX512F, AVX512BW, AVX512VL and AVX512-VNNI.

use super::pack::{q4k, q6k};
use super::x86::prefetch_ahead;
use crate::format::WeightFormat;
use crate::q8::BlockQ8K;
use std::arch::x86_64::*;

/// Whether `format` has a two-group kernel.
pub(super) fn handles(format: WeightFormat) -> bool {
    matches!(format, WeightFormat::Q4K | WeightFormat::Q6K)
}

/// 32 bytes at `a` (low half) and 32 at `b` (high half).
#[inline(always)]
unsafe fn load2(a: *const u8, b: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 32 readable bytes at each pointer.
    unsafe {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_loadu_si256(a as *const __m256i)),
            _mm256_loadu_si256(b as *const __m256i),
        )
    }
}

/// 16 bytes at `a` (low half) and 16 at `b` (high half).
#[inline(always)]
unsafe fn load2x16(a: *const u8, b: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes at each pointer.
    unsafe {
        _mm256_inserti128_si256::<1>(
            _mm256_castsi128_si256(_mm_loadu_si128(a as *const __m128i)),
            _mm_loadu_si128(b as *const __m128i),
        )
    }
}

/// Eight f16 at `a` and eight at `b` as sixteen f32.
#[inline(always)]
unsafe fn f16x16(a: *const u8, b: *const u8) -> __m512 {
    // SAFETY: 16 readable bytes at each pointer (caller); the kernel has avx512f.
    unsafe { _mm512_cvtph_ps(load2x16(a, b)) }
}

/// The four activation bytes at `p` in every 32-bit lane.
#[inline(always)]
unsafe fn bcast4(p: *const i8) -> __m512i {
    // SAFETY: the caller guarantees 4 readable bytes at `p`.
    unsafe { _mm512_set1_epi32(std::ptr::read_unaligned(p as *const i32)) }
}

/// `acc + Σ u8(w) · i8(x)` over each 32-bit lane's four bytes.
#[inline(always)]
fn dp(acc: __m512i, w: __m512i, x: __m512i) -> __m512i {
    // SAFETY: plain register arithmetic; the enclosing kernel has avx512vnni + avx512f.
    unsafe { _mm512_dpbusd_epi32(acc, w, x) }
}

/// Q4_K: `out[k][r]` = row `r` of groups `g0` (r < 8) and `g1` (r >= 8) · token `xs[k]`.
///
/// # Safety
/// The CPU has the features listed in the module doc; `g0` and `g1` are whole packed Q4_K
/// groups of `nb` blocks and each `xs[k]` points to `nb` activation super-blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn gemv2_q4k<const N: usize>(
    g0: *const u8,
    g1: *const u8,
    nb: usize,
    xs: [*const BlockQ8K; N],
    out: &mut [[f32; 16]; N],
) {
    let m4 = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_setzero_ps(); N];
    for i in 0..nb {
        // SAFETY: block i of each group spans [i*1184, (i+1)*1184); the token's super-block i
        // exists; offsets follow the layout.
        unsafe {
            let (p0, p1) = (g0.add(i * q4k::BYTES), g1.add(i * q4k::BYTES));
            prefetch_ahead(p0, q4k::QS);
            prefetch_ahead(p1, q4k::QS);
            let ys: [&BlockQ8K; N] = std::array::from_fn(|k| &*xs[k].add(i));
            // Sub-blocks in pairs (2sp, 2sp + 1): each half sum (16 products of a 4-bit
            // quant and an int8, |Σ| <= 16 · 15 · 127 = 30480) fits an i16, so the two
            // sub-blocks' half sums are packed into the i16 halves of one lane (`idx`: the low
            // i16 of lane r from the first, the high from the second) and one `vpdpwssd`
            // against the pair's scales (sc[2sp], sc[2sp + 1]) adds both to the lane's sum:
            // two `vpermt2w` and two `vpdpwssd` per pair and token where one add, one
            // `mullo` and one add per sub-block were (the same exact integer sum).
            let mut s32 = [_mm512_setzero_si512(); N];
            let idx = _mm512_set_epi16(
                62, 30, 60, 28, 58, 26, 56, 24, 54, 22, 52, 20, 50, 18, 48, 16, 46, 14, 44, 12, 42,
                10, 40, 8, 38, 6, 36, 4, 34, 2, 32, 0,
            );
            for sp in 0..4 {
                // sc[2sp] and sc[2sp + 1] of lanes 0..8 (group g0) and 8..16 (g1), as the i16
                // pairs (sc[2sp][r], sc[2sp + 1][r]) of lane r.
                let scb = load2x16(p0.add(q4k::SC + 16 * sp), p1.add(q4k::SC + 16 * sp));
                let scw =
                    _mm512_cvtepu8_epi16(_mm256_unpacklo_epi8(scb, _mm256_srli_si256::<8>(scb)));
                let mut ea = [[_mm512_setzero_si512(); N]; 2];
                let mut oa = [[_mm512_setzero_si512(); N]; 2];
                for h in 0..2 {
                    let s = 2 * sp + h;
                    let qo = q4k::QS + 128 * s;
                    prefetch_ahead(p0.add(qo), 128);
                    prefetch_ahead(p1.add(qo), 128);
                    for c in 0..4 {
                        let v = load2(p0.add(qo + 32 * c), p1.add(qo + 32 * c));
                        let lo = _mm512_and_si512(v, m4);
                        let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
                        for k in 0..N {
                            let xq = ys[k].qs.as_ptr().add(32 * s + 8 * c);
                            ea[h][k] = dp(ea[h][k], lo, bcast4(xq));
                            oa[h][k] = dp(oa[h][k], hi, bcast4(xq.add(4)));
                        }
                    }
                }
                for k in 0..N {
                    let a0 = _mm512_permutex2var_epi16(ea[0][k], idx, ea[1][k]);
                    let a1 = _mm512_permutex2var_epi16(oa[0][k], idx, oa[1][k]);
                    s32[k] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(s32[k], a0, scw), a1, scw);
                }
            }
            let d = f16x16(p0, p1);
            let dmin = f16x16(p0.add(q4k::DMIN), p1.add(q4k::DMIN));
            let mp: [__m512i; 4] = std::array::from_fn(|pair| {
                _mm512_cvtepu8_epi16(load2x16(
                    p0.add(q4k::MIN + 16 * pair),
                    p1.add(q4k::MIN + 16 * pair),
                ))
            });
            for k in 0..N {
                let y = ys[k];
                // Σ over sub-block pairs of (m[2p], m[2p + 1]) · (bsum[2p], bsum[2p + 1]), the
                // sub-block sums being the group-of-16 sums added in pairs (no i16 overflow:
                // |Σ 32 quants| <= 4064).
                let mut mins = _mm512_setzero_si512();
                for (pair, m) in mp.iter().enumerate() {
                    let sub = |j: usize| (y.bsums[2 * j] + y.bsums[2 * j + 1]) as u16 as u32;
                    let bs = (sub(2 * pair) | (sub(2 * pair + 1) << 16)) as i32;
                    mins = _mm512_add_epi32(mins, _mm512_madd_epi16(*m, _mm512_set1_epi32(bs)));
                }
                let dy = _mm512_set1_ps(y.d);
                acc[k] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(s32[k]), acc[k]);
                acc[k] =
                    _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dy), _mm512_cvtepi32_ps(mins), acc[k]);
            }
        }
    }
    for k in 0..N {
        // SAFETY: out[k] holds 16 f32.
        unsafe { _mm512_storeu_ps(out[k].as_mut_ptr(), acc[k]) };
    }
}

/// The top two bits of quant register `W_{4h + K}` from high-bit chunk `hb`, at bits 4..6.
#[inline(always)]
fn high2<const K: u32>(hb: __m512i) -> __m512i {
    // SAFETY: plain register arithmetic; the enclosing kernel has avx512bw.
    unsafe {
        let v = match K {
            0 => _mm512_slli_epi16::<4>(hb),
            1 => _mm512_slli_epi16::<2>(hb),
            2 => hb,
            _ => _mm512_srli_epi16::<2>(hb),
        };
        _mm512_and_si512(v, _mm512_set1_epi8(0x30))
    }
}

/// Q6_K: `out[k][r]` = row `r` of groups `g0` (r < 8) and `g1` (r >= 8) · token `xs[k]`.
///
/// # Safety
/// As [`gemv2_q4k`], for packed Q6_K groups.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn gemv2_q6k<const N: usize>(
    g0: *const u8,
    g1: *const u8,
    nb: usize,
    xs: [*const BlockQ8K; N],
    out: &mut [[f32; 16]; N],
) {
    let m4 = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_setzero_ps(); N];
    for i in 0..nb {
        // SAFETY: block i of each group spans [i*1680, (i+1)*1680); the token's super-block i
        // exists; offsets follow the layout.
        unsafe {
            let (p0, p1) = (g0.add(i * q6k::BYTES), g1.add(i * q6k::BYTES));
            prefetch_ahead(p0, q6k::QL);
            prefetch_ahead(p1, q6k::QL);
            let ys: [&BlockQ8K; N] = std::array::from_fn(|k| &*xs[k].add(i));
            let mut s32 = [_mm512_setzero_si512(); N];
            for s in 0..8 {
                // Lanes r: (sc[2s], sc[2s + 1]) as i16; as i32 each on its own.
                let scq = _mm512_cvtepi8_epi16(load2x16(
                    p0.add(q6k::SC + 16 * s),
                    p1.add(q6k::SC + 16 * s),
                ));
                let sc0 = _mm512_srai_epi32::<16>(_mm512_slli_epi32::<16>(scq));
                let sc1 = _mm512_srai_epi32::<16>(scq);
                let (ql, qh) = (q6k::ql(s), q6k::qh(s));
                prefetch_ahead(p0.add(ql), 192);
                prefetch_ahead(p1.add(ql), 192);
                for (h, scv) in [(0usize, sc0), (1, sc1)] {
                    let hb = load2(p0.add(qh + 32 * h), p1.add(qh + 32 * h));
                    let v0 = load2(p0.add(ql + 64 * h), p1.add(ql + 64 * h));
                    let v1 = load2(p0.add(ql + 64 * h + 32), p1.add(ql + 64 * h + 32));
                    let w0 = _mm512_or_si512(_mm512_and_si512(v0, m4), high2::<0>(hb));
                    let w1 = _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16::<4>(v0), m4),
                        high2::<1>(hb),
                    );
                    let w2 = _mm512_or_si512(_mm512_and_si512(v1, m4), high2::<2>(hb));
                    let w3 = _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16::<4>(v1), m4),
                        high2::<3>(hb),
                    );
                    for k in 0..N {
                        let xq = ys[k].qs.as_ptr().add(32 * s + 16 * h);
                        // One chain of four products (no add of two half sums): the
                        // two halves and N tokens keep enough chains in flight, and on
                        // Zen 5 the kernel runs about a tenth faster than with two
                        // chains of two (see docs/performance.md, issue 26 item 3).
                        let part = dp(
                            dp(
                                dp(
                                    dp(_mm512_setzero_si512(), w0, bcast4(xq)),
                                    w1,
                                    bcast4(xq.add(4)),
                                ),
                                w2,
                                bcast4(xq.add(8)),
                            ),
                            w3,
                            bcast4(xq.add(12)),
                        );
                        s32[k] = _mm512_add_epi32(s32[k], _mm512_mullo_epi32(part, scv));
                    }
                }
                for k in 0..N {
                    // -32 · (sc[2s] · bsums[2s] + sc[2s + 1] · bsums[2s + 1]) per lane.
                    let bs = _mm512_set1_epi32(std::ptr::read_unaligned(
                        ys[k].bsums.as_ptr().add(2 * s) as *const i32,
                    ));
                    let corr = _mm512_slli_epi32::<5>(_mm512_madd_epi16(scq, bs));
                    s32[k] = _mm512_sub_epi32(s32[k], corr);
                }
            }
            let d = f16x16(p0, p1);
            for k in 0..N {
                let dd = _mm512_mul_ps(d, _mm512_set1_ps(ys[k].d));
                acc[k] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(s32[k]), acc[k]);
            }
        }
    }
    for k in 0..N {
        // SAFETY: out[k] holds 16 f32.
        unsafe { _mm512_storeu_ps(out[k].as_mut_ptr(), acc[k]) };
    }
}
