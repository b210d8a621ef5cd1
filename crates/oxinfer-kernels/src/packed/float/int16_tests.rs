//! The int16 GEMM on every instruction set of this CPU against an f64 product of the unrounded
//! values (within the rounding the scales allow), the VNNI and AVX2 tiles and row helpers
//! against the scalar twins (the same bits), the overflow bound on adversarial rows, and the
//! bias / epilogue / non-finite rules.

use super::int16::*;
use super::tests::random_f32;
use crate::dispatch::{available_isas, Isa};
use crate::format::WeightFormat;
use crate::matrix::WeightMatrix;
use proptest::prelude::*;

fn matrix(vals: &[f32], rows: usize, cols: usize) -> (Vec<u8>, usize, usize) {
    (
        vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        rows,
        cols,
    )
}

fn norm(v: &[f32]) -> f64 {
    v.iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt()
}

/// The largest rounding step of a row `v` (`1 / s`, the scale as the module doc chooses it).
fn step(v: &[f32]) -> f64 {
    let absmax = v.iter().fold(0f64, |m, &x| m.max(f64::from(x).abs()));
    let by_norm = norm(v) / (46340.0 * 0.999 - 0.5 * (v.len() as f64).sqrt());
    (absmax / 32767.0).max(by_norm)
}

/// The error bound of one output whatever the values: each element of either row is off by at
/// most half a step.
fn worst_case(x: &[f32], w: &[f32]) -> f64 {
    let l1 = |v: &[f32]| v.iter().map(|&a| f64::from(a).abs()).sum::<f64>();
    let (ex, ew) = (step(x) / 2.0, step(w) / 2.0);
    ex * l1(w) + ew * l1(x) + ex * ew * x.len() as f64
}

/// `y` on every ISA against the f64 product (plus bias): each value within `tol · ‖x_i‖ ‖w_r‖`
/// (the rounding of both rows, random in sign, bounded by their norms) or, with `tol` 0, within
/// the worst case of [`worst_case`].
fn check(
    w_vals: &[f32],
    rows: usize,
    cols: usize,
    x: &[f32],
    t: usize,
    bias: Option<&[f32]>,
    tol: f64,
) {
    let (bytes, ..) = matrix(w_vals, rows, cols);
    let w = WeightMatrix::new(WeightFormat::F32, &bytes, rows, cols).unwrap();
    let packed = PackedInt16Matrix::pack(&w).unwrap();
    for isa in available_isas() {
        let mut y = vec![f32::NAN; t * rows];
        matmul_int16_packed_isa(&packed, x, t, bias, &mut y, None, isa);
        for i in 0..t {
            let xi = &x[i * cols..(i + 1) * cols];
            for r in 0..rows {
                let wr = &w_vals[r * cols..(r + 1) * cols];
                let exact: f64 = xi
                    .iter()
                    .zip(wr)
                    .map(|(&a, &b)| f64::from(a) * f64::from(b))
                    .sum::<f64>()
                    + bias.map_or(0.0, |b| f64::from(b[r]));
                let got = f64::from(y[i * rows + r]);
                let rounding = match tol {
                    0.0 => worst_case(xi, wr),
                    _ => tol * norm(xi) * norm(wr),
                };
                let bound = rounding + 1e-6 * exact.abs() + 1e-7;
                assert!(
                    (got - exact).abs() <= bound,
                    "{} {rows}x{cols} t {t}: y[{i}][{r}] = {got}, want {exact} (bound {bound})",
                    isa.name()
                );
            }
        }
    }
}

