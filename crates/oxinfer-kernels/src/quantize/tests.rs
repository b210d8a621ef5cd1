//! Round-trip error bounds of the quantizers, the split-format kernels against their scalar
//! twins and against dequantized-f32 arithmetic, and the parallel matrix quantizer.

use super::*;
use crate::dequant::dequantize_row_split;
use crate::dispatch::{available_isas, detected_isa, Isa};
use crate::q8::{quantize_q8, BlockQ8};
use crate::vecdot::{dot_split, dot_split_x4};
use proptest::prelude::*;

/// `n` values: mostly in ±`scale`, with occasional outliers and all-zero blocks.
fn row(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut v: Vec<f32> = (0..n)
        .map(|_| {
            let u = (next() % 20001) as f32 / 10_000.0 - 1.0;
            if next() % 97 == 0 {
                u * scale * 20.0
            } else {
                u * scale
            }
        })
        .collect();
    if n >= 64 && seed.is_multiple_of(3) {
        v[32..64].fill(0.0);
    }
    v
}

fn round_trip(format: WeightFormat, x: &[f32]) -> (Vec<u8>, Vec<u8>, Vec<f32>) {
    let n = x.len();
    let mut q = vec![0u8; format.row_bytes(n).unwrap()];
    let mut s = vec![0u8; format.row_scale_bytes(n).unwrap()];
    quantize_row(format, x, &mut q, &mut s).unwrap();
    let mut y = vec![0f32; n];
    dequantize_row_split(format, &q, &s, &mut y).unwrap();
    (q, s, y)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn q8_round_trip_within_half_a_step(blocks in 1usize..6, seed in any::<u64>(), e in -6i32..4) {
        let x = row(blocks * 32, seed, 10f32.powi(e));
        let (_, s, y) = round_trip(WeightFormat::Q8, &x);
        for (b, (xs, ys)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
            let d = f32::from_le_bytes(s[4 * b..4 * b + 4].try_into().unwrap());
            let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
            prop_assert!((d - amax / 127.0).abs() <= 1e-6 * d);
            for (a, r) in xs.iter().zip(ys) {
                // Half a step, plus the f32 rounding of `d · q` and of the difference (up to
                // 127 · 2^-24 of a step near `amax`: more than the step's own 1e-5 margin, so a
                // value on a rounding tie failed before).
                let bound = d * 0.5 * (1.0 + 1e-5) + (a.abs() + r.abs()) * f32::EPSILON;
                prop_assert!((a - r).abs() <= bound + f32::MIN_POSITIVE, "{a} vs {r}, d {d}");
            }
        }
    }

    #[test]
    fn q4_round_trip_within_half_a_step_or_the_clamp(blocks in 1usize..6, seed in any::<u64>(), e in -3i32..4) {
        let x = row(blocks * 32, seed, 10f32.powi(e));
        let (_, s, y) = round_trip(WeightFormat::Q4, &x);
        for (b, (xs, ys)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
            let d = half::f16::from_le_bytes([s[2 * b], s[2 * b + 1]]).to_f32();
            let m = xs.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
            // d is m / -8 rounded to f16 (relative error ≤ 2^-11).
            prop_assert!((d - m / -8.0).abs() <= (m / 8.0).abs() * 4.9e-4);
            for (a, r) in xs.iter().zip(ys) {
                let steps = a / d;
                // values past 7.5 steps on the far side clamp to q = 15 (Q4_0's asymmetry)
                let bound = if steps > 7.5 { (steps - 7.0) * d.abs() } else { d.abs() * 0.5 };
                prop_assert!((a - r).abs() <= bound * (1.0 + 1e-3) + 1e-9, "{a} vs {r}, d {d}");
            }
            // the clamp only ever costs up to one step (+ f16 rounding of d)
            for (a, r) in xs.iter().zip(ys) {
                prop_assert!((a - r).abs() <= d.abs() * 1.01 + 1e-9);
            }
        }
    }

    #[test]
    fn split_kernels_match_scalar_twin_and_f32(fi in 0usize..2, blocks in 1usize..27, seed in any::<u64>()) {
        let format = WeightFormat::SPLIT[fi];
        let n = blocks * 32;
        let w = row(n, seed, 0.05);
        let (q, s, wf) = round_trip(format, &w);
        let xs: Vec<Vec<f32>> = (0..4).map(|k| row(n, seed ^ (k + 11), 1.0)).collect();
        let acts: Vec<Vec<BlockQ8>> = xs
            .iter()
            .map(|x| {
                let mut a = vec![BlockQ8::default(); blocks];
                quantize_q8(x, &mut a);
                a
            })
            .collect();
        let refs = [&acts[0][..], &acts[1][..], &acts[2][..], &acts[3][..]];
        let four = dot_split_x4(format, &q, &s, refs, detected_isa());
        for k in 0..4 {
            let plain = dot_split(format, &q, &s, refs[k], Isa::Scalar);
            let simd = dot_split(format, &q, &s, refs[k], detected_isa());
            let mag: f32 = wf.iter().zip(&xs[k]).map(|(a, b)| (a * b).abs()).sum::<f32>().max(1e-6);
            prop_assert!((plain - simd).abs() <= 1e-5 * mag, "{format}: scalar {plain} vs simd {simd}");
            prop_assert!((four[k] - simd).abs() <= 1e-5 * mag);
            // against f32 arithmetic on the dequantized weights: int8 activations cost at most
            // half an activation step per weight
            let exact: f64 = wf.iter().zip(&xs[k]).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
            let amax = xs[k].iter().fold(0f32, |m, v| m.max(v.abs()));
            let bound = 0.5 * wf.iter().map(|a| a.abs()).sum::<f32>() * amax / 127.0 + 1e-4 * mag;
            prop_assert!((f64::from(plain) - exact).abs() <= f64::from(bound) + 1e-6, "{format}: {plain} vs {exact}");
        }
    }
}

