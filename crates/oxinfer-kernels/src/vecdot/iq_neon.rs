//! NEON unpacking of the 256-weight IQ/TQ super-blocks to [`KBlock`] integers, the twin of
//! `iq_avx2.rs` (the dot product itself is the K-quant kernel, `neon::dot_kblock`). The grid
//! formats' words and sign bits are read by `dequant::iq_layout`, as the portable unpacker reads
//! them, and signed here 16 weights per instruction; IQ4_XS is a table lookup; TQ1_0 and TQ2_0
//! are digit extraction. The scales are the portable unpacker's ([`iq_block_scales`]).
#![cfg(target_arch = "aarch64")]

use super::unpack::{iq_block_scales, KBlock};
use crate::dequant::iq_grids::KVALUES_IQ4NL;
use crate::dequant::iq_layout::{for_each_group, is_grid, is_iq1, per_iq_format, TQ1_POW3};
use crate::format::WeightFormat;
use std::arch::aarch64::*;

/// Bit `j % 8` in byte `j`: `vtstq_u8` against a sign byte repeated gives 0xFF where weight
/// `j`'s sign bit is set.
const SIGN_BITS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];

/// Unpacks super-block `b` of `format` into `out` with NEON when `format` is a 256-weight
/// IQ/TQ format (returns `true`); other formats: `false`, `out` untouched.
///
/// # Safety
/// `b` must be one whole super-block of `format` (NEON is part of every aarch64 CPU).
#[target_feature(enable = "neon")]
pub unsafe fn unpack_iq(format: WeightFormat, b: &[u8], out: &mut KBlock) -> bool {
    let dst = out.q.as_mut_ptr();
    // SAFETY (all arms): `b` is one whole super-block of `format`; `out.q` holds 256 bytes.
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
/// `b` one whole super-block of the grid `format`; `dst` 256 writable bytes.
#[target_feature(enable = "neon")]
unsafe fn grid_quants(format: WeightFormat, b: &[u8], dst: *mut i8) {
    let iq1 = is_iq1(format);
    // SAFETY: a 16-byte constant.
    let bits = unsafe { vld1q_u8(SIGN_BITS.as_ptr()) };
    for_each_group(format, b, |k, g| {
        let s = g.bits.to_le_bytes();
        for h in 0..2 {
            // SAFETY: register arithmetic; the store writes bytes 32 k + 16 h .. + 16 of the 256
            // at `dst`.
            unsafe {
                let (lo, hi) = (vcreate_u64(g.grid[2 * h]), vcreate_u64(g.grid[2 * h + 1]));
                let mag = vreinterpretq_s8_u64(vcombine_u64(lo, hi));
                let sb = vcombine_u8(vdup_n_u8(s[2 * h]), vdup_n_u8(s[2 * h + 1]));
                let neg = vreinterpretq_s8_u8(vtstq_u8(sb, bits));
                let q = if iq1 {
                    vaddq_s8(vshlq_n_s8::<3>(mag), vorrq_s8(neg, vdupq_n_s8(1)))
                } else {
                    vsubq_s8(veorq_s8(mag, neg), neg)
                };
                vst1q_s8(dst.add(32 * k + 16 * h), q);
            }
        }
    });
}

/// IQ4_XS: 32 nibbles per group through the IQ4_NL table.
///
/// # Safety
/// `b` one whole IQ4_XS super-block (136 bytes); `dst` 256 writable bytes.
#[target_feature(enable = "neon")]
unsafe fn iq4_xs_quants(b: &[u8], dst: *mut i8) {
    // SAFETY: the 16 bytes of group ib start at 8 + 16 ib ≤ 120 < 136; the stores write
    // bytes 32 ib .. 32 ib + 32 of the 256.
    unsafe {
        let table = vld1q_s8(KVALUES_IQ4NL.as_ptr());
        let m4 = vdupq_n_u8(0x0F);
        for ib in 0..8 {
            let v = vld1q_u8(b.as_ptr().add(8 + 16 * ib));
            vst1q_s8(dst.add(32 * ib), vqtbl1q_s8(table, vandq_u8(v, m4)));
            vst1q_s8(dst.add(32 * ib + 16), vqtbl1q_s8(table, vshrq_n_u8::<4>(v)));
        }
    }
}

/// TQ1_0: the base-3 digits of [`TQ1_POW3`]'s layout, minus 1, as the portable unpacker.
///
/// # Safety
/// `b` one whole TQ1_0 super-block (54 bytes); `dst` 256 writable bytes.
#[target_feature(enable = "neon")]
unsafe fn tq1_quants(b: &[u8], dst: *mut i8) {
    let p = b.as_ptr();
    // SAFETY: the loads read bytes 0..48 of the 54 (and a 16-byte local); the stores write
    // 16 bytes each at offsets up to 240 of the 256.
    unsafe {
        let runs = [vld1q_u8(p), vld1q_u8(p.add(16)), vld1q_u8(p.add(32))];
        for (d, &pow) in TQ1_POW3.iter().enumerate() {
            let pow = vdupq_n_u8(pow);
            vst1q_s8(dst.add(32 * d), ternary(runs[0], pow));
            vst1q_s8(dst.add(32 * d + 16), ternary(runs[1], pow));
            vst1q_s8(dst.add(160 + 16 * d), ternary(runs[2], pow));
        }
        // The four digits of bytes 48..52: each byte 4 times, digit d in bytes 4 d .. 4 d + 4.
        let qh = vreinterpretq_u8_u32(vdupq_n_u32(u32::from_le_bytes([
            b[48], b[49], b[50], b[51],
        ])));
        let pows: [u8; 16] = std::array::from_fn(|i| TQ1_POW3[i / 4]);
        vst1q_s8(dst.add(240), ternary(qh, vld1q_u8(pows.as_ptr())));
    }
}

/// The base-3 digit picked by `pow` (per byte) of each byte of `v`, minus 1: `v · pow mod 256`
/// then `-1 + [≥ 86] + [≥ 171]`, which is `((x · 3) >> 8) - 1`.
#[inline]
#[target_feature(enable = "neon")]
fn ternary(v: uint8x16_t, pow: uint8x16_t) -> int8x16_t {
    let x = vmulq_u8(v, pow);
    // The masks are −1 where true.
    let m1 = vreinterpretq_s8_u8(vcgeq_u8(x, vdupq_n_u8(86)));
    let m2 = vreinterpretq_s8_u8(vcgeq_u8(x, vdupq_n_u8(171)));
    vsubq_s8(vsubq_s8(vdupq_n_s8(-1), m1), m2)
}

/// TQ2_0: four 2-bit fields per byte, minus 1; byte `m` of half `c` gives weights
/// `128 c + 32 s + m`, `s` the field.
///
/// # Safety
/// `b` one whole TQ2_0 super-block (66 bytes); `dst` 256 writable bytes.
#[target_feature(enable = "neon")]
unsafe fn tq2_quants(b: &[u8], dst: *mut i8) {
    // SAFETY: the loads read bytes 0..64 of the 66; the stores write 16 bytes each at offsets
    // up to 240 of the 256.
    unsafe {
        let (m3, one) = (vdupq_n_u8(3), vdupq_n_s8(1));
        for c in 0..2 {
            for h in 0..2 {
                let v = vld1q_u8(b.as_ptr().add(32 * c + 16 * h));
                let fields = [
                    v,
                    vshrq_n_u8::<2>(v),
                    vshrq_n_u8::<4>(v),
                    vshrq_n_u8::<6>(v),
                ];
                for (s, f) in fields.into_iter().enumerate() {
                    let q = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(f, m3)), one);
                    vst1q_s8(dst.add(128 * c + 32 * s + 16 * h), q);
                }
            }
        }
    }
}
