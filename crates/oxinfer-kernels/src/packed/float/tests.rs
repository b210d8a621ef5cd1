//! The packed float GEMM on every instruction set of this CPU against an f64 reference on the
//! widened weights (random shapes with ragged panels, token tiles, token blocks and k slices),
//! and the SIMD tiles against the scalar twin.

use super::*;
use crate::dispatch::available_isas;
use proptest::prelude::*;

/// `n` values in [−1, 1] from a xorshift generator seeded with `seed` (shared by the int16
/// tests).
pub(super) fn random_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 20001) as f32 / 10000.0 - 1.0
        })
        .collect()
}

/// The weights of `format` made from `vals` (little-endian bytes).
fn encode(format: WeightFormat, vals: &[f32]) -> Vec<u8> {
    match format {
        WeightFormat::F32 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        WeightFormat::F16 => vals
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect(),
        WeightFormat::BF16 => vals
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect(),
        f => unreachable!("{f} is not a float format"),
    }
}

fn check(format: WeightFormat, rows: usize, cols: usize, t: usize, seed: u64) {
    let bytes = encode(format, &random_f32(rows * cols, seed));
    let w = WeightMatrix::new(format, &bytes, rows, cols).unwrap();
    let x = random_f32(t * cols, seed ^ 0x55);
    let packed = PackedFloatMatrix::pack(&w).unwrap();
    let mut widened = vec![0f32; cols];
    let mut want = vec![0f64; t * rows];
    for r in 0..rows {
        w.dequantize_row_into(r, &mut widened);
        for i in 0..t {
            want[i * rows + r] = widened
                .iter()
                .zip(&x[i * cols..(i + 1) * cols])
                .map(|(&a, &b)| a as f64 * b as f64)
                .sum();
        }
    }
    for isa in available_isas() {
        let mut y = vec![f32::NAN; t * rows];
        matmul_float_packed_isa(&packed, &x, t, &mut y, isa);
        for (j, (&got, &exp)) in y.iter().zip(&want).enumerate() {
            let tol = 1e-5 * (cols as f64).sqrt() * 4.0 + 1e-6;
            assert!(
                (got as f64 - exp).abs() <= tol,
                "{format} {} rows {rows} cols {cols} t {t}: y[{j}] = {got}, want {exp}",
                isa.name()
            );
        }
    }
}

#[test]
fn fixed_shapes_every_format() {
    for format in [WeightFormat::F32, WeightFormat::F16, WeightFormat::BF16] {
        for &(rows, cols, t) in &[
            (1, 1, 1),
            (16, 16, 6),
            (17, 300, 13),
            (384, 384, 97),
            (40, 513, 200),
            (33, 1536, 25),
        ] {
            check(format, rows, cols, t, (rows * 31 + cols * 7 + t) as u64);
        }
    }
}

#[test]
fn tiles_match_the_scalar_twin() {
    let (kc, lda) = (37, 41);
    let a = random_f32(MAX_MR * lda, 3);
    let b = random_f32(kc * NR, 4);
    for isa in available_isas() {
        for n in 1..=tile_tokens(isa) {
            let mut want = vec![[0f32; NR]; n];
            scalar::tile(&a, lda, &b, kc, &mut want);
            let mut got = vec![[f32::NAN; NR]; n];
            run_tile(isa, &a[..(n - 1) * lda + kc], lda, &b, kc, &mut got);
            for (g, w) in got.iter().flatten().zip(want.iter().flatten()) {
                assert!((g - w).abs() <= 1e-5, "{} n {n}: {g} vs {w}", isa.name());
            }
        }
    }
}