#[test]
fn matrix_quantizer_is_deterministic_and_matches_row_quantizer() {
    let (rows, cols) = (300, 96);
    let x = row(rows * cols, 7, 0.1);
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let src = WeightMatrix::new(WeightFormat::F32, &bytes, rows, cols).unwrap();
    for format in TARGETS {
        let got = quantize_matrix(&src, format).unwrap();
        let m = got.matrix(rows, cols).unwrap();
        for r in [0, 1, 150, rows - 1] {
            let (q, s, y) = round_trip(format, &x[r * cols..(r + 1) * cols]);
            assert_eq!(m.row(r), &q[..], "{format} row {r}");
            assert_eq!(m.row_scales(r), &s[..], "{format} row {r}");
            let mut back = vec![0f32; cols];
            m.dequantize_row_into(r, &mut back);
            assert_eq!(back, y);
        }
    }
}

#[test]
fn bad_input_is_refused() {
    let mut x = row(64, 1, 1.0);
    x[40] = f32::NAN;
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let src = WeightMatrix::new(WeightFormat::F32, &bytes, 2, 32).unwrap();
    let e = quantize_matrix(&src, WeightFormat::Q8).unwrap_err();
    assert!(
        e.to_string().contains("weight 40") && e.to_string().contains("NaN"),
        "{e}"
    );
    let src = WeightMatrix::new(WeightFormat::F32, &bytes, 4, 16).unwrap();
    let e = quantize_matrix(&src, WeightFormat::Q4).unwrap_err();
    assert!(
        matches!(e, KernelError::NotBlockMultiple { n: 16, .. }),
        "{e}"
    );
    // Q4's f16 scale overflows past 8 * 65504
    let big = vec![1e6f32; 32];
    let mut q = [0u8; 16];
    let mut s = [0u8; 2];
    let e = quantize_row(WeightFormat::Q4, &big, &mut q, &mut s).unwrap_err();
    assert!(e.to_string().contains("overflows f16"), "{e}");
    let e = quantize_row(WeightFormat::Q4_0, &big, &mut q, &mut s).unwrap_err();
    assert!(e.to_string().contains("not a quantization target"), "{e}");
    // a split matrix needs its scales
    let e = WeightMatrix::new(WeightFormat::Q8, &[0; 32], 1, 32).unwrap_err();
    assert!(e.to_string().contains("4 scale bytes"), "{e}");
    let e = dequantize_row_split(WeightFormat::Q4, &[0; 16], &[0; 3], &mut [0.0; 32]).unwrap_err();
    assert!(e.to_string().contains("takes 2 scale bytes, but 3"), "{e}");
}

