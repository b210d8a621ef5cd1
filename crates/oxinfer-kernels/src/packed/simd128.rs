//! SIMD128 micro-kernels over the packed layouts of Q4_0, Q4_1, Q8_0 and IQ4_NL, for the wasm
//! builds: one token at a time against a group of eight interleaved rows.
//!
//! A 16-byte half of a packed quant register (`W_j`) holds quants `4j .. 4j + 4` of four
//! lanes. Widened to i16 (two lanes per vector) and multiplied with the token's four
//! activations broadcast to both halves (`i32x4.dot_i16x8_s`), it gives each lane's sum in two
//! i32 halves; these add up over the block in four vectors (lanes 0-1, 2-3, 4-5, 6-7), one
//! pair of shuffles per four lanes folds them into one vector of lane sums, and the block's
//! scales (eight f16s read as one vector) apply to the eight rows in two f32x4. The weights
//! are read as one sequential stream (what the row-major kernels cannot do for several rows).
//!
//! With relaxed SIMD ([`crate::dispatch::Isa::RelaxedSimd128`], a build with
//! `+relaxed-simd`), the kernels take their integer sums with
//! `i32x4.relaxed_dot_i8x16_i7x16_add_s` instead ([`Relaxed`]): the same integers, so the same
//! bits as the SIMD128 kernels. The float step is one function for both ([`group`]).
//!
//! Float steps: the scalar twin's (`super::scalar::lane32`) in its order, with a rounded
//! multiply and add where the twin fuses them (baseline SIMD128 has no fused multiply-add), so
//! the two agree within that rounding, not bit for bit.
#![cfg(all(target_arch = "wasm32", target_feature = "simd128"))]

use super::pack::{packed_block_bytes, qs_offset, LANES};
use super::tiles::TILE_TOKENS;
use crate::dequant::KVALUES_IQ4NL;
use crate::fast::Acts;
use crate::format::WeightFormat;
use crate::q8::BlockQ8;
use std::arch::wasm32::*;

/// Whether [`tile`] has a kernel for `format` (every format with a relaxed kernel has a
/// SIMD128 one).
pub(crate) fn handles(format: WeightFormat) -> bool {
    Widen::handles(format)
}

/// See `super::run_tile`, the integer sums taken by `S`; `false` (nothing written) for a
/// format without a kernel in `S`.
pub(crate) fn tile<S: BlockSums>(
    format: WeightFormat,
    g: &[u8],
    nb: usize,
    acts: &Acts,
    ti: usize,
    n: usize,
    tile: &mut [[f32; LANES]; TILE_TOKENS],
) -> bool {
    let Acts::Q8(q) = acts else { return false };
    if !S::handles(format) {
        return false;
    }
    // One monomorphic loop per format, so the format's match folds away.
    macro_rules! go {
        ($($f:ident)|*) => {
            match format {
                $(WeightFormat::$f => {
                    for (k, lanes) in tile.iter_mut().take(n).enumerate() {
                        let x = &q[(ti + k) * nb..(ti + k + 1) * nb];
                        *lanes = group::<S>(WeightFormat::$f, g, x);
                    }
                    true
                })*
                _ => false,
            }
        };
    }
    go!(Q4_0 | Q4_1 | Q8_0 | IQ4_NL)
}

/// The 16 bytes of `s` at `at`.
#[inline(always)]
fn load_at(s: &[u8], at: usize) -> v128 {
    let b: &[u8; 16] = s[at..at + 16].try_into().expect("16 bytes");
    // SAFETY: `b` is 16 readable bytes; wasm loads have no alignment requirement.
    unsafe { v128_load(b.as_ptr().cast()) }
}

/// Eight f16s (one vector) as two f32x4, exactly as `half` converts them.
#[inline(always)]
fn f16x8_to_f32(v: v128) -> [v128; 2] {
    let exp = v128_and(v, u16x8_splat(0x7C00));
    if v128_any_true(i16x8_eq(exp, i16x8_splat(0x7C00))) {
        // An infinite or NaN scale (a broken file): the exact conversion.
        let (lo, hi) = (u32x4_extend_low_u16x8(v), u32x4_extend_high_u16x8(v));
        return [
            crate::vecdot::simd128_f16x4_to_f32(lo),
            crate::vecdot::simd128_f16x4_to_f32(hi),
        ];
    }
    // A finite f16 `s eeeee mmmmmmmmmm` as f32 bits `s 000eeeee mmmmmmmmmm 0…0` (its value
    // times 2⁻¹¹², exactly, subnormals included), built in 16-bit halves: the low half is
    // `v << 13`, the high half `v >> 3` (arithmetic: the sign lands in bits 12-15) with bits
    // 12-14 cleared; the halves interleaved give the eight f32s, and a multiply by 2¹¹²
    // (exact) rebiases the exponent.
    let low = i16x8_shl(v, 13);
    let high = v128_and(i16x8_shr(v, 3), u16x8_splat(0x8FFF));
    let two112 = f32x4_splat(f32::from_bits(0x7780_0000));
    [
        f32x4_mul(i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(low, high), two112),
        f32x4_mul(
            i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(low, high),
            two112,
        ),
    ]
}

