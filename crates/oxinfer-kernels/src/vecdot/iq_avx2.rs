//! AVX2 unpacking of the 256-weight IQ/TQ super-blocks to [`KBlock`] integers (the dot product
//! itself is the K-quant kernel, `avx2::dot_kblock`). The grid formats' words and sign bits are
//! read by `dequant::iq_layout`, as the portable unpacker reads them, and signed here 32 weights
//! per instruction; IQ4_XS is a table shuffle; TQ1_0 and TQ2_0 are digit extraction. The scales
//! are the portable unpacker's ([`iq_block_scales`]).
#![cfg(target_arch = "x86_64")]

use super::avx2::{bits_32, nibbles_32, table_256};
use super::unpack::{iq_block_scales, KBlock};
use crate::dequant::iq_grids::KVALUES_IQ4NL;
use crate::dequant::iq_layout::{for_each_group, is_grid, is_iq1, per_iq_format, TQ1_POW3};
use crate::format::WeightFormat;
use std::arch::x86_64::*;

/// Unpacks super-block `b` of `format` into `out` with AVX2 when `format` is a 256-weight
/// IQ/TQ format (returns `true`); other formats: `false`, `out` untouched.
///
/// # Safety
/// The CPU must have AVX2; `b` must be one whole super-block of `format`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn unpack_iq(format: WeightFormat, b: &[u8], out: &mut KBlock) -> bool {
    let dst = out.q.as_mut_ptr() as *mut __m256i;
    // SAFETY (all arms): avx2 is enabled; `b` is one whole super-block of `format` and
    // `out.q` holds 8 stores of 32 bytes.
    per_iq_format!(
        format,
        |f| {
            match f {
                f if is_grid(f) => unsafe { grid_quants(f, b, dst) },
                WeightFormat::IQ4_XS => unsafe { iq4_xs_quants(b, dst) },
                WeightFormat::TQ1_0 => unsafe { tq1_quants(b, dst) },
                WeightFormat::TQ2_0 => unsafe { tq2_quants(b, dst) },
                other => unreachable!("{other} is not a 256-weight IQ/TQ format"),
            }
            iq_block_scales(f, b, out);
            true
        },
        else false
    )
}

/// The grid formats: per group of 32, four grid words and 32 sign bits (`iq_layout`) become
/// `±magnitude`, or for IQ1 `8 g ± 1`, as the portable unpacker's `put_signed8` / `put_iq1`.
///
/// # Safety
/// AVX2; `b` one whole super-block of the grid `format`; `dst` 8 writable vectors.
#[target_feature(enable = "avx2")]
unsafe fn grid_quants(format: WeightFormat, b: &[u8], dst: *mut __m256i) {
    let iq1 = is_iq1(format);
    for_each_group(format, b, |k, g| {
        let w = |e: usize| g.grid[e] as i64;
        let mag = _mm256_set_epi64x(w(3), w(2), w(1), w(0));
        let neg = bits_32(g.bits);
        let q = if iq1 {
            // 8 g: a 16-bit shift, then the bits shifted in from the byte below cleared.
            let g8 = _mm256_and_si256(_mm256_slli_epi16::<3>(mag), _mm256_set1_epi8(-8));
            _mm256_add_epi8(g8, _mm256_or_si256(neg, _mm256_set1_epi8(1)))
        } else {
            _mm256_sub_epi8(_mm256_xor_si256(mag, neg), neg)
        };
        // SAFETY: store k of 8 stays inside `dst`.
        unsafe { _mm256_storeu_si256(dst.add(k), q) };
    });
}

/// IQ4_XS: 32 nibbles per group through the IQ4_NL table.
///
/// # Safety
/// AVX2; `b` one whole IQ4_XS super-block (136 bytes); `dst` 8 writable vectors.
#[target_feature(enable = "avx2")]
unsafe fn iq4_xs_quants(b: &[u8], dst: *mut __m256i) {
    // SAFETY: the 16 bytes of group ib start at 8 + 16 ib ≤ 120 < 136; store ib of 8.
    unsafe {
        let table = table_256(&KVALUES_IQ4NL);
        for ib in 0..8 {
            let q = _mm256_shuffle_epi8(table, nibbles_32(b.as_ptr().add(8 + 16 * ib)));
            _mm256_storeu_si256(dst.add(ib), q);
        }
    }
}

