//! wasm32 SIMD128 dot-product kernels (`std::arch::wasm32`), for the wasm builds
//! (`-C target-feature=+simd128`, set for the wasm targets in `.cargo/config.toml`).
//!
//! WebAssembly has no run-time feature detection: a module that uses SIMD128 does not load on
//! an engine without it, so these kernels exist exactly when the build enables the feature
//! ([`crate::dispatch::Isa::Simd128`]). The integer sums are exact and the float arithmetic
//! after them is the scalar twin's, in the same order: each kernel returns the scalar kernel's
//! bits (the tests check them against `scalar.rs` within a rounding bound all the same).
//!
//! Each int8 product of 16 bytes widens both sides to i16 and takes `i32x4.dot_i16x8_s` (one
//! `pmaddwd` on x86 hosts). Formats without a kernel here return `None` and take the scalar
//! path.
#![cfg(all(target_arch = "wasm32", target_feature = "simd128"))]

use super::unpack::KBlock;
use crate::dequant::f16_at;
use crate::dequant::iq::e8m0_half;
use crate::dequant::{KVALUES_IQ4NL, KVALUES_MXFP4};
use crate::dispatch::Isa;
use crate::format::WeightFormat;
use crate::q8::{BlockQ8, BlockQ8K};
use std::arch::wasm32::*;

/// 16 bytes as a vector.
#[inline(always)]
fn load16(b: &[u8; 16]) -> v128 {
    // SAFETY: `b` is 16 readable bytes; wasm loads have no alignment requirement.
    unsafe { v128_load(b.as_ptr().cast()) }
}

/// The 16 bytes of `s` starting at `at`, as a vector.
///
/// # Panics
/// If `s` has fewer than `at + 16` bytes.
#[inline(always)]
fn load_at(s: &[u8], at: usize) -> v128 {
    let b: &[u8; 16] = s[at..at + 16].try_into().expect("16 bytes");
    load16(b)
}

/// 16 signed bytes as a vector.
#[inline(always)]
fn load_i8(s: &[i8], at: usize) -> v128 {
    let b: &[i8; 16] = s[at..at + 16].try_into().expect("16 bytes");
    // SAFETY: `b` is 16 readable bytes; wasm loads have no alignment requirement.
    unsafe { v128_load(b.as_ptr().cast()) }
}

/// 8 i16 as a vector.
#[inline(always)]
fn load_i16(s: &[i16], at: usize) -> v128 {
    let b: &[i16; 8] = s[at..at + 8].try_into().expect("8 values");
    // SAFETY: `b` is 16 readable bytes; wasm loads have no alignment requirement.
    unsafe { v128_load(b.as_ptr().cast()) }
}

/// `acc + Σ a·b` of 16 signed bytes, in four i32 lanes (which lane holds which products does
/// not matter to the callers: they take the total).
#[inline(always)]
fn dot_i8x16(acc: v128, a: v128, b: v128) -> v128 {
    let lo = i32x4_dot_i16x8(i16x8_extend_low_i8x16(a), i16x8_extend_low_i8x16(b));
    let hi = i32x4_dot_i16x8(i16x8_extend_high_i8x16(a), i16x8_extend_high_i8x16(b));
    i32x4_add(acc, i32x4_add(lo, hi))
}

/// Sum of the four i32 lanes.
#[inline(always)]
fn hsum_i32(v: v128) -> i32 {
    i32x4_extract_lane::<0>(v)
        .wrapping_add(i32x4_extract_lane::<1>(v))
        .wrapping_add(i32x4_extract_lane::<2>(v))
        .wrapping_add(i32x4_extract_lane::<3>(v))
}

/// The fifth bits of a Q5 block's 32 quants (`qh`, bit `j` for quant `j`) as `0x10` bytes:
/// quants 0..16, then 16..32.
#[inline(always)]
fn q5_high_bits(qh: u32) -> (v128, v128) {
    let v = u32x4_splat(qh);
    let bit = u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
    let spread = |b0: u8, b1: u8| {
        let sel = u8x16(
            b0, b0, b0, b0, b0, b0, b0, b0, b1, b1, b1, b1, b1, b1, b1, b1,
        );
        let set = u8x16_ne(v128_and(i8x16_swizzle(v, sel), bit), u8x16_splat(0));
        v128_and(set, u8x16_splat(0x10))
    };
    (spread(0, 1), spread(2, 3))
}