/// The bias is added exactly once, also when the k loop has several slices and the last panel
/// is ragged, and with no input features at all.
#[test]
fn bias_is_added_once() {
    for (rows, cols, t) in [(37, 600, 29), (16, 256, 12), (5, 0, 3)] {
        let vals = random_f32(rows * cols, 11);
        let bytes = encode(WeightFormat::F32, &vals);
        let w = WeightMatrix::new(WeightFormat::F32, &bytes, rows, cols).unwrap();
        let p = PackedFloatMatrix::pack(&w).unwrap();
        let x = random_f32(t * cols, 12);
        let bias = random_f32(rows, 13);
        let mut plain = vec![f32::NAN; t * rows];
        matmul_float_packed(&p, &x, t, &mut plain);
        let mut biased = vec![f32::NAN; t * rows];
        matmul_float_packed_bias(&p, &x, t, &bias, &mut biased);
        for (j, (&b, &y)) in biased.iter().zip(&plain).enumerate() {
            let want = y + bias[j % rows];
            assert!(
                (b - want).abs() <= 1e-5,
                "{rows}x{cols} t {t}: y[{j}] = {b}, want {want}"
            );
        }
    }
}

/// The epilogue sees every output exactly once, after its bias: doubling then adding one gives
/// `2 (x·w + b) + 1` everywhere, with ragged panels, several k slices and token blocks.
#[test]
fn epilogue_runs_once_on_finished_sums() {
    for (rows, cols, t) in [(37, 600, 130), (16, 256, 12), (5, 0, 3)] {
        let vals = random_f32(rows * cols, 21);
        let bytes = encode(WeightFormat::F32, &vals);
        let w = WeightMatrix::new(WeightFormat::F32, &bytes, rows, cols).unwrap();
        let p = PackedFloatMatrix::pack(&w).unwrap();
        let x = random_f32(t * cols, 22);
        let bias = random_f32(rows, 23);
        let mut plain = vec![f32::NAN; t * rows];
        matmul_float_packed_bias(&p, &x, t, &bias, &mut plain);
        let mut post = vec![f32::NAN; t * rows];
        let twice_plus_one = |v: &mut [f32]| v.iter_mut().for_each(|e| *e = 2.0 * *e + 1.0);
        matmul_float_packed_post(&p, &x, t, Some(&bias), &mut post, Some(&twice_plus_one));
        for (j, (&g, &y)) in post.iter().zip(&plain).enumerate() {
            assert_eq!(g, 2.0 * y + 1.0, "{rows}x{cols} t {t}: y[{j}]");
        }
    }
}

#[test]
fn empty_inner_dimension_gives_zeros() {
    let w = WeightMatrix::new(WeightFormat::F32, &[], 5, 0).unwrap();
    let p = PackedFloatMatrix::pack(&w).unwrap();
    let mut y = vec![1f32; 15];
    matmul_float_packed(&p, &[], 3, &mut y);
    assert!(y.iter().all(|&v| v == 0.0));
}

#[test]
fn from_rows_and_from_columns_pack_like_pack() {
    let (rows, cols) = (37, 19);
    let vals = random_f32(rows * cols, 9);
    let bytes = encode(WeightFormat::F32, &vals);
    let w = WeightMatrix::new(WeightFormat::F32, &bytes, rows, cols).unwrap();
    let a = PackedFloatMatrix::pack(&w).unwrap();
    let b = PackedFloatMatrix::from_rows(rows, cols, |r| &vals[r * cols..(r + 1) * cols]);
    assert_eq!(a.data[..], b.data[..]);
    assert_eq!((b.rows(), b.cols()), (rows, cols));
    let columns: Vec<Vec<f32>> = (0..cols)
        .map(|k| (0..rows).map(|r| vals[r * cols + k]).collect())
        .collect();
    let c = PackedFloatMatrix::from_columns(rows, cols, |k| &columns[k]);
    assert_eq!(a.data[..], c.data[..]);
    assert_eq!((c.rows(), c.cols()), (rows, cols));
}

#[test]
fn quantized_formats_are_not_packed() {
    assert!(!PackedFloatMatrix::supports(WeightFormat::Q8_0));
    assert!(PackedFloatMatrix::supports(WeightFormat::BF16));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn random_shapes(rows in 1usize..70, cols in 1usize..600, t in 1usize..130, seed: u64,
                     f in 0usize..3) {
        let format = [WeightFormat::F32, WeightFormat::F16, WeightFormat::BF16][f];
        check(format, rows, cols, t, seed);
    }
}
