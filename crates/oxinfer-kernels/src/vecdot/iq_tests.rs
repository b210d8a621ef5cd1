//! The SIMD unpackers of the 256-weight IQ/TQ formats against the portable unpacker (bit for
//! bit), and the K-quant dot product of their blocks against the scalar path, on random blocks,
//! the all-zero and all-ones bit patterns, and extreme block scales.

use super::tests::{put_iq_d, random_row};
use super::*;
use crate::dequant::dequantize_row;
use crate::q8::quantize_q8k;

/// The 256-weight IQ/TQ formats (those [`unpack_k`] takes).
fn formats() -> impl Iterator<Item = WeightFormat> {
    WeightFormat::IQ
        .into_iter()
        .filter(|f| f.block_size() == 256)
}

/// Block scales at the ends of f16: the largest finite, the smallest subnormal, their
/// negatives, and zero.
const EXTREME_D: [f32; 5] = [65504.0, 5.960_464_5e-8, -65504.0, -5.960_464_5e-8, 0.0];

/// Test blocks of `format`: random bytes with sane scales, then, for each extreme `d`, random
/// bytes, all zeros and all ones (largest grid indices, every sign bit, the largest scale
/// codes) with that scale.
fn blocks(format: WeightFormat) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = (0..48).map(|seed| random_row(format, 256, seed)).collect();
    for (i, d) in EXTREME_D.into_iter().enumerate() {
        let d = half::f16::from_f32(d).to_le_bytes();
        let bb = format.block_bytes();
        for mut b in [
            random_row(format, 256, 100 + i as u64),
            vec![0; bb],
            vec![0xFF; bb],
        ] {
            put_iq_d(format, &mut b, d);
            out.push(b);
        }
    }
    out
}

/// Every field of two unpacked blocks is equal (floats by their bits).
fn assert_same(got: &KBlock, want: &KBlock, what: &str) {
    assert_eq!(got.q, want.q, "{what}: quants");
    assert_eq!(
        (got.sc, got.m),
        (want.sc, want.m),
        "{what}: scales and mins"
    );
    assert_eq!(
        (got.d.to_bits(), got.dmin.to_bits()),
        (want.d.to_bits(), want.dmin.to_bits()),
        "{what}: factors"
    );
}

/// Each ISA's unpacker gives the portable unpacker's block, bit for bit, including blocks whose
/// `d` bits are Inf or NaN (all ones).
#[test]
fn iq_simd_unpack_is_the_portable_unpack_bit_for_bit() {
    for format in formats() {
        for (i, b) in blocks(format).iter().enumerate() {
            let mut want = KBlock::default();
            unpack_k(format, b, &mut want);
            for isa in available_isas() {
                // Stale contents must not leak through: start from a block of other values.
                let mut got = KBlock {
                    q: [99; 256],
                    sc: [-7; 16],
                    m: [5; 16],
                    d: 3.0,
                    dmin: 4.0,
                };
                unpack_k_isa(format, b, &mut got, isa);
                assert_same(&got, &want, &format!("{format} {isa:?} block {i}"));
            }
        }
    }
}

/// The portable unpacker's integers times their scales are the reference dequantization (up to
/// the rounding of the scale factor), on the same blocks: the shared layout readers
/// (`dequant::iq_layout`) are checked against the gguf reference in `tests/dequant_reference.rs`,
/// and this ties the unpacked integers to them on the extreme blocks too.
#[test]
fn iq_unpacked_integers_are_the_reference_weights() {
    for format in formats() {
        for (i, b) in blocks(format).iter().enumerate() {
            let mut kb = KBlock::default();
            unpack_k(format, b, &mut kb);
            let mut want = [0f32; 256];
            dequantize_row(format, b, &mut want).unwrap();
            for (j, w) in want.iter().enumerate() {
                let got = kb.d * f32::from(kb.sc[j / 16]) * f32::from(kb.q[j]);
                let same = (got - w).abs() <= 1e-6 * w.abs() || (got.is_nan() && w.is_nan());
                assert!(same, "{format} block {i} weight {j}: {got} vs {w}");
            }
        }
    }
}

/// Rows of SIMD-unpacked blocks dotted by each ISA's K-quant kernel equal the scalar path
/// (portable unpack, scalar dot product) within float summation-order rounding, with finite
/// scales (the extreme ones included).
#[test]
fn iq_rows_dot_through_dot_kblock_as_the_scalar_path() {
    for format in formats() {
        let finite: Vec<Vec<u8>> = blocks(format)
            .into_iter()
            .filter(|b| {
                let (d, _) = crate::dequant::iq_layout::scale_codes(format, b);
                d.is_finite()
            })
            .collect();
        let x: Vec<f32> = (0..256 * finite.len())
            .map(|i| ((i * 7919) % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        let mut xq = vec![crate::q8::BlockQ8K::default(); finite.len()];
        quantize_q8k(&x, &mut xq);
        let mut plain = KBlock::default();
        let mut kb = KBlock::default();
        for isa in available_isas() {
            for (i, (b, y)) in finite.iter().zip(&xq).enumerate() {
                unpack_k(format, b, &mut plain);
                let want = dot_kblock(&plain, y, Isa::Scalar);
                unpack_k_isa(format, b, &mut kb, isa);
                let got = dot_kblock(&kb, y, isa);
                // Rounding scale: Σ |d sc q| · |d_y y| in f64.
                let mag: f64 = (0..256)
                    .map(|j| {
                        let sq = i32::from(plain.sc[j / 16]) * i32::from(plain.q[j]);
                        let w = f64::from(plain.d) * f64::from(sq);
                        (w * f64::from(y.d) * f64::from(y.qs[j])).abs()
                    })
                    .sum();
                let err = (f64::from(got) - f64::from(want)).abs();
                assert!(
                    err <= 1e-5 * mag + 1e-30,
                    "{format} {isa:?} block {i}: {got} vs scalar {want} (scale {mag})"
                );
            }
        }
    }
}