#[test]
fn matmul_fast_matches_reference_on_split_formats() {
    let (rows, cols, t) = (37, 416, 6);
    let w = row(rows * cols, 3, 0.05);
    let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    let src = WeightMatrix::new(WeightFormat::F32, &bytes, rows, cols).unwrap();
    let x = row(t * cols, 5, 1.0);
    for format in WeightFormat::SPLIT {
        let qz = quantize_matrix(&src, format).unwrap();
        let m = qz.matrix(rows, cols).unwrap();
        let mut fast = vec![0f32; t * rows];
        let mut reference = vec![0f32; t * rows];
        crate::fast::matmul_fast(&m, &x, t, &mut fast, detected_isa());
        crate::matmul_reference(&m, &x, t, &mut reference);
        for (i, (a, b)) in fast.iter().zip(&reference).enumerate() {
            let (ti, r) = (i / rows, i % rows);
            let wabs: f32 = (0..cols).map(|c| w[r * cols + c].abs()).sum();
            let amax = x[ti * cols..(ti + 1) * cols]
                .iter()
                .fold(0f32, |m, v| m.max(v.abs()));
            assert!(
                (a - b).abs() <= 0.5 * wabs * amax / 127.0 + 1e-4,
                "{format} {i}: {a} vs {b}"
            );
        }
    }
}

/// Every instruction set's quantizer against the scalar reference on `x`: the same bytes, or
/// the same error.
fn same_as_scalar(format: WeightFormat, x: &[f32]) -> Result<(), TestCaseError> {
    let n = x.len();
    let (qb, sb) = (
        format.row_bytes(n).unwrap(),
        format.row_scale_bytes(n).unwrap(),
    );
    let run = |isa| {
        let (mut q, mut s) = (vec![0u8; qb], vec![0u8; sb]);
        quantize_row_isa(format, x, &mut q, &mut s, isa)
            .map(|()| (q, s))
            .map_err(|e| e.to_string())
    };
    let want = run(Isa::Scalar);
    for isa in available_isas() {
        prop_assert_eq!(&run(isa), &want, "{} on {:?}", format, isa);
    }
    Ok(())
}