/// A Q5_0 / Q5_1 block's 32 five-bit codes (0..32; quants 0..16 and 16..32) and the offset
/// its quants subtract from them (16 for Q5_0, 0 for Q5_1).
#[inline(always)]
fn q5_codes(format: WeightFormat, b: &[u8]) -> ((v128, v128), i8) {
    let (h, at, off) = if format == WeightFormat::Q5_0 {
        (2, 6, 16)
    } else {
        (4, 8, 0)
    };
    let qh = u32::from_le_bytes([b[h], b[h + 1], b[h + 2], b[h + 3]]);
    let qs = load_at(b, at);
    let (hb_lo, hb_hi) = q5_high_bits(qh);
    (
        (
            v128_or(v128_and(qs, u8x16_splat(0x0F)), hb_lo),
            v128_or(u8x16_shr(qs, 4), hb_hi),
        ),
        off,
    )
}

/// The 32 quants of one block of a 32-weight `format` as signed bytes (quants 0..16, 16..32);
/// `None` for a format without a kernel here.
#[inline(always)]
fn legacy_quants(format: WeightFormat, b: &[u8]) -> Option<(v128, v128)> {
    let nibbles = |at: usize| {
        let qs = load_at(b, at);
        (v128_and(qs, u8x16_splat(0x0F)), u8x16_shr(qs, 4))
    };
    Some(match format {
        WeightFormat::Q4_0 => {
            let (lo, hi) = nibbles(2);
            let off = i8x16_splat(8);
            (i8x16_sub(lo, off), i8x16_sub(hi, off))
        }
        WeightFormat::Q4_1 => nibbles(4),
        WeightFormat::Q5_0 | WeightFormat::Q5_1 => {
            let ((lo, hi), off) = q5_codes(format, b);
            let off = i8x16_splat(off);
            (i8x16_sub(lo, off), i8x16_sub(hi, off))
        }
        WeightFormat::Q8_0 => (load_at(b, 2), load_at(b, 18)),
        WeightFormat::IQ4_NL | WeightFormat::MXFP4 => {
            let (table, at) = if format == WeightFormat::IQ4_NL {
                (&KVALUES_IQ4NL, 2)
            } else {
                (&KVALUES_MXFP4, 1)
            };
            let t = load_i8(table, 0);
            let (lo, hi) = nibbles(at);
            (i8x16_swizzle(t, lo), i8x16_swizzle(t, hi))
        }
        _ => return None,
    })
}

/// The scale and min of one block of a 32-weight `format` (`weight = d * q + m`; `m = 0` for
/// the symmetric formats), as the scalar twin reads them.
#[inline(always)]
fn legacy_scales(format: WeightFormat, b: &[u8]) -> (f32, f32) {
    match format {
        WeightFormat::Q4_1 | WeightFormat::Q5_1 => (f16_at(b, 0), f16_at(b, 2)),
        WeightFormat::MXFP4 => (e8m0_half(b[0]), 0.0),
        _ => (f16_at(b, 0), 0.0),
    }
}

/// [`legacy_quants`] and [`legacy_scales`] together.
#[inline(always)]
fn legacy_block(format: WeightFormat, b: &[u8]) -> Option<(v128, v128, f32, f32)> {
    let (lo, hi) = legacy_quants(format, b)?;
    let (d, m) = legacy_scales(format, b);
    Some((lo, hi, d, m))
}

/// Four f16 values (the low 16 bits of each u32 lane) as f32, exactly as
/// `half::f16::to_f32` converts them (zeros, subnormals, infinities; NaNs stay NaNs with the
/// quiet bit set, as there): the magnitude shifted into f32 position is scaled by 2¹¹² (the
/// exponent biases' difference), which is exact for every finite f16.
#[inline(always)]
pub(crate) fn f16x4_to_f32(h: v128) -> v128 {
    let mag = v128_and(h, u32x4_splat(0x7FFF));
    let sign = i32x4_shl(v128_and(h, u32x4_splat(0x8000)), 16);
    let shifted = i32x4_shl(mag, 13);
    let finite = f32x4_mul(shifted, f32x4_splat(f32::from_bits(0x7780_0000))); // 2^112
    let quiet = v128_and(u32x4_gt(mag, u32x4_splat(0x7C00)), u32x4_splat(0x0040_0000));
    let special = v128_or(v128_or(shifted, u32x4_splat(0x7F80_0000)), quiet);
    let is_special = u32x4_ge(mag, u32x4_splat(0x7C00));
    v128_or(v128_bitselect(special, finite, is_special), sign)
}

