//! The table-lookup (IQ*), ternary (TQ*) and FP4 (MXFP4) formats.
//!
//! Every 256-weight type decodes first to integers ([`IqBlock`]: signed quants and raw scale
//! codes), shared with the matmul kernels (`vecdot::unpack`); the float values then follow the
//! `gguf` package's `dequantize_blocks` (gguf/quants.py) operation for operation, so they match
//! it bit for bit. The grids are in the generated [`super::iq_grids`].
#![allow(clippy::needless_range_loop)] // index arithmetic mirrors the block layouts

use super::float::f16_at;
use super::iq_grids::*;
use crate::format::WeightFormat;

/// One 256-weight IQ/TQ super-block as integers: weight `i` is `scale(code[i / 16]) * q[i]`
/// times the format's unit (see [`IqBlock::group_factor`] and [`int_scale`]).
#[derive(Clone, Debug)]
pub(crate) struct IqBlock {
    /// Signed quants, signs applied. IQ1_S/IQ1_M: 8 × (grid value ± 1/8), i.e. `8 g ± 1`.
    pub q: [i8; 256],
    /// Raw scale code of each group of 16 weights (formats with one code per 32 repeat it).
    pub code: [u8; 16],
    /// The block's f16 scale `d`, as f32.
    pub d: f32,
}

impl Default for IqBlock {
    fn default() -> Self {
        IqBlock {
            q: [0; 256],
            code: [0; 16],
            d: 0.0,
        }
    }
}

/// Little-endian u16 at `b[i..i + 2]`.
fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

/// Little-endian u32 at `b[i..i + 4]`.
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Sign byte → 8 byte masks (byte `j` = 0xFF where bit `j` is set).
static SIGN_MASKS: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut s = 0;
    while s < 256 {
        let mut j = 0;
        while j < 8 {
            if s >> j & 1 != 0 {
                t[s] |= 0xFF << (8 * j);
            }
            j += 1;
        }
        s += 1;
    }
    t
};

/// Writes 8 grid magnitudes (`grid` bytes, each 1..=127) with sign bits `signs` (bit `j` set:
/// weight `j` negative), eight bytes at once: `(g ^ m) + (m & 1)` negates the bytes under the
/// mask, and no byte carries into the next because every magnitude is at least 1.
fn put_signed8(q: &mut [i8], grid: [u8; 8], signs: u8) {
    let m = SIGN_MASKS[signs as usize];
    let v = (u64::from_le_bytes(grid) ^ m) + (m & 0x0101_0101_0101_0101);
    for (d, b) in q[..8].iter_mut().zip(v.to_le_bytes()) {
        *d = b as i8;
    }
}

/// Writes 8 IQ1 grid values (`grid` bytes as i8 in {-1, 0, 1}) plus the shift, in eighths.
fn put_iq1(q: &mut [i8], grid: [u8; 8], negative_delta: bool) {
    let delta = if negative_delta { -1 } else { 1 };
    for j in 0..8 {
        q[j] = 8 * grid[j] as i8 + delta;
    }
}

/// Sets the codes of the two 16-weight groups of 32-weight group `ib` to `c`.
fn code32(out: &mut IqBlock, ib: usize, c: u8) {
    out.code[2 * ib] = c;
    out.code[2 * ib + 1] = c;
}

/// The 16 four-bit scale codes of an IQ2_XS block `b` (one per 16 weights).
pub(crate) fn iq2_xs_codes(b: &[u8]) -> [u8; 16] {
    std::array::from_fn(|s| b[66 + s / 2] >> (4 * (s % 2)) & 15)
}

/// The six-bit scale code of 32-weight group `ib` of an IQ4_XS block (`sh` = scales_h,
/// `sl` = scales_l); the scale is the code minus 32.
pub(crate) fn iq4_xs_code(sh: u16, sl: &[u8], ib: usize) -> u8 {
    let low = sl[ib / 2] >> (4 * (ib % 2)) & 15;
    low | ((sh >> (2 * ib) & 3) as u8) << 4
}

