//! Two-term activations against the exact product (the scalar reference matmul: f32
//! activations, dequantized weights) on every kernel path this CPU has: the row-major fast
//! kernels and the packed ones (SIMD and their scalar twin), on random shapes and activations
//! with outliers. The error must stay inside the bound the second term's rounding allows, and
//! far below the one-term (int8) error.

use super::*;
use crate::dispatch::available_isas;
use crate::matrix::WeightMatrix;
use crate::packed::{matmul_packed_isa, PackedMatrix};
use crate::synthetic::random_matrix;
use proptest::prelude::*;

const FORMATS: [WeightFormat; 7] = [
    WeightFormat::Q4_0,
    WeightFormat::Q4_1,
    WeightFormat::Q5_0,
    WeightFormat::Q8_0,
    WeightFormat::Q4K,
    WeightFormat::Q6K,
    WeightFormat::F16,
];

/// Activations in [-1, 1] with every 37th value an outlier of ±20 (what makes int8 blocks
/// coarse in real models).
fn acts(n: usize, seed: u64) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let v = (i as u64 ^ seed).wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
            let u = (v % 2001) as f32 / 1000.0 - 1.0;
            if (i as u64 + seed).is_multiple_of(37) {
                20.0 * u.signum()
            } else {
                u
            }
        })
        .collect()
}

/// Per value of `x` (`[t, cols]`), half a step of the second term's int8 scale: the most the
/// two-term activation may be off by.
fn second_term_half_steps(format: WeightFormat, x: &[f32], t: usize, cols: usize) -> Vec<f32> {
    let split = split_two_term(format, x, t, cols);
    let block = match act_kind(format) {
        ActKind::Q8 => 32,
        ActKind::Q8K => 256,
        ActKind::F32 => return vec![0.0; t * cols],
    };
    let mut out = Vec::with_capacity(t * cols);
    for pair in split.chunks_exact(2 * cols) {
        for blk in pair[cols..].chunks_exact(block) {
            out.extend(std::iter::repeat_n(block_step(blk) / 2.0, block));
        }
    }
    out
}

/// Per value of `x` (`[t, cols]`), the variance of the one-term (int8) rounding error: a
/// step `d1 = amax / 127` of the value's block, the error uniform in ±d1/2, so d1² / 12.
/// Zero for float formats.
fn first_term_variances(format: WeightFormat, x: &[f32]) -> Vec<f32> {
    let block = match act_kind(format) {
        ActKind::Q8 => 32,
        ActKind::Q8K => 256,
        ActKind::F32 => return vec![0.0; x.len()],
    };
    let mut out = Vec::with_capacity(x.len());
    for blk in x.chunks_exact(block) {
        out.extend(std::iter::repeat_n(block_step(blk).powi(2) / 12.0, block));
    }
    out
}

/// The int8 step of one activation block: its largest magnitude over 127.
fn block_step(blk: &[f32]) -> f32 {
    blk.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0
}