/// Adds the products of one 16-byte half of a quant register (four lanes × four quants, as
/// signed bytes after `widen`) with the broadcast activations `xw` to `p[0]` (its first two
/// lanes) and `p[1]` (the other two).
#[inline(always)]
fn half_sums(w: v128, xw: v128, signed: bool, p: &mut [v128; 2]) {
    let (a, b) = if signed {
        (i16x8_extend_low_i8x16(w), i16x8_extend_high_i8x16(w))
    } else {
        (u16x8_extend_low_u8x16(w), u16x8_extend_high_u8x16(w))
    };
    p[0] = i32x4_add(p[0], i32x4_dot_i16x8(a, xw));
    p[1] = i32x4_add(p[1], i32x4_dot_i16x8(b, xw));
}

/// Lane sums of four lanes from their halves (`p[0]`: lanes 0, 0, 1, 1; `p[1]`: 2, 2, 3, 3).
#[inline(always)]
fn fold(p: [v128; 2]) -> v128 {
    i32x4_add(
        i32x4_shuffle::<0, 2, 4, 6>(p[0], p[1]),
        i32x4_shuffle::<1, 3, 5, 7>(p[0], p[1]),
    )
}

/// The integer part of one packed block against one token: the eight lanes' sums of quant ×
/// activation (lanes 0-3, 4-7), exactly the scalar twin's `sumi` (unsigned nibbles for Q4_0 and
/// Q4_1, whose offset and min the float step applies).
pub(crate) trait BlockSums {
    /// Whether there is a kernel for `format`.
    fn handles(format: WeightFormat) -> bool;
    /// The sums of block `blk` (one packed block of `format`) with the token's block `y`.
    fn sums(format: WeightFormat, blk: &[u8], y: &BlockQ8) -> [v128; 2];
}

/// SIMD128: quants and activations widened to i16, `i32x4.dot_i16x8_s`.
pub(crate) struct Widen;

/// The IQ4_NL values as one vector (a table for `i8x16.swizzle`).
#[inline(always)]
fn iq4nl_table() -> v128 {
    let t: &[i8; 16] = &KVALUES_IQ4NL;
    // SAFETY: `t` is 16 readable bytes; wasm loads have no alignment requirement.
    unsafe { v128_load(t.as_ptr().cast()) }
}

impl BlockSums for Widen {
    fn handles(format: WeightFormat) -> bool {
        matches!(
            format,
            WeightFormat::Q4_0 | WeightFormat::Q4_1 | WeightFormat::Q8_0 | WeightFormat::IQ4_NL
        )
    }

    #[inline(always)]
    fn sums(format: WeightFormat, blk: &[u8], y: &BlockQ8) -> [v128; 2] {
        let qo = qs_offset(format);
        let table = iq4nl_table();
        // The token's 32 activations as i16 (quants 0..8, 8..16, 16..24, 24..32), then
        // quants 4j .. 4j + 4 in both 64-bit halves for W_j.
        let (a0, a1) = (load_i8(&y.qs, 0), load_i8(&y.qs, 16));
        let a16 = [
            i16x8_extend_low_i8x16(a0),
            i16x8_extend_high_i8x16(a0),
            i16x8_extend_low_i8x16(a1),
            i16x8_extend_high_i8x16(a1),
        ];
        let xw = |j: usize| {
            let v = a16[j / 2];
            if j.is_multiple_of(2) {
                i64x2_shuffle::<0, 0>(v, v)
            } else {
                i64x2_shuffle::<1, 1>(v, v)
            }
        };
        // Lanes 0-3 and 4-7, each as two vectors of halves. (The loops over registers are
        // written out: LLVM keeps `for j in 0..8` as a loop, with `a16` in linear memory.)
        let mut p = [[i32x4_splat(0); 2]; 2];
        if format == WeightFormat::Q8_0 {
            let mut reg = |j: usize| {
                let x = xw(j);
                half_sums(load_at(blk, qo + 32 * j), x, true, &mut p[0]);
                half_sums(load_at(blk, qo + 32 * j + 16), x, true, &mut p[1]);
            };
            reg(0);
            reg(1);
            reg(2);
            reg(3);
            reg(4);
            reg(5);
            reg(6);
            reg(7);
        } else {
            // Chunk c: W_2c in the low nibbles, W_2c+1 in the high ones.
            let mut chunk = |c: usize| {
                let (x_lo, x_hi) = (xw(2 * c), xw(2 * c + 1));
                for (h, ph) in p.iter_mut().enumerate() {
                    let v = load_at(blk, qo + 32 * c + 16 * h);
                    let (lo, hi) = (v128_and(v, u8x16_splat(0x0F)), u8x16_shr(v, 4));
                    if format == WeightFormat::IQ4_NL {
                        let (lo, hi) = (i8x16_swizzle(table, lo), i8x16_swizzle(table, hi));
                        half_sums(lo, x_lo, true, ph);
                        half_sums(hi, x_hi, true, ph);
                    } else {
                        half_sums(lo, x_lo, false, ph);
                        half_sums(hi, x_hi, false, ph);
                    }
                }
            };
            chunk(0);
            chunk(1);
            chunk(2);
            chunk(3);
        }
        [fold(p[0]), fold(p[1])]
    }
}