/// The f16 scale (bits 0..16 of each lane) and, with `min`, the f16 min (bits 16..32) of four
/// blocks as f32, exactly, for finite values only: [`f16x4_to_f32`] without its checks for
/// infinities and NaNs.
#[inline(always)]
fn finite_scales(h: v128, min: bool) -> (v128, v128) {
    let two112 = f32x4_splat(f32::from_bits(0x7780_0000));
    let d_mag = i32x4_shl(v128_and(h, u32x4_splat(0x7FFF)), 13);
    let d_sign = v128_and(i32x4_shl(h, 16), u32x4_splat(0x8000_0000));
    let d = v128_or(f32x4_mul(d_mag, two112), d_sign);
    if !min {
        return (d, f32x4_splat(0.0));
    }
    let m_mag = v128_and(u32x4_shr(h, 3), u32x4_splat(0x0FFF_E000));
    let m_sign = v128_and(h, u32x4_splat(0x8000_0000));
    (d, v128_or(f32x4_mul(m_mag, two112), m_sign))
}

/// Lane `r` = the sum of the four i32 lanes of `s[r]` (wrapping, as [`hsum_i32`]).
#[inline(always)]
fn hsum4_i32(s: [v128; 4]) -> v128 {
    let pair = |a: v128, b: v128| {
        i32x4_add(
            i32x4_shuffle::<0, 4, 1, 5>(a, b),
            i32x4_shuffle::<2, 6, 3, 7>(a, b),
        )
    };
    let (ab, cd) = (pair(s[0], s[1]), pair(s[2], s[3]));
    i32x4_add(i64x2_shuffle::<0, 2>(ab, cd), i64x2_shuffle::<1, 3>(ab, cd))
}

/// `out[r] = w[r] · x` for four rows of a 32-weight format and one token (the decode GEMV):
/// each activation block is prepared once for the four rows (widened to i16 on SIMD128), and
/// the rows' integer sums are gathered into one vector (lane `r`: row `r`) where the scales are
/// applied, so no horizontal sum is taken per block. Each lane takes the scalar twin's float
/// steps in its order: the same bits as four [`dot_q8_multi`] calls. On
/// [`Isa::RelaxedSimd128`] they take their integer sums with relaxed SIMD
/// ([`relaxed::Relaxed`]): the same integers. `false` (nothing written) for a
/// format without a kernel here. The caller checked that each row is `x.len()` blocks.
pub fn dot_q8_rows4(
    format: WeightFormat,
    w: [&[u8]; 4],
    x: &[BlockQ8],
    isa: Isa,
    out: &mut [f32; 4],
) -> bool {
    // One monomorphic loop per format, so the format's match folds away.
    macro_rules! go {
        ($s:ty: $($f:ident)|*) => {
            match format {
                $(WeightFormat::$f => {
                    rows4::<$s>(WeightFormat::$f, w, x, out);
                    true
                })*
                _ => false,
            }
        };
    }
    #[cfg(target_feature = "relaxed-simd")]
    if isa == Isa::RelaxedSimd128 {
        return go!(relaxed::Relaxed: Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | IQ4_NL | MXFP4);
    }
    let _ = isa;
    go!(Widen: Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | IQ4_NL | MXFP4)
}

/// The integer part of [`rows4`]: one activation block prepared once for four rows, then a
/// row's block sum in four i32 lanes whose total is the block's integer dot product (the
/// scalar twin's `sumi`, quant offsets included).
trait RowSums {
    /// One activation block, prepared.
    type Acts;
    /// Prepares `y` for the blocks of `format`.
    fn acts(format: WeightFormat, y: &BlockQ8) -> Self::Acts;
    /// Block `b` of `format` against prepared activations.
    fn block(format: WeightFormat, b: &[u8], a: &Self::Acts) -> v128;
}