#[test]
fn matches_the_exact_product_on_ragged_shapes() {
    for &(rows, cols, t) in &[
        (1, 1, 1),
        (16, 16, 12),
        (37, 601, 130),
        (384, 384, 97),
        (33, 1536, 25),
        (5, 2, 3),
    ] {
        let w = random_f32(rows * cols, (rows * 7 + cols) as u64);
        let x = random_f32(t * cols, (t * 13 + cols) as u64);
        let bias = random_f32(rows, 5);
        // Rounding error of each row ≤ ½ √k steps of ‖q‖ ≈ 46 000: relative ~1e-5 · √k / √k.
        check(&w, rows, cols, &x, t, None, 2e-4);
        check(&w, rows, cols, &x, t, Some(&bias), 2e-4);
    }
}

/// Rows aligned with each other (every product positive), long, and with an outlier: the
/// sums reach the bound without wrapping around.
#[test]
fn aligned_rows_do_not_overflow() {
    for cols in [2, 384, 4096, MAX_INT16_COLS] {
        let mut v: Vec<f32> = (0..cols).map(|k| 1.0 + (k % 3) as f32).collect();
        let mut outlier = v.clone();
        outlier[cols / 2] = 500.0;
        v.extend_from_slice(&outlier);
        let neg: Vec<f32> = v.iter().map(|x| -x).collect();
        check(&v, 2, cols, &v, 2, None, 0.0);
        check(&v, 2, cols, &neg, 2, None, 0.0);
    }
}

/// Runs the SIMD tile of `isa` (VNNI: up to 12 tokens, AVX2: up to 6) on `n` tokens; `false`
/// for an instruction set without an int16 tile of its own.
fn simd_tile(isa: Isa, a: &[i16], lda: usize, b: &[i16], kp: usize, n: usize, d: &Dest16) -> bool {
    assert!(a.len() >= (n - 1) * lda + 2 * kp && b.len() >= kp * 32);
    #[cfg(target_arch = "x86_64")]
    if isa.has_vnni() {
        assert!(n <= 12);
        // SAFETY: the level has AVX-512 F and VNNI (available_isas); a holds n rows of 2·kp
        // values lda apart, b kp·32 (checked above); the caller's destination is valid for n.
        unsafe { super::int16_x86::tile(a.as_ptr(), lda, b.as_ptr(), kp, n, d) };
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        assert!(n <= 6);
        // SAFETY: the level has AVX2 (available_isas); bounds as for the VNNI tile.
        unsafe { super::int16_avx2::tile(a.as_ptr(), lda, b.as_ptr(), kp, n, d) };
        return true;
    }
    let _ = (isa, a, lda, b, kp, n, d);
    false
}

/// `n` int16 values in ±`scale` from [`random_f32`].
fn ints(n: usize, seed: u64, scale: f32) -> Vec<i16> {
    random_f32(n, seed)
        .iter()
        .map(|v| (v * scale).round() as i16)
        .collect()
}