/// TQ1_0: the base-3 digits of [`TQ1_POW3`]'s layout, minus 1, as the portable unpacker.
///
/// # Safety
/// AVX2; `b` one whole TQ1_0 super-block (54 bytes); `dst` 8 writable vectors.
#[target_feature(enable = "avx2")]
unsafe fn tq1_quants(b: &[u8], dst: *mut __m256i) {
    let p = b.as_ptr();
    // SAFETY: the loads read bytes 0..32, 32..48 and 48..52 of the 54; stores 0..8 of 8.
    unsafe {
        let head = _mm256_loadu_si256(p as *const __m256i);
        let pow = |p: usize| i16::from(TQ1_POW3[p]);
        for p in 0..5 {
            _mm256_storeu_si256(dst.add(p), ternary(head, _mm256_set1_epi16(pow(p))));
        }
        let mid = _mm256_broadcastsi128_si256(_mm_loadu_si128(p.add(32) as *const __m128i));
        let pows = |p: usize| _mm256_setr_m128i(_mm_set1_epi16(pow(p)), _mm_set1_epi16(pow(p + 1)));
        _mm256_storeu_si256(dst.add(5), ternary(mid, pows(0)));
        _mm256_storeu_si256(dst.add(6), ternary(mid, pows(2)));
        // Digit 4 of bytes 32..48, then the four digits of bytes 48..52 (each byte 4 times).
        let qh = _mm_set1_epi32(i32::from_le_bytes([b[48], b[49], b[50], b[51]]));
        let tail = _mm256_setr_m128i(_mm256_castsi256_si128(mid), qh);
        let qh_pows: [i16; 8] = std::array::from_fn(|i| pow(i / 2));
        let qh_pows = _mm_loadu_si128(qh_pows.as_ptr() as *const __m128i);
        let tail_pows = _mm256_setr_m128i(_mm_set1_epi16(pow(4)), qh_pows);
        _mm256_storeu_si256(dst.add(7), ternary(tail, tail_pows));
    }
}

/// The base-3 digit picked by `pow` (16-bit lanes, one power of 3 for both bytes) of each byte
/// of `v`, minus 1: `v · pow mod 256` then `-1 + [≥ 86] + [≥ 171]`, which is `((x · 3) >> 8) - 1`.
#[inline]
#[target_feature(enable = "avx2")]
fn ternary(v: __m256i, pow: __m256i) -> __m256i {
    // Byte products mod 256 from 16-bit ones: low bytes directly, high bytes with the low
    // bytes cleared first (so nothing carries in).
    let lo = _mm256_and_si256(_mm256_mullo_epi16(v, pow), _mm256_set1_epi16(0x00FF));
    let hi_in = _mm256_and_si256(v, _mm256_set1_epi16(0xFF00u16 as i16));
    let x = _mm256_or_si256(lo, _mm256_mullo_epi16(hi_in, pow));
    let at_least = |t: u8| {
        let t = _mm256_set1_epi8(t as i8);
        _mm256_cmpeq_epi8(_mm256_max_epu8(x, t), x)
    };
    // The masks are −1 where true.
    _mm256_sub_epi8(
        _mm256_sub_epi8(_mm256_set1_epi8(-1), at_least(86)),
        at_least(171),
    )
}

/// TQ2_0: four 2-bit fields per byte, minus 1; byte `m` of half `c` gives weights
/// `128 c + 32 s + m`, `s` the field.
///
/// # Safety
/// AVX2; `b` one whole TQ2_0 super-block (66 bytes); `dst` 8 writable vectors.
#[target_feature(enable = "avx2")]
unsafe fn tq2_quants(b: &[u8], dst: *mut __m256i) {
    // SAFETY: the loads read bytes 0..64 of the 66; stores 0..8 of 8.
    unsafe {
        let (m3, one) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1));
        for c in 0..2 {
            let v = _mm256_loadu_si256(b.as_ptr().add(32 * c) as *const __m256i);
            let fields = [
                v,
                _mm256_srli_epi16::<2>(v),
                _mm256_srli_epi16::<4>(v),
                _mm256_srli_epi16::<6>(v),
            ];
            for (s, f) in fields.into_iter().enumerate() {
                let q = _mm256_sub_epi8(_mm256_and_si256(f, m3), one);
                _mm256_storeu_si256(dst.add(4 * c + s), q);
            }
        }
    }
}
