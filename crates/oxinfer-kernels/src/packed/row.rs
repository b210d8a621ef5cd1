//! One row of a packed matrix back to f32, for a table that is both a packed output head and
//! an embedding looked up row by row (tied embeddings): the lookup reads the packed copy, so
//! the original mapped bytes can stay out of memory.
//!
//! Each formula repeats the row-major dequantizer's float operations in the same order
//! (`crate::dequant::{legacy, kquants}`), so both give the same bits.

use super::pack::table32;
use super::pack::{packed_block_bytes, q2k, q3k, q4k, q5k, q6k, qh_offset, qs_offset};
use super::pack::{t4, t4_table};
use super::scalar::{low2, nibble, q3k_quant};
use crate::dequant::f16_at;
use crate::dequant::iq::{code_of_int_scale, e8m0_half, float_scale};
use crate::format::WeightFormat;

/// Dequantizes lane `r` (< 8) of the packed group `g` (`nb` blocks of `format`) into `out`
/// (`nb * block_size` values).
pub(crate) fn dequant_lane(format: WeightFormat, g: &[u8], r: usize, out: &mut [f32]) {
    let pb = packed_block_bytes(format).expect("format has a packed layout");
    let bs = format.block_size();
    for (blk, y) in g.chunks_exact(pb).zip(out.chunks_exact_mut(bs)) {
        match format {
            WeightFormat::Q4K => lane_q4k(blk, r, y, false),
            WeightFormat::Q5K => lane_q4k(blk, r, y, true),
            WeightFormat::Q6K => lane_q6k(blk, r, y),
            WeightFormat::Q3K => lane_q3k(blk, r, y),
            WeightFormat::Q2K => lane_q2k(blk, r, y),
            f if t4_table(f).is_some() => lane_t4(format, blk, r, y),
            _ => lane32(format, blk, r, y),
        }
    }
}

/// One 32-weight block of a legacy format.
fn lane32(format: WeightFormat, blk: &[u8], r: usize, y: &mut [f32]) {
    let d = if format == WeightFormat::MXFP4 {
        e8m0_half(blk[r])
    } else {
        f16_at(blk, 2 * r)
    };
    let qs = &blk[qs_offset(format)..];
    for (i, v) in y.iter_mut().enumerate() {
        *v = match format {
            WeightFormat::Q8_0 => (qs[32 * (i / 4) + 4 * r + i % 4] as i8) as f32 * d,
            WeightFormat::Q4_0 => (nibble(qs, r, i) - 8) as f32 * d,
            WeightFormat::Q4_1 => nibble(qs, r, i) as f32 * d + f16_at(blk, 16 + 2 * r),
            WeightFormat::Q5_0 | WeightFormat::Q5_1 => {
                let hb = blk[qh_offset(format) + 4 * r + i % 4];
                let q = nibble(qs, r, i) | i32::from((hb >> (i / 4)) & 1) << 4;
                if format == WeightFormat::Q5_0 {
                    (q - 16) as f32 * d
                } else {
                    q as f32 * d + f16_at(blk, 16 + 2 * r)
                }
            }
            WeightFormat::IQ4_NL | WeightFormat::MXFP4 => {
                let table = table32(format).expect("a table format");
                d * f32::from(table[nibble(qs, r, i) as usize])
            }
            _ => unreachable!("not a packed 32-weight format: {format}"),
        };
    }
}

/// One Q4_K (Q5_K with `five`) super-block: `(d * sc) * q - dmin * m` per 32-weight
/// sub-block.
fn lane_q4k(blk: &[u8], r: usize, y: &mut [f32], five: bool) {
    let d = f16_at(blk, 2 * r);
    let dmin = f16_at(blk, q4k::DMIN + 2 * r);
    for (s, ys) in y.chunks_exact_mut(32).enumerate() {
        let d1 = d * f32::from(blk[q4k::SC + 8 * s + r]);
        let m1 = dmin * f32::from(blk[q4k::MIN + 16 * (s / 2) + 2 * r + s % 2]);
        let qs = &blk[if five { q5k::qs(s) } else { q4k::QS + 128 * s }..];
        for (i, v) in ys.iter_mut().enumerate() {
            let mut q = nibble(qs, r, i);
            if five {
                let hb = blk[q5k::qh(s) + 4 * r + i % 4];
                q |= i32::from((hb >> (i / 4)) & 1) << 4;
            }
            *v = d1 * q as f32 - m1;
        }
    }
}

