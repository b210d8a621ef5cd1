//! Row-major GGUF blocks → the interleaved layouts described in `mod.rs`.
#![allow(clippy::needless_range_loop)] // index arithmetic mirrors the block layouts

use crate::dequant::iq::{self, IqBlock};
use crate::dequant::{KVALUES_IQ4NL, KVALUES_MXFP4};
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

/// Byte offsets inside a packed Q3_K block: the lanes' f16 `d`, the Q6_K scale layout (`SC`:
/// per sub-block `s`, lane `r`'s `(sc[2s], sc[2s + 1])` as i8 at `SC + 16 s + 2 r`, the offset
/// 32 already taken off), then per 32-weight sub-block its 2-bit low planes (64 B) and 1-bit
/// high plane (32 B) side by side: 114 bytes per row against the file's 110.
///
/// Quants are unsigned `u = q + 4` (0..7). In low plane `h` (16-weight half `h` of the
/// sub-block), byte `4 r + b` holds at bits `2k, 2k + 1` the low bits of lane `r`'s quant
/// `16 h + 4 k + b`; in the high plane, byte `4 r + b` holds at bit `4 h + k` that quant's
/// third bit: register `(L_h >> 2k) & 3 | high` is the quants `16 h + 4 k ..` of every lane, as
/// Q6_K's nibble registers are.
pub(crate) mod q3k {
    pub const SC: usize = 16;
    pub const QL: usize = 144;
    pub const BYTES: usize = QL + 8 * 96;
    /// Low planes of sub-block `s` (two of 32 bytes).
    pub const fn ql(s: usize) -> usize {
        QL + 96 * s
    }
    /// High plane of sub-block `s`.
    pub const fn qh(s: usize) -> usize {
        QL + 96 * s + 64
    }
}

/// Byte offsets inside a packed Q2_K block: the lanes' f16 `d` and `dmin`, then per sub-block
/// `s` lane `r`'s scale bytes of groups `2s`, `2s + 1` as the file has them (`sc | m << 4`) at
/// `SCM + 16 s + 2 r`, then per sub-block two 32-byte planes of 2-bit quants laid out as
/// [`q3k`]'s low planes: 84 bytes per row-block, the file's size.
pub(crate) mod q2k {
    pub const DMIN: usize = 16;
    pub const SCM: usize = 32;
    pub const QL: usize = 160;
    pub const BYTES: usize = QL + 8 * 64;
    /// 2-bit planes of sub-block `s` (two of 32 bytes).
    pub const fn ql(s: usize) -> usize {
        QL + 64 * s
    }
}

/// Byte offsets inside a packed block of a 256-weight table format (IQ2/IQ3/IQ1/IQ4_XS/TQ):
/// the eight lanes' f16 `d`, their integer scales per group of 16 weights, then per 32-weight
/// sub-block four nibble chunks of 4-bit indices into the format's [`t4_table`].
pub(crate) mod t4 {
    /// Integer scales: `sc: [i8; 16 groups][8 lanes]`.
    pub const SC: usize = 16;
    /// Nibble chunks of sub-block 0.
    pub const QS: usize = 144;
    /// Bytes of one packed block.
    pub const BYTES: usize = QS + 8 * 128;
    /// Nibble chunks of sub-block `s`.
    pub const fn qs(s: usize) -> usize {
        QS + 128 * s
    }
}

/// Signed values of the 2-bit grids (IQ2_XXS, IQ2_XS, IQ2_S: magnitudes 8, 25, 43).
const TABLE_IQ2: [i8; 16] = [0, 8, 25, 43, -8, -25, -43, 0, 0, 0, 0, 0, 0, 0, 0, 0];
/// IQ3_XXS: grid magnitudes 4, 12, …, 52, 62 and their negatives.
const TABLE_IQ3XXS: [i8; 16] = [
    4, 12, 20, 28, 36, 44, 52, 62, -4, -12, -20, -28, -36, -44, -52, -62,
];
/// IQ3_S: odd grid magnitudes 1 ..= 15 and their negatives.
const TABLE_IQ3S: [i8; 16] = [1, 3, 5, 7, 9, 11, 13, 15, -1, -3, -5, -7, -9, -11, -13, -15];
/// IQ1_S / IQ1_M: `8 g ± 1` for grid values `g` in {-1, 0, 1}.
const TABLE_IQ1: [i8; 16] = [0, 1, -1, 7, -7, 9, -9, 0, 0, 0, 0, 0, 0, 0, 0, 0];
/// TQ1_0 / TQ2_0: ternary (TQ2_0 codes also reach 2).
const TABLE_TQ: [i8; 16] = [0, 1, -1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

/// The 16 signed quant values of a 256-weight table format's packed indices and the factor of
/// its f16 `d` that gives the float unit (weight = `d * unit * sc[group] * table[index]`,
/// as [`iq::int_scale`]); `None` for other formats.
pub(crate) fn t4_table(format: WeightFormat) -> Option<(&'static [i8; 16], f32)> {
    use WeightFormat::*;
    Some(match format {
        IQ4_XS => (&KVALUES_IQ4NL, 1.0),
        IQ2_XXS | IQ2_XS | IQ2_S => (&TABLE_IQ2, 0.125),
        IQ3_XXS => (&TABLE_IQ3XXS, 0.25),
        IQ3_S => (&TABLE_IQ3S, 1.0),
        IQ1_S | IQ1_M => (&TABLE_IQ1, 0.125),
        TQ1_0 | TQ2_0 => (&TABLE_TQ, 1.0),
        _ => return None,
    })
}

/// The 16-entry value table of a 32-weight table format (IQ4_NL, MXFP4), `None` otherwise.
pub(crate) fn table32(format: WeightFormat) -> Option<&'static [i8; 16]> {
    match format {
        WeightFormat::IQ4_NL => Some(&KVALUES_IQ4NL),
        WeightFormat::MXFP4 => Some(&KVALUES_MXFP4),
        _ => None,
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
        WeightFormat::Q3K => Some(q3k::BYTES),
        WeightFormat::Q2K => Some(q2k::BYTES),
        WeightFormat::IQ4_NL => Some(144),
        WeightFormat::MXFP4 => Some(136),
        f if t4_table(f).is_some() => Some(t4::BYTES),
        _ => None,
    }
}