/// Every SIMD tile against the scalar twin and its epilogue ([`store_scaled`]) on the same int16
/// values, every tile height, whole and ragged live rows, the first k slice (with and without a
/// bias) and a later one: the same bits. Values up to ±5000 over 37 pairs keep the sums inside
/// i32; then one pair of −32767s (`vpmaddwd`'s largest sum, `2 · 32767²`). The VNNI tile fuses
/// its scaling into an FMA, so it gets scales of 1 and zero bias and prior values (then its
/// results are the sums rounded to f32 too).
#[test]
fn simd_tiles_match_the_scalar_twin() {
    let (kp, lda) = (37, 2 * 37 + 6);
    let cases = [
        (ints(12 * lda, 1, 5000.0), ints(kp * 32, 2, 5000.0), kp),
        (vec![-32767; 12 * lda], vec![-32767; kp * 32], 1),
    ];
    for isa in available_isas() {
        let unit = isa.has_vnni();
        let values = |n: usize, seed: u64, scale: f32| -> Vec<f32> {
            random_f32(n, seed)
                .iter()
                .map(|v| if unit { 0.0 } else { scale * (1.5 + v) })
                .collect()
        };
        let xs: Vec<f32> = values(12, 3, 1e-3)
            .iter()
            .map(|v| v + unit as u8 as f32)
            .collect();
        let ws: Vec<f32> = values(16, 4, 2e-4)
            .iter()
            .map(|v| v + unit as u8 as f32)
            .collect();
        let (bias, prior) = (values(16, 5, 1.0), values(12 * 16, 6, 1.0));
        for (a, b, kp) in &cases {
            for n in 1..=12 {
                for (live, first, with_bias) in [
                    (16, true, true),
                    (16, true, false),
                    (16, false, false),
                    (9, true, true),
                    (8, false, false),
                    (5, true, true),
                    (1, false, false),
                ] {
                    let dest = |ptr: *mut f32| Dest16 {
                        ptr,
                        ldo: 16,
                        live,
                        first,
                        bias: match with_bias {
                            true => bias.as_ptr(),
                            false => std::ptr::null(),
                        },
                        xs: xs.as_ptr(),
                        ws: ws.as_ptr(),
                    };
                    let mut got = prior[..n * 16].to_vec();
                    let mut want = got.clone();
                    let tile = n <= 6 || isa.has_vnni();
                    if !tile || !simd_tile(isa, a, lda, b, *kp, n, &dest(got.as_mut_ptr())) {
                        continue;
                    }
                    let sums = tile_scalar(a, lda, b, *kp, n);
                    // SAFETY: want holds n rows of 16, xs 12 values, ws and the bias 16.
                    unsafe { store_scaled(&sums[..n], &dest(want.as_mut_ptr())) };
                    for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(
                            g.to_bits(),
                            w.to_bits(),
                            "{} kp {kp} n {n} live {live} first {first}: [{}][{}] {g} != {w}",
                            isa.name(),
                            j / 16,
                            j % 16
                        );
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The whole GEMM with the AVX2 tile against the scalar twin on the same rounded
    /// activations, bit for bit: shapes with ragged panels, token tiles, token blocks (96) and k
    /// slices (256 pairs), odd widths, with and without a bias.
    #[test]
    fn simd_gemm_matches_the_scalar_twin(
        rows in 1usize..70,
        cols in 0usize..640,
        t in 1usize..110,
        seed in 0u64..1000,
        with_bias in any::<bool>(),
    ) {
        let (bytes, ..) = matrix(&random_f32(rows * cols, seed), rows, cols);
        let w = WeightMatrix::new(WeightFormat::F32, &bytes, rows, cols).unwrap();
        let p = PackedInt16Matrix::pack(&w).unwrap();
        let x = random_f32(t * cols, seed + 1);
        let bias = random_f32(rows, seed + 2);
        let bias = with_bias.then_some(&bias[..]);
        let xq = Int16Rows::quantize(&x, t, cols, Isa::Scalar);
        let mut want = vec![f32::NAN; t * rows];
        run_rounded(&p, &xq, bias, &mut want, None, Isa::Scalar);
        // (The VNNI tile's fused scaling is checked against the f64 product above.)
        for isa in available_isas().into_iter().filter(|i| !i.has_vnni()) {
            let mut got = vec![f32::NAN; t * rows];
            run_rounded(&p, &xq, bias, &mut got, None, isa);
            for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                prop_assert_eq!(g.to_bits(), w.to_bits(), "{} y[{}]", isa.name(), j);
            }
        }
    }

    /// The SIMD row helpers against the scalar ones: the same rounded values (a given scale,
    /// ties included) and maximum, the sum of squares to f32 rounding.
    #[test]
    fn simd_row_helpers_match_the_scalar_ones(
        len in 0usize..100,
        seed in 0u64..1000,
        exp in -20i32..20,
    ) {
        let mag = 2f32.powi(exp);
        let mut v: Vec<f32> = random_f32(len, seed).iter().map(|x| x * mag).collect();
        // Products exact with a power-of-two scale: |x · s| ≤ 16384 but for the planted values.
        let s = 16384.0 / mag;
        for (j, k) in [2.5f32, -3.5, 40000.0, -40000.0, 32767.5, -32767.5].into_iter().enumerate() {
            if let Some(x) = v.get_mut(3 * j + 1) {
                // Ties (to even: 2, −4) and values past ±32767 that the clamp catches.
                *x = k / s;
            }
        }
        let (m0, s0) = row_stats(&v, Isa::Scalar);
        let mut q0 = vec![0i16; len];
        quantize_into(&v, s, &mut q0, Isa::Scalar);
        for isa in available_isas() {
            let (m, sq) = row_stats(&v, isa);
            prop_assert_eq!(m, m0, "{}", isa.name());
            prop_assert!((sq - s0).abs() <= 1e-6 * s0, "{}: {} vs {}", isa.name(), sq, s0);
            let mut q = vec![0i16; len];
            quantize_into(&v, s, &mut q, isa);
            prop_assert_eq!(&q, &q0, "{}", isa.name());
        }
    }
}

/// The epilogue sees every output once, after its bias; no input features give the bias.
#[test]
fn bias_and_epilogue_run_once() {
    for (rows, cols, t) in [(37, 600, 130), (16, 256, 12), (5, 0, 3)] {
        let (bytes, ..) = matrix(&random_f32(rows * cols, 21), rows, cols);
        let w = WeightMatrix::new(WeightFormat::F32, &bytes, rows, cols).unwrap();
        let p = PackedInt16Matrix::pack(&w).unwrap();
        let x = random_f32(t * cols, 22);
        let bias = random_f32(rows, 23);
        for isa in available_isas() {
            let mut plain = vec![f32::NAN; t * rows];
            matmul_int16_packed_isa(&p, &x, t, Some(&bias), &mut plain, None, isa);
            let mut post = vec![f32::NAN; t * rows];
            let twice_plus_one = |v: &mut [f32]| v.iter_mut().for_each(|e| *e = 2.0 * *e + 1.0);
            matmul_int16_packed_isa(
                &p,
                &x,
                t,
                Some(&bias),
                &mut post,
                Some(&twice_plus_one),
                isa,
            );
            for (j, (&g, &y)) in post.iter().zip(&plain).enumerate() {
                assert_eq!(
                    g,
                    2.0 * y + 1.0,
                    "{} {rows}x{cols} t {t}: y[{j}]",
                    isa.name()
                );
            }
            if cols == 0 {
                assert!(plain.chunks_exact(rows).all(|r| r == &bias[..]));
            }
        }
    }
}

/// A token holding a NaN or an infinity comes out NaN (as the f32 product would not be
/// finite either); the other tokens are unaffected. A weight row that is not finite is refused.
#[test]
fn non_finite_values_are_not_hidden() {
    let (rows, cols) = (20, 40);
    let vals = random_f32(rows * cols, 31);
    let (bytes, ..) = matrix(&vals, rows, cols);
    let w = WeightMatrix::new(WeightFormat::F32, &bytes, rows, cols).unwrap();
    let p = PackedInt16Matrix::pack(&w).unwrap();
    let mut x = random_f32(3 * cols, 32);
    x[cols + 5] = f32::NAN;
    x[2 * cols + 7] = f32::INFINITY;
    for isa in available_isas() {
        let mut y = vec![0f32; 3 * rows];
        matmul_int16_packed_isa(&p, &x, 3, None, &mut y, None, isa);
        assert!(y[..rows].iter().all(|v| v.is_finite()), "{}", isa.name());
        assert!(y[rows..].iter().all(|v| v.is_nan()), "{}", isa.name());
    }
    let mut bad = vals.clone();
    bad[3] = f32::NAN;
    let (bytes, ..) = matrix(&bad, rows, cols);
    let w = WeightMatrix::new(WeightFormat::F32, &bytes, rows, cols).unwrap();
    assert!(PackedInt16Matrix::pack(&w).is_none());
}
