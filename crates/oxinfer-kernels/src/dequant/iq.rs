//! The table-lookup (IQ*), ternary (TQ*) and FP4 (MXFP4) formats.
//!
//! Every 256-weight type decodes first to integers ([`IqBlock`]: signed quants and raw scale
//! codes), shared with the matmul kernels (`vecdot::unpack`); the float values then follow the
//! `gguf` package's `dequantize_blocks` (gguf/quants.py) operation for operation, so they match
//! it bit for bit. The grids are in the generated [`super::iq_grids`].
#![allow(clippy::needless_range_loop)] // index arithmetic mirrors the block layouts

use super::float::f16_at;
use super::iq_grids::*;
use super::iq_layout::{for_each_group, is_grid, is_iq1, scale_codes, TQ1_POW3};
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

/// Writes 8 IQ1 grid values (`grid` bytes as i8 in {-1, 0, 1}) plus the shift, in eighths
/// (`negative_delta`: −1/8, else +1/8).
fn put_iq1(q: &mut [i8], grid: [u8; 8], negative_delta: bool) {
    let delta = if negative_delta { -1 } else { 1 };
    for j in 0..8 {
        q[j] = 8 * grid[j] as i8 + delta;
    }
}

/// Decodes a whole super-block `b` of one of the 256-weight [`WeightFormat::IQ`] formats.
///
/// # Panics
/// If `format` is not such a format or `b` is shorter than its block.
pub(crate) fn decode(format: WeightFormat, b: &[u8], out: &mut IqBlock) {
    use WeightFormat::*;
    let b = &b[..format.block_bytes()];
    (out.d, out.code) = scale_codes(format, b);
    match format {
        f if is_grid(f) => for_each_group(f, b, |k, g| {
            for e in 0..4 {
                let (grid, signs) = (g.grid[e].to_le_bytes(), (g.bits >> (8 * e)) as u8);
                let q = &mut out.q[32 * k + 8 * e..];
                if is_iq1(f) {
                    put_iq1(q, grid, signs != 0);
                } else {
                    put_signed8(q, grid, signs);
                }
            }
        }),
        IQ4_XS => {
            let qs = &b[8..136];
            for ib in 0..8 {
                for j in 0..16 {
                    out.q[32 * ib + j] = KVALUES_IQ4NL[(qs[16 * ib + j] & 15) as usize];
                    out.q[32 * ib + 16 + j] = KVALUES_IQ4NL[(qs[16 * ib + j] >> 4) as usize];
                }
            }
        }
        TQ1_0 => {
            // (first byte, bytes per digit run, digits): 32 bytes × 5, 16 × 5, then qh 4 × 4.
            let mut i = 0;
            for (start, len, digits) in [(0, 32, 5), (32, 16, 5), (48, 4, 4)] {
                for p in TQ1_POW3.iter().take(digits) {
                    for m in 0..len {
                        let v = b[start + m].wrapping_mul(*p);
                        out.q[i] = ((u16::from(v) * 3) >> 8) as i8 - 1;
                        i += 1;
                    }
                }
            }
        }
        TQ2_0 => {
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
#[inline]
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
