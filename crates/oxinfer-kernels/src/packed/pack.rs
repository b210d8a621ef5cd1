//! Row-major GGUF blocks → the interleaved layouts described in `mod.rs`.
#![allow(clippy::needless_range_loop)] // index arithmetic mirrors the block layouts

use crate::format::WeightFormat;
use crate::matrix::WeightMatrix;
use crate::vecdot::{unpack_k, KBlock};

/// Rows interleaved in one packed group (one 32-bit SIMD lane each in a 256-bit register).
pub const LANES: usize = 8;

/// Byte offsets inside a packed Q4_K block.
pub(crate) mod q4k {
    pub const DMIN: usize = 16;
    pub const SC: usize = 32;
    pub const MIN: usize = 96;
    pub const QS: usize = 160;
    pub const BYTES: usize = 1184;
}

/// Byte offsets inside a packed Q5_K block: the Q4_K header (scales, mins), then per
/// 32-weight sub-block its nibbles (128 B) and fifth bits (32 B) side by side.
pub(crate) mod q5k {
    pub const BYTES: usize = super::q4k::BYTES + 8 * 32;
    /// Nibble chunks of sub-block `s`.
    pub const fn qs(s: usize) -> usize {
        super::q4k::QS + 160 * s
    }
    /// High-bit bytes of sub-block `s`.
    pub const fn qh(s: usize) -> usize {
        super::q4k::QS + 160 * s + 128
    }
}

/// Byte offsets inside a packed Q6_K block: each 32-weight sub-block's low nibbles (128 B)
/// and high bits (64 B) side by side, so a kernel reads one sequential stream.
pub(crate) mod q6k {
    pub const SC: usize = 16;
    pub const QL: usize = 144;
    pub const BYTES: usize = 1680;
    /// Low nibbles of sub-block `s`.
    pub const fn ql(s: usize) -> usize {
        QL + 192 * s
    }
    /// High bits of sub-block `s`.
    pub const fn qh(s: usize) -> usize {
        QL + 192 * s + 128
    }
}

/// Bytes of one packed block of `format` (eight rows), `None` for formats without a layout.
pub(crate) fn packed_block_bytes(format: WeightFormat) -> Option<usize> {
    match format {
        WeightFormat::Q4_0 => Some(144),
        WeightFormat::Q4_1 => Some(160),
        WeightFormat::Q8_0 => Some(272),
        WeightFormat::Q5_0 => Some(176),
        WeightFormat::Q5_1 => Some(192),
        WeightFormat::Q4K => Some(q4k::BYTES),
        WeightFormat::Q5K => Some(q5k::BYTES),
        WeightFormat::Q6K => Some(q6k::BYTES),
        _ => None,
    }
}

/// Offset of the quants (nibble chunks, or `W_0` for Q8_0) in a packed block of a 32-weight
/// format.
pub(crate) const fn qs_offset(format: WeightFormat) -> usize {
    match format {
        WeightFormat::Q4_1 => 32,
        WeightFormat::Q5_0 => 48,
        WeightFormat::Q5_1 => 64,
        _ => 16,
    }
}

/// Offset of the 32 high-bit bytes in a packed Q5_0 / Q5_1 block: byte `4r + b` holds, at bit
/// `j`, the fifth bit of quant `4j + b` of lane `r`.
pub(crate) const fn qh_offset(format: WeightFormat) -> usize {
    if matches!(format, WeightFormat::Q5_1) {
        32
    } else {
        16
    }
}

/// Writes 32 4-bit quants `q` of lane `r` into the four nibble chunks at `out`.
fn put_nibbles(out: &mut [u8], r: usize, q: &[u8]) {
    for c in 0..4 {
        for b in 0..4 {
            out[32 * c + 4 * r + b] = (q[8 * c + b] & 0x0F) | (q[8 * c + 4 + b] & 0x0F) << 4;
        }
    }
}

