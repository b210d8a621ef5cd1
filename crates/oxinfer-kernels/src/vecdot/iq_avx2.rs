//! AVX2 unpacking of IQ4_XS and IQ2_XS super-blocks to [`KBlock`] integers (the dot product
//! itself is the K-quant kernel, `avx2::dot_kblock`). Other IQ formats use the portable
//! unpacker.
#![cfg(target_arch = "x86_64")]

use super::avx2::{bits_32, nibbles_32, table_256};
use super::unpack::{iq_scales, KBlock};
use crate::dequant::f16_at;
use crate::dequant::iq::{iq2_xs_codes, iq4_xs_code};
use crate::dequant::iq_grids::{IQ2XS_GRID, KSIGNS_IQ2XS, KVALUES_IQ4NL};
use crate::format::WeightFormat;
use std::arch::x86_64::*;

/// Unpacks super-block `b` of `format` into `out` with AVX2 when `format` is IQ4_XS or
/// IQ2_XS (returns `true`); other formats: `false`, `out` untouched.
///
/// # Safety
/// The CPU must have AVX2; `b` must be one whole super-block of `format`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn unpack_iq(format: WeightFormat, b: &[u8], out: &mut KBlock) -> bool {
    let dst = out.q.as_mut_ptr() as *mut __m256i;
    match format {
        WeightFormat::IQ4_XS => {
            let (sh, sl) = (u16::from_le_bytes([b[2], b[3]]), &b[4..8]);
            // SAFETY: the enclosing function has avx2; `b` holds 136 bytes, so the 16 bytes of
            // group ib start at 8 + 16 ib ≤ 120; `out.q` holds 8 stores of 32 bytes.
            unsafe {
                let table = table_256(&KVALUES_IQ4NL);
                for ib in 0..8 {
                    let q = _mm256_shuffle_epi8(table, nibbles_32(b.as_ptr().add(8 + 16 * ib)));
                    _mm256_storeu_si256(dst.add(ib), q);
                }
            }
            let code: [u8; 16] = std::array::from_fn(|g| iq4_xs_code(sh, sl, g / 2));
            iq_scales(format, f16_at(b, 0), &code, out);
            true
        }
        WeightFormat::IQ2_XS => {
            for k in 0..8 {
                // 4 grid entries = 32 weights: magnitudes from the grid, signs from ksigns.
                let v: [u16; 4] = std::array::from_fn(|e| {
                    let at = 2 + 2 * (4 * k + e);
                    u16::from_le_bytes([b[at], b[at + 1]])
                });
                let g = v.map(|x| IQ2XS_GRID[(x & 511) as usize] as i64);
                let s = v.map(|x| u32::from(KSIGNS_IQ2XS[(x >> 9) as usize]));
                let signs = s[0] | s[1] << 8 | s[2] << 16 | s[3] << 24;
                // SAFETY: avx2 is enabled; store k of 8 stays inside `out.q` (256 bytes).
                unsafe {
                    let mag = _mm256_set_epi64x(g[3], g[2], g[1], g[0]);
                    let neg = bits_32(signs);
                    let q = _mm256_sub_epi8(_mm256_xor_si256(mag, neg), neg);
                    _mm256_storeu_si256(dst.add(k), q);
                }
            }
            iq_scales(format, f16_at(b, 0), &iq2_xs_codes(b), out);
            true
        }
        _ => false,
    }
}
