//! Scalar twins of the dot-product kernels: the same integer arithmetic as the SIMD versions,
//! written plainly.

use super::unpack::KBlock;
use crate::dequant::f16_at;
use crate::dequant::iq::e8m0_half;
use crate::dequant::{KVALUES_IQ4NL, KVALUES_MXFP4};
use crate::format::WeightFormat;
use crate::q8::{BlockQ8, BlockQ8K};

pub fn dot_float(format: WeightFormat, w: &[u8], x: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    match format {
        WeightFormat::F32 => {
            for (i, (c, xv)) in w.chunks_exact(4).zip(x).enumerate() {
                acc[i % 8] += f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * xv;
            }
        }
        WeightFormat::F16 => {
            for (i, (c, xv)) in w.chunks_exact(2).zip(x).enumerate() {
                acc[i % 8] += half::f16::from_le_bytes([c[0], c[1]]).to_f32() * xv;
            }
        }
        WeightFormat::BF16 => {
            for (i, (c, xv)) in w.chunks_exact(2).zip(x).enumerate() {
                acc[i % 8] += half::bf16::from_le_bytes([c[0], c[1]]).to_f32() * xv;
            }
        }
        other => unreachable!("{other} is not a float format"),
    }
    acc.iter().sum()
}

/// Quants of a 32-weight block as integers (`q`), plus the float scale and min: the weight is
/// `d * q + m` (`m = 0` for the symmetric formats).
fn legacy_block(format: WeightFormat, b: &[u8], q: &mut [i32; 32]) -> (f32, f32) {
    match format {
        WeightFormat::Q4_0 | WeightFormat::Q4_1 => {
            let (qs, off) = if format == WeightFormat::Q4_0 {
                (&b[2..18], 8)
            } else {
                (&b[4..20], 0)
            };
            for j in 0..16 {
                q[j] = i32::from(qs[j] & 0x0F) - off;
                q[j + 16] = i32::from(qs[j] >> 4) - off;
            }
            let m = if format == WeightFormat::Q4_1 {
                f16_at(b, 2)
            } else {
                0.0
            };
            (f16_at(b, 0), m)
        }
        WeightFormat::Q5_0 | WeightFormat::Q5_1 => {
            let (h, qs, off) = if format == WeightFormat::Q5_0 {
                (2, &b[6..22], 16)
            } else {
                (4, &b[8..24], 0)
            };
            let qh = u32::from_le_bytes([b[h], b[h + 1], b[h + 2], b[h + 3]]);
            for j in 0..16 {
                q[j] = (i32::from(qs[j] & 0x0F) | (((qh >> j) & 1) << 4) as i32) - off;
                q[j + 16] = (i32::from(qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4) as i32) - off;
            }
            let m = if format == WeightFormat::Q5_1 {
                f16_at(b, 2)
            } else {
                0.0
            };
            (f16_at(b, 0), m)
        }
        WeightFormat::Q8_0 => {
            for j in 0..32 {
                q[j] = i32::from(b[2 + j] as i8);
            }
            (f16_at(b, 0), 0.0)
        }
        WeightFormat::IQ4_NL | WeightFormat::MXFP4 => {
            let (table, qs, d) = if format == WeightFormat::IQ4_NL {
                (&KVALUES_IQ4NL, &b[2..18], f16_at(b, 0))
            } else {
                (&KVALUES_MXFP4, &b[1..17], e8m0_half(b[0]))
            };
            for j in 0..16 {
                q[j] = i32::from(table[(qs[j] & 15) as usize]);
                q[j + 16] = i32::from(table[(qs[j] >> 4) as usize]);
            }
            (d, 0.0)
        }
        other => unreachable!("{other} is not a 32-weight format"),
    }
}

pub fn dot_q8(format: WeightFormat, w: &[u8], x: &[BlockQ8]) -> f32 {
    let bb = format.block_bytes();
    let mut q = [0i32; 32];
    let mut sum = 0f32;
    for (b, y) in w.chunks_exact(bb).zip(x) {
        let (d, m) = legacy_block(format, b, &mut q);
        let sumi: i32 = q.iter().zip(&y.qs).map(|(&a, &b)| a * i32::from(b)).sum();
        sum += d * y.d * sumi as f32 + m * y.s;
    }
    sum
}

/// Split formats: the same integer sums as `dot_q8`, the scale read from the scales buffer.
pub fn dot_split(format: WeightFormat, w: &[u8], s: &[u8], x: &[BlockQ8]) -> f32 {
    let bb = format.block_bytes();
    let sb = format.scale_bytes();
    let mut q = [0i32; 32];
    let mut sum = 0f32;
    for ((b, sc), y) in w.chunks_exact(bb).zip(s.chunks_exact(sb)).zip(x) {
        let d = if format == WeightFormat::Q8 {
            for j in 0..32 {
                q[j] = i32::from(b[j] as i8);
            }
            f32::from_le_bytes([sc[0], sc[1], sc[2], sc[3]])
        } else {
            for j in 0..16 {
                q[j] = i32::from(b[j] & 0x0F) - 8;
                q[j + 16] = i32::from(b[j] >> 4) - 8;
            }
            f16_at(sc, 0)
        };
        let sumi: i32 = q.iter().zip(&y.qs).map(|(&a, &b)| a * i32::from(b)).sum();
        sum += d * y.d * sumi as f32;
    }
    sum
}

pub fn dot_kblock(kb: &KBlock, y: &BlockQ8K) -> f32 {
    let (mut sumi, mut summ) = (0i32, 0i32);
    for g in 0..16 {
        let s: i32 = (0..16)
            .map(|l| i32::from(kb.q[16 * g + l]) * i32::from(y.qs[16 * g + l]))
            .sum();
        sumi += i32::from(kb.sc[g]) * s;
        summ += i32::from(kb.m[g]) * i32::from(y.bsums[g]);
    }
    y.d * (kb.d * sumi as f32 - kb.dmin * summ as f32)
}

pub fn dot_q8k_row(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut sum = 0f32;
    for (b, y) in w.chunks_exact(292).zip(x) {
        let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let s: i32 = b[4..260]
            .iter()
            .zip(&y.qs)
            .map(|(&a, &b)| i32::from(a as i8) * i32::from(b))
            .sum();
        sum += d * y.d * s as f32;
    }
    sum
}