/// Packs row group `g` of `w` into `out` (zeroed, `nb * packed_block_bytes` long); lanes past
/// the last row stay zero.
pub(crate) fn pack_group(w: &WeightMatrix, g: usize, out: &mut [u8]) {
    let format = w.format;
    let pb = packed_block_bytes(format).expect("format has a packed layout");
    let bb = format.block_bytes();
    let nb = w.cols / format.block_size();
    let mut kb = KBlock::default();
    for r in 0..LANES {
        let row = g * LANES + r;
        if row >= w.rows {
            break;
        }
        let src = w.row(row);
        for i in 0..nb {
            let b = &src[i * bb..(i + 1) * bb];
            let o = &mut out[i * pb..(i + 1) * pb];
            match format {
                WeightFormat::Q4_0 | WeightFormat::Q4_1 => {
                    let (qs, q0) = if format == WeightFormat::Q4_0 {
                        (&b[2..18], 16)
                    } else {
                        o[16 + 2 * r..18 + 2 * r].copy_from_slice(&b[2..4]);
                        (&b[4..20], 32)
                    };
                    o[2 * r..2 * r + 2].copy_from_slice(&b[0..2]);
                    let mut q = [0u8; 32];
                    for j in 0..16 {
                        q[j] = qs[j] & 0x0F;
                        q[j + 16] = qs[j] >> 4;
                    }
                    put_nibbles(&mut o[q0..], r, &q);
                }
                WeightFormat::Q5_0 | WeightFormat::Q5_1 => {
                    let (h, q0) = if format == WeightFormat::Q5_0 {
                        (2, 6)
                    } else {
                        o[16 + 2 * r..18 + 2 * r].copy_from_slice(&b[2..4]);
                        (4, 8)
                    };
                    o[2 * r..2 * r + 2].copy_from_slice(&b[0..2]);
                    let qh = u32::from_le_bytes([b[h], b[h + 1], b[h + 2], b[h + 3]]);
                    let mut q = [0u8; 32];
                    for j in 0..16 {
                        q[j] = (b[q0 + j] & 0x0F) | (((qh >> j) & 1) << 4) as u8;
                        q[j + 16] = (b[q0 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4) as u8;
                    }
                    put_nibbles(&mut o[qs_offset(format)..], r, &q);
                    let qho = qh_offset(format);
                    for b4 in 0..4 {
                        let mut v = 0u8;
                        for j in 0..8 {
                            v |= (q[4 * j + b4] >> 4) << j;
                        }
                        o[qho + 4 * r + b4] = v;
                    }
                }
                WeightFormat::Q8_0 => {
                    o[2 * r..2 * r + 2].copy_from_slice(&b[0..2]);
                    for j in 0..8 {
                        o[16 + 32 * j + 4 * r..16 + 32 * j + 4 * r + 4]
                            .copy_from_slice(&b[2 + 4 * j..6 + 4 * j]);
                    }
                }
                WeightFormat::Q4K | WeightFormat::Q5K => {
                    unpack_k(format, b, &mut kb);
                    o[2 * r..2 * r + 2].copy_from_slice(&b[0..2]);
                    o[q4k::DMIN + 2 * r..q4k::DMIN + 2 * r + 2].copy_from_slice(&b[2..4]);
                    for s in 0..8 {
                        o[q4k::SC + 8 * s + r] = kb.sc[2 * s] as u8;
                        o[q4k::MIN + 16 * (s / 2) + 2 * r + s % 2] = kb.m[2 * s] as u8;
                        let mut q = [0u8; 32];
                        for (d, &v) in q.iter_mut().zip(&kb.q[32 * s..32 * s + 32]) {
                            *d = v as u8;
                        }
                        let at = if format == WeightFormat::Q5K {
                            q5k::qs(s)
                        } else {
                            q4k::QS + 128 * s
                        };
                        put_nibbles(&mut o[at..], r, &q);
                        if format == WeightFormat::Q5K {
                            for b4 in 0..4 {
                                let mut v = 0u8;
                                for j in 0..8 {
                                    v |= ((q[4 * j + b4] >> 4) & 1) << j;
                                }
                                o[q5k::qh(s) + 4 * r + b4] = v;
                            }
                        }
                    }
                }
                WeightFormat::Q6K => {
                    unpack_k(format, b, &mut kb);
                    o[2 * r..2 * r + 2].copy_from_slice(&b[208..210]);
                    for s in 0..8 {
                        for e in 0..2 {
                            o[q6k::SC + 16 * s + 2 * r + e] = kb.sc[2 * s + e] as i8 as u8;
                        }
                        // Unsigned 6-bit quants (the unpacker subtracted 32).
                        let mut u = [0u8; 32];
                        for (d, &v) in u.iter_mut().zip(&kb.q[32 * s..32 * s + 32]) {
                            *d = (v + 32) as u8;
                        }
                        put_nibbles(&mut o[q6k::ql(s)..], r, &u);
                        for h in 0..2 {
                            for b4 in 0..4 {
                                let mut v = 0u8;
                                for k in 0..4 {
                                    v |= (u[16 * h + 4 * k + b4] >> 4) << (2 * k);
                                }
                                o[q6k::qh(s) + 32 * h + 4 * r + b4] = v;
                            }
                        }
                    }
                }
                other => unreachable!("{other} has no packed layout"),
            }
        }
    }
}