/// Relaxed SIMD: `i32x4.relaxed_dot_i8x16_i7x16_add_s` multiplies a 16-byte half of a quant
/// register (four lanes × four quants) with the token's four activations of that register
/// broadcast, and sums each lane's four products into its i32 lane: one instruction per half
/// register, no widening and no folding. Its unsigned operand must be 0..=127 for a defined
/// result: the Q4_0 / Q4_1 nibbles are; IQ4_NL values (−127..=113) go in as `v + 128` split
/// into two tables of 0..=127 with `128 Σ activations` taken off; a Q8_0 quant `q` (a full
/// signed byte) is `(q & 0x7F) − 128 · (q >> 7)` (its top bit as 0 or 1), two products of
/// 0..=127 operands.
#[cfg(target_feature = "relaxed-simd")]
pub(crate) struct Relaxed;

#[cfg(target_feature = "relaxed-simd")]
impl BlockSums for Relaxed {
    fn handles(format: WeightFormat) -> bool {
        Widen::handles(format)
    }

    #[inline(always)]
    fn sums(format: WeightFormat, blk: &[u8], y: &BlockQ8) -> [v128; 2] {
        use crate::vecdot::simd128_relaxed::{dot_u7, iq4nl_u7_tables, sum_acts};
        let qo = qs_offset(format);
        let a = [load_i8(&y.qs, 0), load_i8(&y.qs, 16)];
        // Activations 4j .. 4j + 4 in every i32 lane, for W_j.
        let xw = |j: usize| {
            let v = a[j / 4];
            match j % 4 {
                0 => i32x4_shuffle::<0, 0, 0, 0>(v, v),
                1 => i32x4_shuffle::<1, 1, 1, 1>(v, v),
                2 => i32x4_shuffle::<2, 2, 2, 2>(v, v),
                _ => i32x4_shuffle::<3, 3, 3, 3>(v, v),
            }
        };
        let iq = format == WeightFormat::IQ4_NL;
        let [t1, t2] = iq4nl_u7_tables();
        let start = if iq {
            // −128 Σ activations in every lane (the tables hold value + 128).
            let s = sum_acts(a);
            let s = i32x4_add(s, i32x4_shuffle::<1, 0, 3, 2>(s, s));
            let s = i32x4_add(s, i32x4_shuffle::<2, 3, 0, 1>(s, s));
            i32x4_mul(s, i32x4_splat(-128))
        } else {
            i32x4_splat(0)
        };
        let mut p = [start; 2];
        if format == WeightFormat::Q8_0 {
            // The low seven bits' products in `p`, the top bits' in `neg`.
            let mut neg = [i32x4_splat(0); 2];
            let mut reg = |j: usize| {
                let x = xw(j);
                for (h, (ph, nh)) in p.iter_mut().zip(&mut neg).enumerate() {
                    let v = load_at(blk, qo + 32 * j + 16 * h);
                    *ph = dot_u7(*ph, x, v128_and(v, u8x16_splat(0x7F)));
                    *nh = dot_u7(*nh, x, u8x16_shr(v, 7));
                }
            };
            reg(0);
            reg(1);
            reg(2);
            reg(3);
            reg(4);
            reg(5);
            reg(6);
            reg(7);
            return [
                i32x4_sub(p[0], i32x4_shl(neg[0], 7)),
                i32x4_sub(p[1], i32x4_shl(neg[1], 7)),
            ];
        }
        // Chunk c: W_2c in the low nibbles, W_2c+1 in the high ones (written out, as above).
        let mut chunk = |c: usize| {
            let (x_lo, x_hi) = (xw(2 * c), xw(2 * c + 1));
            for (h, ph) in p.iter_mut().enumerate() {
                let v = load_at(blk, qo + 32 * c + 16 * h);
                let (lo, hi) = (v128_and(v, u8x16_splat(0x0F)), u8x16_shr(v, 4));
                if iq {
                    *ph = dot_u7(*ph, x_lo, i8x16_swizzle(t1, lo));
                    *ph = dot_u7(*ph, x_lo, i8x16_swizzle(t2, lo));
                    *ph = dot_u7(*ph, x_hi, i8x16_swizzle(t1, hi));
                    *ph = dot_u7(*ph, x_hi, i8x16_swizzle(t2, hi));
                } else {
                    *ph = dot_u7(dot_u7(*ph, x_lo, lo), x_hi, hi);
                }
            }
        };
        chunk(0);
        chunk(1);
        chunk(2);
        chunk(3);
        p
    }
}