/// One Q6_K super-block: `(d * sc) * (q - 32)` per 16-weight group.
fn lane_q6k(blk: &[u8], r: usize, y: &mut [f32]) {
    let d = f16_at(blk, 2 * r);
    for (s, ys) in y.chunks_exact_mut(32).enumerate() {
        let ql = &blk[q6k::ql(s)..];
        let qh = &blk[q6k::qh(s)..];
        for (h, yh) in ys.chunks_exact_mut(16).enumerate() {
            let ds = d * f32::from(blk[q6k::SC + 16 * s + 2 * r + h] as i8);
            for (i, v) in yh.iter_mut().enumerate() {
                let (k, b) = (i / 4, i % 4);
                let hi = (qh[32 * h + 4 * r + b] >> (2 * k)) & 3;
                let q = nibble(ql, r, 16 * h + i) | i32::from(hi) << 4;
                *v = ds * (q - 32) as f32;
            }
        }
    }
}

/// One Q3_K super-block: `(d * (sc - 32)) * (q - 4)` per 16-weight group, the row-major
/// dequantizer's order.
fn lane_q3k(blk: &[u8], r: usize, y: &mut [f32]) {
    let d = f16_at(blk, 2 * r);
    for (s, ys) in y.chunks_exact_mut(32).enumerate() {
        for (h, yh) in ys.chunks_exact_mut(16).enumerate() {
            let dl = d * f32::from(blk[q3k::SC + 16 * s + 2 * r + h] as i8);
            for (i, v) in yh.iter_mut().enumerate() {
                *v = dl * (q3k_quant(blk, s, r, 16 * h + i) - 4) as f32;
            }
        }
    }
}

/// One Q2_K super-block: `(d * sc) * q - dmin * m` per 16-weight group, the row-major
/// dequantizer's order.
fn lane_q2k(blk: &[u8], r: usize, y: &mut [f32]) {
    let (d, dmin) = (f16_at(blk, 2 * r), f16_at(blk, q2k::DMIN + 2 * r));
    for (s, ys) in y.chunks_exact_mut(32).enumerate() {
        for (h, yh) in ys.chunks_exact_mut(16).enumerate() {
            let scm = blk[q2k::SCM + 16 * s + 2 * r + h];
            let dl = d * (scm & 0x0F) as f32;
            let ml = dmin * (scm >> 4) as f32;
            for (i, v) in yh.iter_mut().enumerate() {
                *v = dl * low2(&blk[q2k::ql(s)..], r, 16 * h + i) as f32 - ml;
            }
        }
    }
}

/// One super-block of a 256-weight table format: `scale(group) * q` as `iq::dequantize`
/// computes it (IQ1_S / IQ1_M quants are eighths).
fn lane_t4(format: WeightFormat, blk: &[u8], r: usize, y: &mut [f32]) {
    let (table, _) = t4_table(format).expect("a table format");
    let eighths = matches!(format, WeightFormat::IQ1_S | WeightFormat::IQ1_M);
    let d = f16_at(blk, 2 * r);
    for (g, yg) in y.chunks_exact_mut(16).enumerate() {
        let sc = i16::from(blk[t4::SC + 8 * g + r] as i8);
        let db = float_scale(format, d, code_of_int_scale(format, sc));
        let qs = &blk[t4::qs(g / 2)..];
        for (i, v) in yg.iter_mut().enumerate() {
            let q = f32::from(table[nibble(qs, r, 16 * (g % 2) + i) as usize]);
            *v = db * if eighths { q * 0.125 } else { q };
        }
    }
}
