//! NEON unpacking of IQ4_XS and IQ2_XS super-blocks to [`KBlock`] integers, the twin of
//! `iq_avx2.rs` (the dot product itself is the K-quant kernel, `neon::dot_kblock`). Other IQ
//! formats use the portable unpacker.
#![cfg(target_arch = "aarch64")]

use super::unpack::{iq_scales, KBlock};
use crate::dequant::f16_at;
use crate::dequant::iq::{iq2_xs_codes, iq4_xs_code};
use crate::dequant::iq_grids::{IQ2XS_GRID, KSIGNS_IQ2XS, KVALUES_IQ4NL};
use crate::format::WeightFormat;
use std::arch::aarch64::*;

/// Bit `j % 8` in byte `j`: `vtstq_u8` against a sign byte repeated gives 0xFF where weight
/// `j`'s sign bit is set.
const SIGN_BITS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];

/// Unpacks super-block `b` of `format` into `out` with NEON when `format` is IQ4_XS or
/// IQ2_XS (returns `true`); other formats: `false`, `out` untouched.
///
/// # Safety
/// `b` must be one whole super-block of `format` (NEON is part of every aarch64 CPU).
#[target_feature(enable = "neon")]
pub unsafe fn unpack_iq(format: WeightFormat, b: &[u8], out: &mut KBlock) -> bool {
    let dst = out.q.as_mut_ptr();
    match format {
        WeightFormat::IQ4_XS => {
            let (sh, sl) = (u16::from_le_bytes([b[2], b[3]]), &b[4..8]);
            // SAFETY: `b` holds 136 bytes, so the 16 bytes of group ib start at 8 + 16 ib ≤
            // 120; `out.q` holds 8 × 32 bytes.
            unsafe {
                let table = vld1q_s8(KVALUES_IQ4NL.as_ptr());
                let m4 = vdupq_n_u8(0x0F);
                for ib in 0..8 {
                    let v = vld1q_u8(b.as_ptr().add(8 + 16 * ib));
                    vst1q_s8(dst.add(32 * ib), vqtbl1q_s8(table, vandq_u8(v, m4)));
                    vst1q_s8(dst.add(32 * ib + 16), vqtbl1q_s8(table, vshrq_n_u8::<4>(v)));
                }
            }
            let code: [u8; 16] = std::array::from_fn(|g| iq4_xs_code(sh, sl, g / 2));
            iq_scales(format, f16_at(b, 0), &code, out);
            true
        }
        WeightFormat::IQ2_XS => {
            // SAFETY: a 16-byte constant.
            let bits = unsafe { vld1q_u8(SIGN_BITS.as_ptr()) };
            for e in (0..32).step_by(2) {
                // Two grid entries = 16 weights: magnitudes from the grid, signs from ksigns.
                let v: [u16; 2] = std::array::from_fn(|i| {
                    let at = 2 + 2 * (e + i);
                    u16::from_le_bytes([b[at], b[at + 1]])
                });
                let g = v.map(|x| IQ2XS_GRID[(x & 511) as usize]);
                let s = v.map(|x| KSIGNS_IQ2XS[(x >> 9) as usize]);
                // SAFETY: register arithmetic; store e/2 of 16 stays inside `out.q` (256 bytes).
                unsafe {
                    let mag =
                        vreinterpretq_s8_u64(vcombine_u64(vcreate_u64(g[0]), vcreate_u64(g[1])));
                    let sb = vcombine_u8(vdup_n_u8(s[0]), vdup_n_u8(s[1]));
                    let neg = vreinterpretq_s8_u8(vtstq_u8(sb, bits));
                    let q = vsubq_s8(veorq_s8(mag, neg), neg);
                    vst1q_s8(dst.add(8 * e), q);
                }
            }
            iq_scales(format, f16_at(b, 0), &iq2_xs_codes(b), out);
            true
        }
        _ => false,
    }
}
