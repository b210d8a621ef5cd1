//! Scalar twin of the packed kernels: reads the same interleaved layouts one lane at a time
//! and does the same integer sums and float operations in the same order as `avx2.rs`, so
//! the two agree bit for bit.

use super::pack::LANES;
use super::pack::{packed_block_bytes, q2k, q3k, q4k, q5k, q6k, qh_offset, qs_offset};
use super::pack::{t4, t4_table, table32};
use super::tiles::TILE_TOKENS;
use crate::dequant::f16_at;
use crate::dequant::iq::e8m0_half;
use crate::fast::Acts;
use crate::format::WeightFormat;
use crate::q8::{BlockQ8, BlockQ8K};

/// Quant `i` (0..32) of lane `r` from the four nibble chunks at `c`.
pub(crate) fn nibble(c: &[u8], r: usize, i: usize) -> i32 {
    let byte = c[32 * (i / 8) + 4 * r + i % 4];
    i32::from(if i % 8 < 4 { byte & 0x0F } else { byte >> 4 })
}

/// See `super::run_tile`.
pub(crate) fn tile(
    format: WeightFormat,
    g: &[u8],
    nb: usize,
    acts: &Acts,
    ti: usize,
    n: usize,
    tile: &mut [[f32; LANES]; TILE_TOKENS],
) {
    let pb = packed_block_bytes(format).expect("format has a packed layout");
    for (k, lanes) in tile.iter_mut().take(n).enumerate() {
        for (r, out) in lanes.iter_mut().enumerate() {
            *out = match acts {
                Acts::Q8(q) => lane32(format, g, pb, r, &q[(ti + k) * nb..(ti + k + 1) * nb]),
                Acts::Q8K(q) => {
                    let x = &q[(ti + k) * nb..(ti + k + 1) * nb];
                    if t4_table(format).is_some() {
                        lane_t4(format, g, r, x)
                    } else if format == WeightFormat::Q4K {
                        lane_q4k(g, r, x, false)
                    } else if format == WeightFormat::Q5K {
                        lane_q4k(g, r, x, true)
                    } else if format == WeightFormat::Q3K {
                        lane_q3k(g, r, x)
                    } else if format == WeightFormat::Q2K {
                        lane_q2k(g, r, x)
                    } else {
                        lane_q6k(g, r, x)
                    }
                }
                Acts::F32(_) => unreachable!("float formats are not packed"),
            };
        }
    }
}

/// Lane `r` of a 32-weight format's group `g` dotted with one token's blocks `x`.
fn lane32(format: WeightFormat, g: &[u8], pb: usize, r: usize, x: &[BlockQ8]) -> f32 {
    let mut acc = 0f32;
    let table = table32(format);
    for (blk, y) in g.chunks_exact(pb).zip(x) {
        let d = if format == WeightFormat::MXFP4 {
            e8m0_half(blk[r])
        } else {
            f16_at(blk, 2 * r)
        };
        let qs = &blk[qs_offset(format)..];
        let s: i32 = (0..32)
            .map(|i| {
                let q = match format {
                    WeightFormat::Q8_0 => i32::from(qs[32 * (i / 4) + 4 * r + i % 4] as i8),
                    WeightFormat::IQ4_NL | WeightFormat::MXFP4 => {
                        i32::from(table.expect("a table format")[nibble(qs, r, i) as usize])
                    }
                    WeightFormat::Q5_0 | WeightFormat::Q5_1 => {
                        let hb = blk[qh_offset(format) + 4 * r + i % 4];
                        nibble(qs, r, i) | i32::from((hb >> (i / 4)) & 1) << 4
                    }
                    _ => nibble(qs, r, i),
                };
                q * i32::from(y.qs[i])
            })
            .sum();
        acc = (d * y.d).mul_add(s as f32, acc);
        match format {
            WeightFormat::Q4_1 | WeightFormat::Q5_1 => {
                acc = f16_at(blk, 16 + 2 * r).mul_add(y.s, acc)
            }
            WeightFormat::Q4_0 => acc = (-(d * 8.0)).mul_add(y.s, acc),
            WeightFormat::Q5_0 => acc = (-(d * 16.0)).mul_add(y.s, acc),
            _ => {}
        }
    }
    acc
}

/// Lane `r` of a Q4_K group `g` (Q5_K with `five`) dotted with one token's super-blocks `x`.
fn lane_q4k(g: &[u8], r: usize, x: &[BlockQ8K], five: bool) -> f32 {
    let mut acc = 0f32;
    let bytes = if five { q5k::BYTES } else { q4k::BYTES };
    for (blk, y) in g.chunks_exact(bytes).zip(x) {
        let (mut sumi, mut summ) = (0i32, 0i32);
        for s in 0..8 {
            let qs = &blk[if five { q5k::qs(s) } else { q4k::QS + 128 * s }..];
            let part: i32 = (0..32)
                .map(|i| {
                    let mut q = nibble(qs, r, i);
                    if five {
                        let hb = blk[q5k::qh(s) + 4 * r + i % 4];
                        q |= i32::from((hb >> (i / 4)) & 1) << 4;
                    }
                    q * i32::from(y.qs[32 * s + i])
                })
                .sum();
            sumi += i32::from(blk[q4k::SC + 8 * s + r]) * part;
            let m = i32::from(blk[q4k::MIN + 16 * (s / 2) + 2 * r + s % 2]);
            summ += m * (i32::from(y.bsums[2 * s]) + i32::from(y.bsums[2 * s + 1]));
        }
        let d = f16_at(blk, 2 * r);
        let dmin = f16_at(blk, q4k::DMIN + 2 * r);
        acc = (d * y.d).mul_add(sumi as f32, acc);
        acc = (-(dmin * y.d)).mul_add(summ as f32, acc);
    }
    acc
}

