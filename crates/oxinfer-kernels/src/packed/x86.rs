//! What the AVX2 and the AVX-512 VNNI packed kernels share: the `tile32` format codes, the
//! unpacking of high quant bits, activation broadcasts, f16 scale loads and weight prefetches.
//! Every function is inlined into kernels compiled with AVX2, FMA and F16C (at least).

use crate::format::WeightFormat;
use std::arch::x86_64::*;

/// How far ahead of the block being multiplied the kernels prefetch weights, in bytes (the
/// hardware prefetchers alone left Q6_K decode latency-bound: 4.5 GB/s per CPU-second).
const PREFETCH_AHEAD: usize = 4096;

pub(super) const Q4_0: u8 = 0;
pub(super) const Q4_1: u8 = 1;
pub(super) const Q8_0: u8 = 2;
pub(super) const Q5_0: u8 = 3;
pub(super) const Q5_1: u8 = 4;
pub(super) const IQ4_NL: u8 = 5;
pub(super) const MXFP4: u8 = 6;

/// The weight format of a `tile32` format code.
pub(super) const fn format_of(f: u8) -> WeightFormat {
    match f {
        Q4_0 => WeightFormat::Q4_0,
        Q4_1 => WeightFormat::Q4_1,
        Q5_0 => WeightFormat::Q5_0,
        Q5_1 => WeightFormat::Q5_1,
        IQ4_NL => WeightFormat::IQ4_NL,
        MXFP4 => WeightFormat::MXFP4,
        _ => WeightFormat::Q8_0,
    }
}

/// The fifth bit of quant register `W_j` from the high-bit bytes `hb`, at bit 4 of each byte.
#[inline(always)]
fn high1(hb: __m256i, j: usize) -> __m256i {
    // SAFETY: plain register arithmetic; every caller is an AVX2 (or AVX2 + VNNI) kernel.
    unsafe {
        let v = if j <= 4 {
            _mm256_sll_epi16(hb, _mm_cvtsi32_si128(4 - j as i32))
        } else {
            _mm256_srl_epi16(hb, _mm_cvtsi32_si128(j as i32 - 4))
        };
        _mm256_and_si256(v, _mm256_set1_epi8(0x10))
    }
}

/// Quant registers `W_2c` (low nibbles) and `W_2c+1` (high nibbles) of nibble chunk `c` at
/// `qs`, with their fifth bits from the high-bit bytes `hb` when `FIVE`.
#[inline(always)]
pub(super) unsafe fn nibble_pair<const FIVE: bool>(
    qs: *const u8,
    hb: __m256i,
    c: usize,
) -> (__m256i, __m256i) {
    // SAFETY: the caller guarantees 32 readable bytes at `qs + 32c`; every caller is an AVX2
    // (or AVX2 + VNNI) kernel.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let v = _mm256_loadu_si256(qs.add(32 * c) as *const __m256i);
        let lo = _mm256_and_si256(v, m4);
        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
        if FIVE {
            (
                _mm256_or_si256(lo, high1(hb, 2 * c)),
                _mm256_or_si256(hi, high1(hb, 2 * c + 1)),
            )
        } else {
            (lo, hi)
        }
    }
}

/// The four activation bytes at `p` in every 32-bit lane.
#[inline(always)]
pub(super) unsafe fn bcast4(p: *const i8) -> __m256i {
    // SAFETY: the caller guarantees 4 readable bytes at `p`.
    unsafe { _mm256_set1_epi32(std::ptr::read_unaligned(p as *const i32)) }
}

/// Prefetches the `bytes` bytes that start [`PREFETCH_AHEAD`] bytes after `p` (the
/// weights a few blocks ahead: a hint, never a fault, even past the end of the group).
///
/// Kernels over large blocks call it per sub-block (the block's header first, then each
/// sub-block's quants as the loop reaches them), so a few prefetches go out per step of
/// work: a whole 1.2–1.7 KiB K-quant block's 19–27 prefetches issued back to back at the
/// block's start halved Q6_K's rate from memory (one thread, 11.7 → 22.3 GB/s when spread).
#[inline(always)]
pub(super) fn prefetch_ahead(p: *const u8, bytes: usize) {
    let mut off = 0;
    while off < bytes {
        // SAFETY: prefetch is a hint and does not fault; wrapping_add keeps the address
        // computation defined whatever it points to.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PREFETCH_AHEAD + off) as *const i8) };
        off += 64;
    }
}

/// A 16-entry i8 table in both 128-bit halves, for `_mm256_shuffle_epi8` lookups.
#[inline(always)]
pub(super) unsafe fn table16(t: &[i8; 16]) -> __m256i {
    // SAFETY: `t` is 16 readable bytes; every caller is an AVX2 (or AVX2 + VNNI) kernel.
    unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr() as *const __m128i)) }
}

/// The eight E8M0 bytes at `p` as halved f32 scales, as `dequant::iq::e8m0_half` (MXFP4).
#[inline(always)]
pub(super) unsafe fn e8m0_half_x8(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 8 readable bytes at `p`; every caller is an AVX2 kernel.
    unsafe {
        let e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i));
        let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
        let tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
        let is_normal = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1));
        _mm256_castsi256_ps(_mm256_blendv_epi8(tiny, normal, is_normal))
    }
}

/// Eight f16 at `p` as f32.
#[inline(always)]
pub(super) unsafe fn f16x8(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 16 readable bytes at `p`; the enclosing kernel has f16c.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
}

/// The top two bits of quant register `W_{4h + K}` from high-bit chunk `hb`, at bits 4..6.
#[inline(always)]
pub(super) fn high2<const K: i32>(hb: __m256i) -> __m256i {
    // SAFETY: plain register arithmetic; every caller is an AVX2 (or AVX2 + VNNI) kernel.
    unsafe {
        let v = match K {
            0 => _mm256_slli_epi16::<4>(hb),
            1 => _mm256_slli_epi16::<2>(hb),
            2 => hb,
            _ => _mm256_srli_epi16::<2>(hb),
        };
        _mm256_and_si256(v, _mm256_set1_epi8(0x30))
    }
}