/// Decodes a whole super-block `b` of one of the 256-weight [`WeightFormat::IQ`] formats.
///
/// # Panics
/// If `format` is not such a format or `b` is shorter than its block.
pub(crate) fn decode(format: WeightFormat, b: &[u8], out: &mut IqBlock) {
    use WeightFormat::*;
    let b = &b[..format.block_bytes()];
    match format {
        IQ2_XXS => {
            out.d = f16_at(b, 0);
            for ib in 0..8 {
                let off = 2 + 8 * ib;
                let aux1 = u32_at(b, off + 4);
                code32(out, ib, (aux1 >> 28) as u8);
                for l in 0..4 {
                    let grid = IQ2XXS_GRID[b[off + l] as usize].to_le_bytes();
                    let signs = KSIGNS_IQ2XS[(aux1 >> (7 * l) & 127) as usize];
                    put_signed8(&mut out.q[32 * ib + 8 * l..], grid, signs);
                }
            }
        }
        IQ2_XS => {
            out.d = f16_at(b, 0);
            for i in 0..32 {
                let v = u16_at(b, 2 + 2 * i);
                let grid = IQ2XS_GRID[(v & 511) as usize].to_le_bytes();
                put_signed8(&mut out.q[8 * i..], grid, KSIGNS_IQ2XS[(v >> 9) as usize]);
            }
            out.code = iq2_xs_codes(b);
        }
        IQ2_S => {
            out.d = f16_at(b, 0);
            let (qs, signs, qh, scales) = (&b[2..34], &b[34..66], &b[66..74], &b[74..82]);
            for i in 0..32 {
                let idx = qs[i] as usize | ((qh[i / 4] >> (2 * (i % 4)) & 3) as usize) << 8;
                put_signed8(&mut out.q[8 * i..], IQ2S_GRID[idx].to_le_bytes(), signs[i]);
            }
            for s in 0..16 {
                out.code[s] = scales[s / 2] >> (4 * (s % 2)) & 15;
            }
        }
        IQ3_XXS => {
            out.d = f16_at(b, 0);
            let qs = &b[2..66];
            for ib in 0..8 {
                let aux = u32_at(b, 66 + 4 * ib);
                code32(out, ib, (aux >> 28) as u8);
                for l in 0..4 {
                    let g1 = IQ3XXS_GRID[qs[8 * ib + 2 * l] as usize].to_le_bytes();
                    let g2 = IQ3XXS_GRID[qs[8 * ib + 2 * l + 1] as usize].to_le_bytes();
                    let grid = [g1[0], g1[1], g1[2], g1[3], g2[0], g2[1], g2[2], g2[3]];
                    let signs = KSIGNS_IQ2XS[(aux >> (7 * l) & 127) as usize];
                    put_signed8(&mut out.q[32 * ib + 8 * l..], grid, signs);
                }
            }
        }
        IQ3_S => {
            out.d = f16_at(b, 0);
            let (qs, qh, signs, scales) = (&b[2..66], &b[66..74], &b[74..106], &b[106..110]);
            for i in 0..32 {
                let idx = |k: usize| qs[k] as usize | ((qh[k / 8] >> (k % 8) & 1) as usize) << 8;
                let g1 = IQ3S_GRID[idx(2 * i)].to_le_bytes();
                let g2 = IQ3S_GRID[idx(2 * i + 1)].to_le_bytes();
                let grid = [g1[0], g1[1], g1[2], g1[3], g2[0], g2[1], g2[2], g2[3]];
                put_signed8(&mut out.q[8 * i..], grid, signs[i]);
            }
            for ib in 0..8 {
                code32(out, ib, scales[ib / 2] >> (4 * (ib % 2)) & 15);
            }
        }
        IQ1_S => {
            out.d = f16_at(b, 0);
            for ib in 0..8 {
                let qh = u16_at(b, 34 + 2 * ib);
                code32(out, ib, (qh >> 12 & 7) as u8);
                for l in 0..4 {
                    let idx = b[2 + 4 * ib + l] as usize | ((qh >> (3 * l) & 7) as usize) << 8;
                    let grid = IQ1S_GRID[idx].to_le_bytes();
                    put_iq1(&mut out.q[32 * ib + 8 * l..], grid, qh & 0x8000 != 0);
                }
            }
        }
        IQ1_M => {
            let (qs, qh) = (&b[0..32], &b[32..48]);
            let sc = [0, 1, 2, 3].map(|k| u16_at(b, 48 + 2 * k));
            let bits =
                (sc[0] >> 12) | (sc[1] >> 8 & 0x00F0) | (sc[2] >> 4 & 0x0F00) | (sc[3] & 0xF000);
            out.d = half::f16::from_bits(bits).to_f32();
            for s in 0..16 {
                out.code[s] = (sc[s / 4] >> (3 * (s % 4)) & 7) as u8;
            }
            for i in 0..32 {
                let h = qh[i / 2] >> (4 * (i % 2));
                let idx = qs[i] as usize | ((h & 7) as usize) << 8;
                put_iq1(
                    &mut out.q[8 * i..],
                    IQ1S_GRID[idx].to_le_bytes(),
                    h & 8 != 0,
                );
            }
        }
        IQ4_XS => {
            out.d = f16_at(b, 0);
            let (sh, sl, qs) = (u16_at(b, 2), &b[4..8], &b[8..136]);
            for ib in 0..8 {
                code32(out, ib, iq4_xs_code(sh, sl, ib));
                for j in 0..16 {
                    out.q[32 * ib + j] = KVALUES_IQ4NL[(qs[16 * ib + j] & 15) as usize];
                    out.q[32 * ib + 16 + j] = KVALUES_IQ4NL[(qs[16 * ib + j] >> 4) as usize];
                }
            }
        }
        TQ1_0 => {
            out.d = f16_at(b, 52);
            out.code = [0; 16];
            const POW3: [u8; 5] = [1, 3, 9, 27, 81];
            // (first byte, bytes per digit run, digits): 32 bytes × 5, 16 × 5, then qh 4 × 4.
            let mut i = 0;
            for (start, len, digits) in [(0, 32, 5), (32, 16, 5), (48, 4, 4)] {
                for p in POW3.iter().take(digits) {
                    for m in 0..len {
                        let v = b[start + m].wrapping_mul(*p);
                        out.q[i] = ((u16::from(v) * 3) >> 8) as i8 - 1;
                        i += 1;
                    }
                }
            }
        }
        TQ2_0 => {
            out.d = f16_at(b, 64);
            out.code = [0; 16];
            for c in 0..2 {
                for s in 0..4 {
                    for m in 0..32 {
                        out.q[128 * c + 32 * s + m] = (b[32 * c + m] >> (2 * s) & 3) as i8 - 1;
                    }
                }
            }
        }
        other => unreachable!("{other} is not a 256-weight IQ/TQ format"),
    }
}