fn check(format: WeightFormat, rows: usize, blocks: usize, t: usize, seed: u64) {
    let cols = blocks * format.block_size().max(256);
    let data = random_matrix(format, rows, cols, seed).unwrap();
    let w = WeightMatrix::new(format, &data, rows, cols).unwrap();
    let x = acts(t * cols, seed);
    let mut exact = vec![0f32; t * rows];
    crate::matmul_reference(&w, &x, t, &mut exact);
    let mut dense = vec![0f32; cols];
    let half_steps = second_term_half_steps(format, &x, t, cols);
    let variances1 = first_term_variances(format, &x);
    // |y - exact| ≤ Σ |w| · half step (the second term's rounding) + float slack.
    let mut bound = vec![0f32; t * rows];
    // The expected squared one-term error over all outputs: Σ w² · d1² / 12.
    let mut expected_err1 = 0f64;
    for r in 0..rows {
        crate::dequantize_row(
            format,
            &data[r * w.row_bytes()..(r + 1) * w.row_bytes()],
            &mut dense,
        )
        .unwrap();
        for k in 0..t {
            let span = k * cols..(k + 1) * cols;
            let (xs, hs, vs) = (
                &x[span.clone()],
                &half_steps[span.clone()],
                &variances1[span],
            );
            let (mut b, mut mag) = (0f32, 0f32);
            for (((&wv, &xv), &h), &v) in dense.iter().zip(xs).zip(hs).zip(vs) {
                b += wv.abs() * h;
                mag += (wv * xv).abs();
                expected_err1 += f64::from(wv).powi(2) * f64::from(v);
            }
            bound[k * rows + r] = b * 1.001 + mag * 2e-5 + 1e-6;
        }
    }
    let split = split_two_term(format, &x, t, cols);
    let packed = PackedMatrix::pack(&w);
    for isa in available_isas() {
        let mut y2 = vec![0f32; 2 * t * rows];
        let mut runs: Vec<(&str, Vec<f32>, Vec<f32>)> = Vec::new();
        crate::fast::matmul_fast(&w, &split, 2 * t, &mut y2, isa);
        let mut one = vec![0f32; t * rows];
        crate::fast::matmul_fast(&w, &x, t, &mut one, isa);
        runs.push(("row-major", y2.clone(), one));
        if let Some(p) = &packed {
            matmul_packed_isa(p, &split, 2 * t, &mut y2, isa);
            let mut one = vec![0f32; t * rows];
            matmul_packed_isa(p, &x, t, &mut one, isa);
            runs.push(("packed", y2.clone(), one));
        }
        for (path, y2, one) in runs {
            let mut y = vec![0f32; t * rows];
            sum_two_term(&y2, t, rows, &mut y);
            let (mut err2, mut err1) = (0f64, 0f64);
            for i in 0..t * rows {
                let d = (y[i] - exact[i]).abs();
                assert!(
                    d <= bound[i],
                    "{format} {path} {isa:?} rows {rows} cols {cols} t {t}: output {i} off by {d} > bound {}",
                    bound[i]
                );
                err2 += f64::from(d).powi(2);
                err1 += f64::from(one[i] - exact[i]).powi(2);
            }
            // Far below the one-term error: compared with its expectation, not with this
            // draw's (a single output's int8 error can cancel to a tenth of its spread, and
            // then a realized ratio says nothing). The two-term step is d1 / 254, so its
            // expected error² is ~1.5e-5 of the one-term's; 1e-3 leaves room for a draw 60
            // times its expectation.
            if rounds_activations(format) {
                assert!(
                    err2 < expected_err1 * 1e-3,
                    "{format} {path} {isa:?}: two-term error² {err2} not far below int8's \
                     expected {expected_err1} (this draw's: {err1})"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn two_term_product_is_within_the_second_terms_rounding(
        f in 0..FORMATS.len(),
        rows in 1usize..21,
        blocks in 1usize..3,
        t in 1usize..6,
        seed in any::<u64>(),
    ) {
        check(FORMATS[f], rows, blocks, t, seed);
    }
}

/// Splitting then summing is the identity on the rows (`x_k + 0` for float formats; the pairs
/// of output rows are added in order), and zero, NaN and mismatched lengths are handled.
#[test]
fn split_rows_and_sums() {
    let x: Vec<f32> = acts(2 * 64, 7);
    let s = split_two_term(WeightFormat::F16, &x, 2, 64);
    assert_eq!(&s[..64], &x[..64]);
    assert!(s[64..128].iter().all(|&v| v == 0.0));
    assert_eq!(&s[128..192], &x[64..]);
    let s = split_two_term(WeightFormat::Q8_0, &x, 2, 64);
    for (k, pair) in s.chunks_exact(128).enumerate() {
        for i in 0..64 {
            // The residual is within half an int8 step of the block (amax / 127 / 2).
            let blk = &x[k * 64 + i / 32 * 32..k * 64 + i / 32 * 32 + 32];
            let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert!(pair[64 + i].abs() <= amax / 254.0 * 1.0001, "{k} {i}");
        }
    }
    let zeros = split_two_term(WeightFormat::Q4K, &[0.0; 256], 1, 256);
    assert!(zeros.iter().all(|&v| v == 0.0));
    let mut nan = vec![0.5f32; 32];
    nan[3] = f32::NAN;
    assert!(split_two_term(WeightFormat::Q4_0, &nan, 1, 32)[35].is_nan());
    let mut y = [0f32; 2];
    sum_two_term(&[1.0, 2.0, 0.5, 0.25], 1, 2, &mut y);
    assert_eq!(y, [1.5, 2.25]);
}

/// An input of the wrong length is refused with the expected shape in the message.
#[test]
#[cfg_attr(
    panic = "abort",
    ignore = "catches a panic; panics abort on this target (wasm)"
)]
fn wrong_input_length_panics() {
    let x = acts(64, 7);
    let m = crate::test_util::panic_message(|| {
        split_two_term(WeightFormat::Q8_0, &x[..10], 1, 64);
    });
    assert!(m.contains("x must be [t = 1, cols = 64]"), "{m}");
}