/// SIMD128: activations widened to i16, `i32x4.dot_i16x8_s`.
struct Widen;

impl RowSums for Widen {
    type Acts = [v128; 4];

    #[inline(always)]
    fn acts(format: WeightFormat, y: &BlockQ8) -> [v128; 4] {
        widen_acts(format, y)
    }

    #[inline(always)]
    fn block(format: WeightFormat, b: &[u8], a: &[v128; 4]) -> v128 {
        block_sum(format, b, a)
    }
}

/// One activation block as i16 for [`block_sum`]: for Q4_0 / Q4_1 quants 0, 2 .. 14, then
/// 1, 3 .. 15, 16, 18 .. 30 and 17, 19 .. 31 (the order in which [`block_sum`] takes the
/// nibbles apart); for the other formats quants 0..8, 8..16, 16..24, 24..32.
#[inline(always)]
fn widen_acts(format: WeightFormat, y: &BlockQ8) -> [v128; 4] {
    let a = [load_i8(&y.qs, 0), load_i8(&y.qs, 16)];
    if matches!(format, WeightFormat::Q4_0 | WeightFormat::Q4_1) {
        let even = |v: v128| i16x8_shr(i16x8_shl(v, 8), 8);
        [
            even(a[0]),
            i16x8_shr(a[0], 8),
            even(a[1]),
            i16x8_shr(a[1], 8),
        ]
    } else {
        [
            i16x8_extend_low_i8x16(a[0]),
            i16x8_extend_high_i8x16(a[0]),
            i16x8_extend_low_i8x16(a[1]),
            i16x8_extend_high_i8x16(a[1]),
        ]
    }
}

/// The integer dot product of one block `b` of a 32-weight `format` with an activation block
/// widened by [`widen_acts`], in four i32 lanes.
#[inline(always)]
fn block_sum(format: WeightFormat, b: &[u8], a16: &[v128; 4]) -> v128 {
    if matches!(format, WeightFormat::Q4_0 | WeightFormat::Q4_1) {
        // Each u16 lane `i` of the 16 nibble bytes holds quants 2i (bits 0..4), 2i + 16
        // (4..8), 2i + 1 (8..12) and 2i + 17 (12..16).
        let (at, off) = if format == WeightFormat::Q4_0 {
            (2, 8)
        } else {
            (4, 0)
        };
        let v = load_at(b, at);
        let mask = u16x8_splat(0x000F);
        let off = i16x8_splat(off);
        let q = |v: v128| i16x8_sub(v, off);
        let p0 = i32x4_dot_i16x8(q(v128_and(v, mask)), a16[0]);
        let p1 = i32x4_dot_i16x8(q(v128_and(u16x8_shr(v, 8), mask)), a16[1]);
        let p2 = i32x4_dot_i16x8(q(v128_and(u16x8_shr(v, 4), mask)), a16[2]);
        let p3 = i32x4_dot_i16x8(q(u16x8_shr(v, 12)), a16[3]);
        return i32x4_add(i32x4_add(p0, p1), i32x4_add(p2, p3));
    }
    let (lo, hi) = legacy_quants(format, b).expect("a format with a kernel");
    let p0 = i32x4_dot_i16x8(i16x8_extend_low_i8x16(lo), a16[0]);
    let p1 = i32x4_dot_i16x8(i16x8_extend_high_i8x16(lo), a16[1]);
    let p2 = i32x4_dot_i16x8(i16x8_extend_low_i8x16(hi), a16[2]);
    let p3 = i32x4_dot_i16x8(i16x8_extend_high_i8x16(hi), a16[3]);
    i32x4_add(i32x4_add(p0, p1), i32x4_add(p2, p3))
}