/// Lane `r` of a Q6_K group `g` dotted with one token's super-blocks `x`.
fn lane_q6k(g: &[u8], r: usize, x: &[BlockQ8K]) -> f32 {
    let mut acc = 0f32;
    for (blk, y) in g.chunks_exact(q6k::BYTES).zip(x) {
        let mut sumi = 0i32;
        for s in 0..8 {
            let ql = &blk[q6k::ql(s)..];
            let qh = &blk[q6k::qh(s)..];
            for h in 0..2 {
                let sc = i32::from(blk[q6k::SC + 16 * s + 2 * r + h] as i8);
                let part: i32 = (0..16)
                    .map(|i| {
                        let (k, b) = (i / 4, i % 4);
                        let hi = (qh[32 * h + 4 * r + b] >> (2 * k)) & 3;
                        let q = nibble(ql, r, 16 * h + i) | i32::from(hi) << 4;
                        q * i32::from(y.qs[32 * s + 16 * h + i])
                    })
                    .sum();
                sumi += sc * (part - 32 * i32::from(y.bsums[2 * s + h]));
            }
        }
        acc = (f16_at(blk, 2 * r) * y.d).mul_add(sumi as f32, acc);
    }
    acc
}

/// Lane `r` of a Q3_K group `g` dotted with one token's super-blocks `x` (as [`lane_q6k`],
/// with 3-bit quants offset by 4).
fn lane_q3k(g: &[u8], r: usize, x: &[BlockQ8K]) -> f32 {
    let mut acc = 0f32;
    for (blk, y) in g.chunks_exact(q3k::BYTES).zip(x) {
        let mut sumi = 0i32;
        for s in 0..8 {
            for h in 0..2 {
                let sc = i32::from(blk[q3k::SC + 16 * s + 2 * r + h] as i8);
                let part: i32 = (0..16)
                    .map(|i| {
                        q3k_quant(blk, s, r, 16 * h + i) * i32::from(y.qs[32 * s + 16 * h + i])
                    })
                    .sum();
                sumi += sc * (part - 4 * i32::from(y.bsums[2 * s + h]));
            }
        }
        acc = (f16_at(blk, 2 * r) * y.d).mul_add(sumi as f32, acc);
    }
    acc
}

/// Unsigned quant `i` (0..32, value 0..7) of lane `r` in sub-block `s` of a packed Q3_K block.
pub(crate) fn q3k_quant(blk: &[u8], s: usize, r: usize, i: usize) -> i32 {
    let (h, k, b) = (i / 16, i % 16 / 4, i % 4);
    let high = (blk[q3k::qh(s) + 4 * r + b] >> (4 * h + k)) & 1;
    low2(&blk[q3k::ql(s)..], r, i) | i32::from(high) << 2
}

/// The 2-bit value of quant `i` (0..32) of lane `r` in a pair of 2-bit planes at `planes`
/// (`pack::put_low_planes`' layout).
pub(crate) fn low2(planes: &[u8], r: usize, i: usize) -> i32 {
    let (h, k, b) = (i / 16, i % 16 / 4, i % 4);
    i32::from((planes[32 * h + 4 * r + b] >> (2 * k)) & 3)
}

/// Lane `r` of a Q2_K group `g` dotted with one token's super-blocks `x`: per group of 16,
/// `sc · Σ q x`, and the mins `m · bsums` apart (as [`lane_q4k`] per 32).
fn lane_q2k(g: &[u8], r: usize, x: &[BlockQ8K]) -> f32 {
    let mut acc = 0f32;
    for (blk, y) in g.chunks_exact(q2k::BYTES).zip(x) {
        let (mut sumi, mut summ) = (0i32, 0i32);
        for s in 0..8 {
            let planes = &blk[q2k::ql(s)..];
            for h in 0..2 {
                let scm = blk[q2k::SCM + 16 * s + 2 * r + h];
                let part: i32 = (0..16)
                    .map(|i| low2(planes, r, 16 * h + i) * i32::from(y.qs[32 * s + 16 * h + i]))
                    .sum();
                sumi += i32::from(scm & 0x0F) * part;
                summ += i32::from(scm >> 4) * i32::from(y.bsums[2 * s + h]);
            }
        }
        acc = (f16_at(blk, 2 * r) * y.d).mul_add(sumi as f32, acc);
        acc = (-(f16_at(blk, q2k::DMIN + 2 * r) * y.d)).mul_add(summ as f32, acc);
    }
    acc
}

/// Lane `r` of a 256-weight table format's group `g` dotted with one token's super-blocks
/// `x`: per group of 16, the integer scale times Σ table value × activation.
fn lane_t4(format: WeightFormat, g: &[u8], r: usize, x: &[BlockQ8K]) -> f32 {
    let (table, unit) = t4_table(format).expect("a table format");
    let mut acc = 0f32;
    for (blk, y) in g.chunks_exact(t4::BYTES).zip(x) {
        let mut sumi = 0i32;
        for grp in 0..16 {
            let qs = &blk[t4::qs(grp / 2)..];
            let part: i32 = (0..16)
                .map(|i| {
                    let q = i32::from(table[nibble(qs, r, 16 * (grp % 2) + i) as usize]);
                    q * i32::from(y.qs[16 * grp + i])
                })
                .sum();
            sumi += i32::from(blk[t4::SC + 8 * grp + r] as i8) * part;
        }
        acc = ((f16_at(blk, 2 * r) * unit) * y.d).mul_add(sumi as f32, acc);
    }
    acc
}