/// Offset of the quants (nibble chunks, or `W_0` for Q8_0) in a packed block of a 32-weight
/// format.
pub(crate) const fn qs_offset(format: WeightFormat) -> usize {
    match format {
        WeightFormat::MXFP4 => 8,
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

/// Lane `r`'s two 2-bit planes of one 32-quant sub-block `q` (values below 4 after masking):
/// plane `h` byte `4 r + b` holds at bits `2k, 2k + 1` the low bits of quant `16 h + 4 k + b`.
fn put_low_planes(out: &mut [u8], r: usize, q: &[u8; 32]) {
    for h in 0..2 {
        for b in 0..4 {
            let mut v = 0u8;
            for k in 0..4 {
                v |= (q[16 * h + 4 * k + b] & 3) << (2 * k);
            }
            out[32 * h + 4 * r + b] = v;
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
    let mut ib = IqBlock::default();
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
                WeightFormat::IQ4_NL | WeightFormat::MXFP4 => {
                    // IQ4_NL: f16 d as Q4_0's; MXFP4: the E8M0 byte, one per lane.
                    let qs = if format == WeightFormat::IQ4_NL {
                        o[2 * r..2 * r + 2].copy_from_slice(&b[0..2]);
                        &b[2..18]
                    } else {
                        o[r] = b[0];
                        &b[1..17]
                    };
                    let q: [u8; 32] = std::array::from_fn(|j| qs[j % 16] >> (4 * (j / 16)) & 15);
                    put_nibbles(&mut o[qs_offset(format)..], r, &q);
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
                WeightFormat::Q3K => {
                    unpack_k(format, b, &mut kb);
                    o[2 * r..2 * r + 2].copy_from_slice(&b[108..110]);
                    for s in 0..8 {
                        for e in 0..2 {
                            o[q3k::SC + 16 * s + 2 * r + e] = kb.sc[2 * s + e] as i8 as u8;
                        }
                        // Unsigned 3-bit quants (the unpacker subtracted 4 where due).
                        let u: [u8; 32] = std::array::from_fn(|i| (kb.q[32 * s + i] + 4) as u8);
                        put_low_planes(&mut o[q3k::ql(s)..], r, &u);
                        for b4 in 0..4 {
                            let mut high = 0u8;
                            for h in 0..2 {
                                for k in 0..4 {
                                    high |= (u[16 * h + 4 * k + b4] >> 2) << (4 * h + k);
                                }
                            }
                            o[q3k::qh(s) + 4 * r + b4] = high;
                        }
                    }
                }
                WeightFormat::Q2K => {
                    unpack_k(format, b, &mut kb);
                    o[2 * r..2 * r + 2].copy_from_slice(&b[80..82]);
                    o[q2k::DMIN + 2 * r..q2k::DMIN + 2 * r + 2].copy_from_slice(&b[82..84]);
                    for s in 0..8 {
                        // The file's scale bytes (groups in order), lane by lane.
                        o[q2k::SCM + 16 * s + 2 * r..q2k::SCM + 16 * s + 2 * r + 2]
                            .copy_from_slice(&b[2 * s..2 * s + 2]);
                        let u: [u8; 32] = std::array::from_fn(|i| kb.q[32 * s + i] as u8);
                        put_low_planes(&mut o[q2k::ql(s)..], r, &u);
                    }
                }
                f if t4_table(f).is_some() => pack_t4(f, b, r, o, &mut ib),
                other => unreachable!("{other} has no packed layout"),
            }
        }
    }
}

/// Lane `r` of packed block `o` from one super-block `b` of a 256-weight table format:
/// decoded to integers ([`iq::decode`]), each quant replaced by its index in the table.
fn pack_t4(format: WeightFormat, b: &[u8], r: usize, o: &mut [u8], blk: &mut IqBlock) {
    let (table, _) = t4_table(format).expect("a table format");
    iq::decode(format, b, blk);
    // d came from an f16 (IQ1_M assembles one from its scale bits): converting back is exact.
    o[2 * r..2 * r + 2].copy_from_slice(&half::f16::from_f32(blk.d).to_le_bytes());
    for g in 0..16 {
        let (sc, _) = iq::int_scale(format, blk.d, blk.code[g]);
        o[t4::SC + 8 * g + r] = sc as i8 as u8;
    }
    for s in 0..8 {
        let q: [u8; 32] = std::array::from_fn(|i| {
            let v = blk.q[32 * s + i];
            let at = table.iter().position(|&t| t == v);
            at.unwrap_or_else(|| unreachable!("{format} quant {v} outside its table")) as u8
        });
        put_nibbles(&mut o[t4::qs(s)..], r, &q);
    }
}