/// The eight lanes of one packed group `g` of `format` dotted with one token's blocks `x`,
/// the integer sums taken by `S`.
#[inline(always)]
fn group<S: BlockSums>(format: WeightFormat, g: &[u8], x: &[BlockQ8]) -> [f32; LANES] {
    let pb = packed_block_bytes(format).expect("a packed format");
    let mut acc = [f32x4_splat(0.0); 2];
    for (blk, y) in g.chunks_exact(pb).zip(x) {
        let blk = &blk[..pb];
        let p = S::sums(format, blk, y);
        let s = [f32x4_convert_i32x4(p[0]), f32x4_convert_i32x4(p[1])];
        let d = f16x8_to_f32(load_at(blk, 0));
        let m = if format == WeightFormat::Q4_1 {
            f16x8_to_f32(load_at(blk, 16))
        } else {
            [f32x4_splat(0.0); 2]
        };
        let (yd, ys) = (f32x4_splat(y.d), f32x4_splat(y.s));
        for h in 0..2 {
            // The twin's `acc = (d * y.d).mul_add(s, acc)`, then its min or offset term.
            acc[h] = f32x4_add(acc[h], f32x4_mul(f32x4_mul(d[h], yd), s[h]));
            match format {
                WeightFormat::Q4_1 => acc[h] = f32x4_add(acc[h], f32x4_mul(m[h], ys)),
                WeightFormat::Q4_0 => {
                    let off = f32x4_neg(f32x4_mul(d[h], f32x4_splat(8.0)));
                    acc[h] = f32x4_add(acc[h], f32x4_mul(off, ys));
                }
                _ => {}
            }
        }
    }
    let mut out = [0f32; LANES];
    for (h, a) in acc.into_iter().enumerate() {
        out[4 * h] = f32x4_extract_lane::<0>(a);
        out[4 * h + 1] = f32x4_extract_lane::<1>(a);
        out[4 * h + 2] = f32x4_extract_lane::<2>(a);
        out[4 * h + 3] = f32x4_extract_lane::<3>(a);
    }
    out
}

/// 16 signed bytes of `s` at `at`.
#[inline(always)]
fn load_i8(s: &[i8; 32], at: usize) -> v128 {
    let b: &[i8; 16] = s[at..at + 16].try_into().expect("16 bytes");
    // SAFETY: `b` is 16 readable bytes; wasm loads have no alignment requirement.
    unsafe { v128_load(b.as_ptr().cast()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`f16x8_to_f32`] converts every f16 as `half` does (NaNs: both NaN), eight at a time
    /// (a vector with an infinity or NaN takes the exact path; the others the fast one).
    #[test]
    fn f16x8_to_f32_matches_half_on_every_value() {
        let all: Vec<u16> = (0..=u16::MAX).collect();
        // The finite values alone (the fast path), then every value (both paths).
        let finite: Vec<u16> = all
            .iter()
            .copied()
            .filter(|h| h & 0x7C00 != 0x7C00)
            .collect();
        for set in [&finite, &all] {
            for c in set.chunks_exact(8) {
                let b: Vec<u8> = c.iter().flat_map(|h| h.to_le_bytes()).collect();
                let [lo, hi] = f16x8_to_f32(load_at(&b, 0));
                let lane = |v: v128, i: usize| match i {
                    0 => f32x4_extract_lane::<0>(v),
                    1 => f32x4_extract_lane::<1>(v),
                    2 => f32x4_extract_lane::<2>(v),
                    _ => f32x4_extract_lane::<3>(v),
                };
                for (i, &h) in c.iter().enumerate() {
                    let got = lane(if i < 4 { lo } else { hi }, i % 4);
                    let want = half::f16::from_bits(h).to_f32();
                    assert!(
                        got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                        "{h:#06x}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