/// The float scale gguf computes for scale code `c` of a block with scale `d` (the factor the
/// quants of [`IqBlock::q`] are multiplied by; IQ1 quants are in eighths, see [`dequantize`]).
pub(crate) fn float_scale(format: WeightFormat, d: f32, c: u8) -> f32 {
    use WeightFormat::*;
    match format {
        IQ2_XXS | IQ2_XS | IQ2_S => d * (0.5 + f32::from(c)) * 0.25,
        IQ3_XXS => d * (0.5 + f32::from(c)) * 0.5,
        IQ3_S | IQ1_S | IQ1_M => d * f32::from(1 + 2 * c),
        IQ4_XS => d * f32::from(c as i8 - 32),
        _ => d,
    }
}

/// Integer scale of code `c` and the float unit of the block (`d` times a power of two) so
/// that weight = `unit * int_scale * q` — what the integer matmul kernels use. The product
/// equals [`dequantize`]'s value up to float rounding.
pub(crate) fn int_scale(format: WeightFormat, d: f32, c: u8) -> (i16, f32) {
    use WeightFormat::*;
    let odd = 2 * i16::from(c) + 1;
    match format {
        IQ2_XXS | IQ2_XS | IQ2_S | IQ1_S | IQ1_M => (odd, d * 0.125),
        IQ3_XXS => (odd, d * 0.25),
        IQ3_S => (odd, d),
        IQ4_XS => (i16::from(c) - 32, d),
        _ => (1, d),
    }
}

/// The raw scale code whose [`int_scale`] is `sc` (its inverse, for codes that exist).
pub(crate) fn code_of_int_scale(format: WeightFormat, sc: i16) -> u8 {
    use WeightFormat::*;
    match format {
        IQ2_XXS | IQ2_XS | IQ2_S | IQ1_S | IQ1_M | IQ3_XXS | IQ3_S => ((sc - 1) / 2) as u8,
        IQ4_XS => (sc + 32) as u8,
        _ => 0,
    }
}

/// Dequantizes one 256-weight IQ/TQ super-block (bit-exact with `gguf.quants.dequantize`).
pub(super) fn dequantize(format: WeightFormat, b: &[u8], y: &mut [f32; 256]) {
    let mut blk = IqBlock::default();
    decode(format, b, &mut blk);
    let eighths = matches!(format, WeightFormat::IQ1_S | WeightFormat::IQ1_M);
    for (g, ys) in y.chunks_exact_mut(16).enumerate() {
        let db = float_scale(format, blk.d, blk.code[g]);
        for (v, &q) in ys.iter_mut().zip(&blk.q[16 * g..16 * g + 16]) {
            let qf = if eighths {
                f32::from(q) * 0.125
            } else {
                f32::from(q)
            };
            *v = db * qf;
        }
    }
}

/// The E8M0 scale halved, as ggml's `ggml_e8m0_to_fp32_half` (MXFP4 values are doubled).
pub(crate) fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

/// IQ4_NL {f16 d; u8 qs[16]}: `y[j] = d * table[qs[j] & 15]`, `y[j + 16] = d * table[qs[j] >> 4]`.
pub(super) fn block_iq4_nl(b: &[u8; 18], y: &mut [f32; 32]) {
    nibble_table(f16_at(b, 0), &b[2..18], &KVALUES_IQ4NL, y);
}

/// MXFP4 {u8 e; u8 qs[16]}: as IQ4_NL with the E2M1 table and the halved E8M0 scale.
pub(super) fn block_mxfp4(b: &[u8; 17], y: &mut [f32; 32]) {
    nibble_table(e8m0_half(b[0]), &b[1..17], &KVALUES_MXFP4, y);
}

/// 32 weights from 16 bytes of 4-bit codes into `table`, scaled by `d`.
fn nibble_table(d: f32, qs: &[u8], table: &[i8; 16], y: &mut [f32; 32]) {
    for j in 0..16 {
        y[j] = d * f32::from(table[(qs[j] & 15) as usize]);
        y[j + 16] = d * f32::from(table[(qs[j] >> 4) as usize]);
    }
}