/// The first four bytes of a block (its f16 scale and, for Q4_1 / Q5_1, min) as a u32.
#[inline(always)]
fn head(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

#[inline(always)]
fn rows4<S: RowSums>(format: WeightFormat, w: [&[u8]; 4], x: &[BlockQ8], out: &mut [f32; 4]) {
    // The four rows are written out one by one (not looped over): LLVM keeps a loop over an
    // array of rows as a loop, with the array and the sums in linear memory.
    let bb = format.block_bytes();
    let [w0, w1, w2, w3] = w;
    let mut acc = f32x4_splat(0.0);
    for (bi, y) in x.iter().enumerate() {
        let at = bi * bb;
        let (b0, b1) = (&w0[at..at + bb], &w1[at..at + bb]);
        let (b2, b3) = (&w2[at..at + bb], &w3[at..at + bb]);
        let a = S::acts(format, y);
        let sums = [
            S::block(format, b0, &a),
            S::block(format, b1, &a),
            S::block(format, b2, &a),
            S::block(format, b3, &a),
        ];
        let sumi = f32x4_convert_i32x4(hsum4_i32(sums));
        let (d, m) = if format == WeightFormat::MXFP4 {
            let d = [b0[0], b1[0], b2[0], b3[0]];
            let d = f32x4(
                e8m0_half(d[0]),
                e8m0_half(d[1]),
                e8m0_half(d[2]),
                e8m0_half(d[3]),
            );
            (d, f32x4_splat(0.0))
        } else {
            let h = u32x4(head(b0), head(b1), head(b2), head(b3));
            let min = matches!(format, WeightFormat::Q4_1 | WeightFormat::Q5_1);
            // Bits 16..32 are the min for Q4_1 / Q5_1 and quants otherwise (not looked at).
            let exp = v128_and(h, u32x4_splat(if min { 0x7C00_7C00 } else { 0x7C00 }));
            if v128_any_true(i16x8_eq(exp, i16x8_splat(0x7C00))) {
                // An infinite or NaN scale (a broken file): the exact conversion.
                let d = f16x4_to_f32(v128_and(h, u32x4_splat(0xFFFF)));
                let m = if min {
                    f16x4_to_f32(u32x4_shr(h, 16))
                } else {
                    f32x4_splat(0.0)
                };
                (d, m)
            } else {
                finite_scales(h, min)
            }
        };
        // The scalar twin's `sum += d * y.d * sumi as f32 + m * y.s`, lane by lane.
        let dd = f32x4_mul(d, f32x4_splat(y.d));
        let t = f32x4_add(f32x4_mul(dd, sumi), f32x4_mul(m, f32x4_splat(y.s)));
        acc = f32x4_add(acc, t);
    }
    *out = [
        f32x4_extract_lane::<0>(acc),
        f32x4_extract_lane::<1>(acc),
        f32x4_extract_lane::<2>(acc),
        f32x4_extract_lane::<3>(acc),
    ];
}

/// The relaxed-SIMD int8 products (`i32x4.relaxed_dot_i8x16_i7x16_add_s`), for the build with
/// `+relaxed-simd` ([`Isa::RelaxedSimd128`]).
///
/// The instruction multiplies 16 signed bytes with 16 bytes that must be 0..=127 (a byte with
/// its top bit set may be read as signed or unsigned, by engine and CPU), adds the products in
/// pairs into i16 (which may saturate, or wrap: never here, as |2 · 127 · 128| < 2¹⁵) and the
/// pairs into i32 lanes (lane `i`: bytes `4i .. 4i + 4`), plus an accumulator; on x86 it is one
/// `vpmaddubsw` and one `vpmaddwd` (or a VNNI `vpdpbusd`). The weights go in the 0..=127
/// operand: 4- and 5-bit quants are already there; quants with negative values go in as
/// `q + offset` (a table of `value + offset`, split in two where it exceeds 127), and
/// `offset · Σ activations` is taken off; a Q8_0 quant (a full signed byte) is
/// `(q & 0x7F) − 128 · (q >> 7)`. The integer sums are those of the SIMD128 kernels, so
/// the results are their bits.
#[cfg(target_feature = "relaxed-simd")]
pub(crate) mod relaxed {
    use super::*;

    /// `acc` + the products of the signed bytes `a` with the bytes `w` (each 0..=127), summed
    /// four by four into the i32 lanes.
    #[inline(always)]
    pub(crate) fn dot_u7(acc: v128, a: v128, w: v128) -> v128 {
        i32x4_relaxed_dot_i8x16_i7x16_add(a, w, acc)
    }

    /// The 32 signed bytes `a` summed into four i32 lanes (their total is the sum).
    #[inline(always)]
    pub(crate) fn sum_acts(a: [v128; 2]) -> v128 {
        let ones = i8x16_splat(1);
        dot_u7(dot_u7(i32x4_splat(0), a[0], ones), a[1], ones)
    }

    /// `table[i] + offset` (0..=254) as two tables of 0..=127: `min(v, 127)` and the rest.
    const fn split_u7(table: &[i8; 16], offset: i16) -> [[i8; 16]; 2] {
        let mut out = [[0i8; 16]; 2];
        let mut i = 0;
        while i < 16 {
            let v = table[i] as i16 + offset;
            assert!(v >= 0 && v <= 254);
            let first = if v > 127 { 127 } else { v };
            out[0][i] = first as i8;
            out[1][i] = (v - first) as i8;
            i += 1;
        }
        out
    }

    /// The IQ4_NL values (−127..=113) + 128 as two tables of 0..=127.
    const IQ4NL_U7: [[i8; 16]; 2] = split_u7(&KVALUES_IQ4NL, 128);
    /// The MXFP4 values (−12..=12) + 12: one table of 0..=24.
    const MXFP4_U7: [[i8; 16]; 2] = split_u7(&KVALUES_MXFP4, 12);

    /// [`IQ4NL_U7`] as two vectors.
    #[inline(always)]
    pub(crate) fn iq4nl_u7_tables() -> [v128; 2] {
        [load_i8(&IQ4NL_U7[0], 0), load_i8(&IQ4NL_U7[1], 0)]
    }

    /// Relaxed SIMD for [`rows4`]: the two 16-byte halves of the activations and their sum.
    pub(crate) struct Relaxed;

    impl RowSums for Relaxed {
        type Acts = ([v128; 2], v128);

        #[inline(always)]
        fn acts(_: WeightFormat, y: &BlockQ8) -> Self::Acts {
            let a = [load_i8(&y.qs, 0), load_i8(&y.qs, 16)];
            (a, sum_acts(a))
        }

        #[inline(always)]
        fn block(format: WeightFormat, b: &[u8], (a, sum): &Self::Acts) -> v128 {
            // Quants 0..16 in the low nibbles, 16..32 in the high ones.
            let nibbles = |at: usize| {
                let qs = load_at(b, at);
                (v128_and(qs, u8x16_splat(0x0F)), u8x16_shr(qs, 4))
            };
            let both = |acc: v128, (lo, hi): (v128, v128)| dot_u7(dot_u7(acc, a[0], lo), a[1], hi);
            let off = |k: i32| i32x4_mul(*sum, i32x4_splat(-k));
            let look =
                |t: v128, (lo, hi): (v128, v128)| (i8x16_swizzle(t, lo), i8x16_swizzle(t, hi));
            match format {
                WeightFormat::Q4_0 => both(off(8), nibbles(2)),
                WeightFormat::Q4_1 => both(i32x4_splat(0), nibbles(4)),
                WeightFormat::Q5_0 | WeightFormat::Q5_1 => {
                    let (codes, k) = q5_codes(format, b);
                    both(off(i32::from(k)), codes)
                }
                WeightFormat::IQ4_NL => {
                    let q = nibbles(2);
                    let [t1, t2] = iq4nl_u7_tables();
                    both(both(off(128), look(t1, q)), look(t2, q))
                }
                WeightFormat::MXFP4 => {
                    let t = load_i8(&MXFP4_U7[0], 0);
                    both(off(12), look(t, nibbles(1)))
                }
                WeightFormat::Q8_0 => {
                    // q = (q & 0x7F) − 128 · (q >> 7).
                    let q = (load_at(b, 2), load_at(b, 18));
                    let low = |v: v128| v128_and(v, u8x16_splat(0x7F));
                    let top = |v: v128| u8x16_shr(v, 7);
                    let pos = both(i32x4_splat(0), (low(q.0), low(q.1)));
                    let neg = both(i32x4_splat(0), (top(q.0), top(q.1)));
                    i32x4_sub(pos, i32x4_shl(neg, 7))
                }
                _ => unreachable!("{format:?} has no relaxed kernel"),
            }
        }
    }
}

/// `out[k] = w · xs[k]` for a row of a 32-weight format (the blocks unpacked once for the
/// `N` tokens); `false` (nothing written) for a format without a kernel here. The caller
/// checked that `w` is `xs[k].len()` blocks.
pub fn dot_q8_multi<const N: usize>(
    format: WeightFormat,
    w: &[u8],
    xs: [&[BlockQ8]; N],
    out: &mut [f32; N],
) -> bool {
    let bb = format.block_bytes();
    let mut sum = [0f32; N];
    for (bi, b) in w.chunks_exact(bb).enumerate() {
        let Some((lo, hi, d, m)) = legacy_block(format, b) else {
            return false;
        };
        for (k, x) in xs.iter().enumerate() {
            let y = &x[bi];
            let acc = dot_i8x16(i32x4_splat(0), lo, load_i8(&y.qs, 0));
            let sumi = hsum_i32(dot_i8x16(acc, hi, load_i8(&y.qs, 16)));
            sum[k] += d * y.d * sumi as f32 + m * y.s;
        }
    }
    *out = sum;
    true
}

/// [`dot_q8_multi`] for a split format (`Q8`: 32 signed bytes and an f32 scale per block;
/// `Q4`: 16 nibble bytes, quant − 8, and an f16 scale). The caller checked the lengths.
pub fn dot_split_multi<const N: usize>(
    format: WeightFormat,
    w: &[u8],
    s: &[u8],
    xs: [&[BlockQ8]; N],
    out: &mut [f32; N],
) {
    let (bb, sb) = (format.block_bytes(), format.scale_bytes());
    let mut sum = [0f32; N];
    for (bi, (b, sc)) in w.chunks_exact(bb).zip(s.chunks_exact(sb)).enumerate() {
        let (lo, hi, d) = if format == WeightFormat::Q8 {
            let d = f32::from_le_bytes([sc[0], sc[1], sc[2], sc[3]]);
            (load_at(b, 0), load_at(b, 16), d)
        } else {
            let qs = load_at(b, 0);
            let off = i8x16_splat(8);
            let lo = i8x16_sub(v128_and(qs, u8x16_splat(0x0F)), off);
            (lo, i8x16_sub(u8x16_shr(qs, 4), off), f16_at(sc, 0))
        };
        for (k, x) in xs.iter().enumerate() {
            let y = &x[bi];
            let acc = dot_i8x16(i32x4_splat(0), lo, load_i8(&y.qs, 0));
            let sumi = hsum_i32(dot_i8x16(acc, hi, load_i8(&y.qs, 16)));
            sum[k] += d * y.d * sumi as f32;
        }
    }
    *out = sum;
}

/// See `super::dot_kblock`: the same integer sums (exact), then the scalar twin's float step.
pub fn dot_kblock(kb: &KBlock, y: &BlockQ8K) -> f32 {
    let mut acc = i32x4_splat(0);
    for g in 0..16 {
        let s = dot_i8x16(
            i32x4_splat(0),
            load_i8(&kb.q, 16 * g),
            load_i8(&y.qs, 16 * g),
        );
        acc = i32x4_add(acc, i32x4_mul(s, i32x4_splat(i32::from(kb.sc[g]))));
    }
    let sumi = hsum_i32(acc);
    let m = i32x4_add(
        i32x4_dot_i16x8(load_i16(&kb.m, 0), load_i16(&y.bsums, 0)),
        i32x4_dot_i16x8(load_i16(&kb.m, 8), load_i16(&y.bsums, 8)),
    );
    let summ = hsum_i32(m);
    y.d * (kb.d * sumi as f32 - kb.dmin * summ as f32)
}

/// See `super::dot_float`: F32 and BF16 rows in eight f32 lanes (two vectors); `None` for F16
/// (no f16 conversion in SIMD128: the scalar kernel runs).
pub fn dot_float(format: WeightFormat, w: &[u8], x: &[f32]) -> Option<f32> {
    let n = x.len();
    let mut acc = [f32x4_splat(0.0); 2];
    let mut i = 0;
    let xv = |at: usize| {
        let b: &[f32; 4] = x[at..at + 4].try_into().expect("4 values");
        // SAFETY: `b` is 16 readable bytes; wasm loads have no alignment requirement.
        unsafe { v128_load(b.as_ptr().cast()) }
    };
    match format {
        WeightFormat::F32 => {
            while i + 8 <= n {
                for (h, a) in acc.iter_mut().enumerate() {
                    let o = i + 4 * h;
                    *a = f32x4_add(*a, f32x4_mul(load_at(w, 4 * o), xv(o)));
                }
                i += 8;
            }
        }
        WeightFormat::BF16 => {
            while i + 8 <= n {
                let v = load_at(w, 2 * i);
                // bf16 → f32: the 16 bits become the high half of each lane.
                let halves = [
                    u32x4_shl(u32x4_extend_low_u16x8(v), 16),
                    u32x4_shl(u32x4_extend_high_u16x8(v), 16),
                ];
                for (h, a) in acc.iter_mut().enumerate() {
                    *a = f32x4_add(*a, f32x4_mul(halves[h], xv(i + 4 * h)));
                }
                i += 8;
            }
        }
        _ => return None,
    }
    let v = f32x4_add(acc[0], acc[1]);
    let mut sum = f32x4_extract_lane::<0>(v)
        + f32x4_extract_lane::<1>(v)
        + f32x4_extract_lane::<2>(v)
        + f32x4_extract_lane::<3>(v);
    let tail = super::scalar::dot_float(format, &w[i * format.block_bytes()..], &x[i..]);
    sum += tail;
    Some(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every f16 bit pattern converts as `half` converts it (NaNs: both NaN).
    #[test]
    fn f16x4_to_f32_matches_half_on_every_value() {
        for h in (0..=u16::MAX).step_by(4) {
            let hs = [h, h + 1, h + 2, h + 3];
            let v = f16x4_to_f32(u32x4(
                hs[0].into(),
                hs[1].into(),
                hs[2].into(),
                hs[3].into(),
            ));
            let got = [
                f32x4_extract_lane::<0>(v),
                f32x4_extract_lane::<1>(v),
                f32x4_extract_lane::<2>(v),
                f32x4_extract_lane::<3>(v),
            ];
            for (g, h) in got.into_iter().zip(hs) {
                let want = half::f16::from_bits(h).to_f32();
                assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "{h:#06x}: {g} ({:#010x}) vs {want} ({:#010x})",
                    g.to_bits(),
                    want.to_bits()
                );
            }
        }
    }

    /// [`finite_scales`] converts every finite f16 scale and min as `half` does.
    #[test]
    fn finite_scales_match_half() {
        let lanes = |v: v128| {
            [
                f32x4_extract_lane::<0>(v),
                f32x4_extract_lane::<1>(v),
                f32x4_extract_lane::<2>(v),
                f32x4_extract_lane::<3>(v),
            ]
        };
        let finite: Vec<u16> = (0..=u16::MAX).filter(|h| h & 0x7C00 != 0x7C00).collect();
        for c in finite.chunks_exact(4) {
            // The min is another finite value (the chunk reversed).
            let h = |i: usize| u32::from(c[i]) | u32::from(c[3 - i]) << 16;
            let (d, m) = finite_scales(u32x4(h(0), h(1), h(2), h(3)), true);
            let (d_only, _) = finite_scales(u32x4(h(0), h(1), h(2), h(3)), false);
            for i in 0..4 {
                let want_d = half::f16::from_bits(c[i]).to_f32().to_bits();
                let want_m = half::f16::from_bits(c[3 - i]).to_f32().to_bits();
                assert_eq!(lanes(d)[i].to_bits(), want_d, "{:#06x}", c[i]);
                assert_eq!(lanes(d_only)[i].to_bits(), want_d, "{:#06x}", c[i]);
                assert_eq!(lanes(m)[i].to_bits(), want_m, "{:#06x}", c[3 - i]);
            }
        }
    }

    /// [`hsum4_i32`] puts each vector's lane sum in its lane.
    #[test]
    fn hsum4_gathers_each_vectors_sum() {
        let s = [
            i32x4(1, 2, 3, 4),
            i32x4(10, 20, 30, 40),
            i32x4(-5, 7, i32::MAX, 1),
            i32x4(100, -200, 300, -400),
        ];
        let v = hsum4_i32(s);
        let want = s.map(hsum_i32);
        assert_eq!(i32x4_extract_lane::<0>(v), want[0]);
        assert_eq!(i32x4_extract_lane::<1>(v), want[1]);
        assert_eq!(i32x4_extract_lane::<2>(v), want[2]);
        assert_eq!(i32x4_extract_lane::<3>(v), want[3]);
    }
}
