//! K-quant super-blocks unpacked to integers: 256 quants, and for each group of 16 an integer
//! scale and min, so that weight `l` of group `g` is `d * sc[g] * q[l] - dmin * m[g]`.
#![allow(clippy::needless_range_loop)] // index arithmetic mirrors the block layouts

use crate::dequant::f16_at;
use crate::dequant::iq::{self, IqBlock};
use crate::dequant::iq_layout;
use crate::dequant::kquants::{q3_k_scales, scale_min_k4};
use crate::format::WeightFormat;

/// One K-quant super-block as integers.
#[derive(Clone, Debug)]
#[repr(C, align(32))]
pub struct KBlock {
    /// Quants, offsets already applied (signed for Q3_K and Q6_K).
    pub q: [i8; 256],
    /// Integer scale of each group of 16.
    pub sc: [i16; 16],
    /// Integer min of each group of 16 (zero for formats without one).
    pub m: [i16; 16],
    /// Factor of the scales.
    pub d: f32,
    /// Factor of the mins.
    pub dmin: f32,
}

impl Default for KBlock {
    fn default() -> Self {
        KBlock {
            q: [0; 256],
            sc: [0; 16],
            m: [0; 16],
            d: 0.0,
            dmin: 0.0,
        }
    }
}

/// Integer scales and factor of an IQ/TQ block with f16 scale `d` and scale codes `code` (one
/// per 16 weights; no mins).
#[inline(always)]
pub(super) fn iq_scales(format: WeightFormat, d: f32, code: &[u8; 16], out: &mut KBlock) {
    out.dmin = 0.0;
    out.m = [0; 16];
    // `int_scale` is affine in the code (2c + 1, c - 32 or 1): taken at 0 and 1, the loop is
    // one multiply-add per group (and vectorizes).
    let (sc0, unit) = iq::int_scale(format, d, 0);
    let step = iq::int_scale(format, d, 1).0 - sc0;
    out.d = unit;
    for g in 0..16 {
        out.sc[g] = sc0 + step * i16::from(code[g]);
    }
}

/// [`iq_scales`] of super-block `b` of a 256-weight IQ/TQ `format`: the integer scales and
/// factor the portable unpacker gives, for the SIMD unpackers (which unpack only the quants).
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code) // only the x86 and NEON quant unpackers call it
)]
#[inline(always)]
pub(super) fn iq_block_scales(format: WeightFormat, b: &[u8], out: &mut KBlock) {
    let (d, code) = iq_layout::scale_codes(format, b);
    iq_scales(format, d, &code, out);
}

/// Scales, mins and factors of Q4_K/Q5_K/Q6_K (the quants are unpacked elsewhere).
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code) // only the x86 and NEON quant unpackers call it
)]
pub(super) fn unpack_scales(format: WeightFormat, b: &[u8], out: &mut KBlock) {
    if format == WeightFormat::Q6K {
        out.d = f16_at(b, 208);
        out.dmin = 0.0;
        for g in 0..16 {
            out.sc[g] = i16::from(b[192 + g] as i8);
            out.m[g] = 0;
        }
        return;
    }
    out.d = f16_at(b, 0);
    out.dmin = f16_at(b, 2);
    let scales = &b[4..16];
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, scales);
        out.sc[2 * j] = i16::from(sc);
        out.sc[2 * j + 1] = i16::from(sc);
        out.m[2 * j] = i16::from(m);
        out.m[2 * j + 1] = i16::from(m);
    }
}

/// Unpacks one super-block `b` of a K-quant `format` (not Q8_K) or of a 256-weight IQ/TQ
/// format into `out` (portable code).
pub fn unpack_k(format: WeightFormat, b: &[u8], out: &mut KBlock) {
    match format {
        f if WeightFormat::IQ.contains(&f) => {
            let mut blk = IqBlock::default();
            iq::decode(f, b, &mut blk);
            out.q = blk.q;
            iq_scales(f, blk.d, &blk.code, out);
        }
        WeightFormat::Q2K => {
            let (scales, qs) = (&b[0..16], &b[16..80]);
            out.d = f16_at(b, 80);
            out.dmin = f16_at(b, 82);
            for g in 0..16 {
                out.sc[g] = i16::from(scales[g] & 0x0F);
                out.m[g] = i16::from(scales[g] >> 4);
            }
            for h in 0..2 {
                for s in 0..4 {
                    for l in 0..32 {
                        out.q[128 * h + 32 * s + l] = ((qs[32 * h + l] >> (2 * s)) & 3) as i8;
                    }
                }
            }
        }
        WeightFormat::Q3K => {
            let (hmask, qs) = (&b[0..32], &b[32..96]);
            let scales = q3_k_scales(&b[96..108]);
            out.d = f16_at(b, 108);
            out.dmin = 0.0;
            for g in 0..16 {
                out.sc[g] = i16::from(scales[g]);
                out.m[g] = 0;
            }
            for h in 0..2 {
                for s in 0..4 {
                    let bit = 1u8 << (4 * h + s);
                    for l in 0..32 {
                        let low = ((qs[32 * h + l] >> (2 * s)) & 3) as i8;
                        let off = if hmask[l] & bit != 0 { 0 } else { 4 };
                        out.q[128 * h + 32 * s + l] = low - off;
                    }
                }
            }
        }
        WeightFormat::Q4K | WeightFormat::Q5K => {
            out.d = f16_at(b, 0);
            out.dmin = f16_at(b, 2);
            let scales = &b[4..16];
            for j in 0..8 {
                let (sc, m) = scale_min_k4(j, scales);
                out.sc[2 * j] = i16::from(sc);
                out.sc[2 * j + 1] = i16::from(sc);
                out.m[2 * j] = i16::from(m);
                out.m[2 * j + 1] = i16::from(m);
            }
            if format == WeightFormat::Q4K {
                let qs = &b[16..144];
                for p in 0..4 {
                    for l in 0..32 {
                        out.q[64 * p + l] = (qs[32 * p + l] & 0x0F) as i8;
                        out.q[64 * p + 32 + l] = (qs[32 * p + l] >> 4) as i8;
                    }
                }
            } else {
                let (qh, qs) = (&b[16..48], &b[48..176]);
                for p in 0..4 {
                    let (u1, u2) = (1u8 << (2 * p), 2u8 << (2 * p));
                    for l in 0..32 {
                        let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
                        let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
                        out.q[64 * p + l] = ((qs[32 * p + l] & 0x0F) + h1) as i8;
                        out.q[64 * p + 32 + l] = ((qs[32 * p + l] >> 4) + h2) as i8;
                    }
                }
            }
        }
        WeightFormat::Q6K => {
            let (ql_all, qh_all, sc_all) = (&b[0..128], &b[128..192], &b[192..208]);
            out.d = f16_at(b, 208);
            out.dmin = 0.0;
            for g in 0..16 {
                out.sc[g] = i16::from(sc_all[g] as i8);
                out.m[g] = 0;
            }
            for h in 0..2 {
                let (ql, qh) = (&ql_all[64 * h..], &qh_all[32 * h..]);
                let q = &mut out.q[128 * h..128 * h + 128];
                for l in 0..32 {
                    q[l] = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i8 - 32;
                    q[l + 32] = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                    q[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                    q[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                }
            }
        }
        other => unreachable!("{other} is not an unpackable K-quant"),
    }
}