/// A block of 32 whose values sit exactly on Q8 / Q4 rounding ties: with the block maximum
/// chosen so that the inverse scale is exact, `x * id` lands on `k + 1/2` (Q8's round) and
/// `x * id + 8.5` on integers (Q4's floor), both signs.
fn ties(seed: u64, format: WeightFormat) -> Vec<f32> {
    let mut v = row(32, seed, 1.0);
    let (anchor, step) = if format == WeightFormat::Q4 {
        (-8.0f32, 1.0f32) // m = -8: d = 1, id = 1
    } else {
        (127.0, 1.0) // amax = 127: d = 1, id = 1
    };
    let scale = 2f32.powi((seed % 9) as i32 - 4);
    for (j, x) in v.iter_mut().enumerate() {
        let k = ((j as i64 * 7 + seed as i64) % 15 - 7) as f32;
        *x = match j % 4 {
            0 => (k + 0.5) * step,
            1 => -(k + 0.5) * step,
            2 => k * step,
            _ => *x * 7.0,
        } * scale;
    }
    v[(seed % 32) as usize] = anchor * scale;
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn simd_quantizers_write_the_scalar_bytes(fi in 0usize..3, blocks in 1usize..9, seed in any::<u64>(), e in -40i32..6) {
        let format = TARGETS[fi];
        let mut x = row(blocks * 32 + if format == WeightFormat::BF16 { (seed % 7) as usize } else { 0 }, seed, 10f32.powi(e));
        if seed % 5 == 0 {
            let n = x.len().min(32);
            x[..n].copy_from_slice(&ties(seed, if format == WeightFormat::Q4 { format } else { WeightFormat::Q8 })[..n]);
        }
        same_as_scalar(format, &x)?;
    }

    #[test]
    fn simd_quantizers_write_the_scalar_bytes_on_ties(fi in 0usize..2, seed in any::<u64>()) {
        let format = WeightFormat::SPLIT[fi];
        let mut x = ties(seed, format);
        x.extend(ties(seed.wrapping_add(1), format));
        same_as_scalar(format, &x)?;
    }
}

#[test]
fn simd_quantizers_match_the_scalar_reference_on_edge_cases() {
    let zeros = vec![0f32; 64];
    let mut signed_zeros = vec![-0.0f32; 64];
    signed_zeros[3] = 0.0;
    // Q8's inverse scale overflows for blocks this small (d = amax / 127 is subnormal)
    let tiny: Vec<f32> = (0..64).map(|i| (i as f32 - 31.5) * 1e-40).collect();
    let subnormal_q4: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) * 1e-9).collect();
    // Q4: the first of two equal maxima of opposite sign decides the scale's sign
    let mut two_max = row(64, 11, 1.0);
    two_max[5] = -3.0;
    two_max[9] = 3.0;
    let big = vec![1e6f32; 64]; // Q4's f16 scale overflows; Q8 and BF16 are fine
    let mut huge = row(64, 12, 1.0);
    huge[40] = 3e38; // BF16 rounds up to infinity, as half does
    let mut nan = row(64, 13, 1.0);
    nan[45] = f32::NAN;
    let mut inf = row(64, 14, 1.0);
    inf[7] = f32::NEG_INFINITY;
    for x in [
        &zeros,
        &signed_zeros,
        &tiny,
        &subnormal_q4,
        &two_max,
        &big,
        &huge,
        &nan,
        &inf,
    ] {
        for format in TARGETS {
            same_as_scalar(format, x).unwrap();
        }
    }
    let mut q = [0u8; 64];
    let mut s = [0u8; 4];
    let e = quantize_row_isa(WeightFormat::Q4, &big, &mut q[..32], &mut s, detected_isa());
    assert!(e.unwrap_err().to_string().contains("overflows f16"));
    let e = quantize_row_isa(
        WeightFormat::Q8,
        &nan,
        &mut q,
        &mut [0u8; 8],
        detected_isa(),
    );
    let e = e.unwrap_err().to_string();
    assert!(e.contains("weight 45") && e.contains("NaN"), "{e}");
}

/// The case proptest found under qemu (seed 11326935492721142097, one block at 1e-6): a value on
/// a rounding tie, half a step plus the product's rounding away.
#[test]
fn q8_round_trip_tie_case() {
    let x = row(32, 11_326_935_492_721_142_097, 1e-6);
    let (_, s, y) = round_trip(WeightFormat::Q8, &x);
    let d = f32::from_le_bytes(s[..4].try_into().unwrap());
    for (a, r) in x.iter().zip(&y) {
        let bound = d * 0.5 * (1.0 + 1e-5) + (a.abs() + r.abs()) * f32::EPSILON;
        assert!(
            (a - r).abs() <= bound + f32::MIN_POSITIVE,
            "{a} vs {r}, d {d}"
        );
    }
}
