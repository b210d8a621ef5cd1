//! The int16 GEMM on every instruction set of this CPU against an f64 product of the unrounded
//! values (within the rounding the scales allow), the VNNI tile against the scalar twin, the
//! overflow bound on adversarial rows, and the bias / epilogue / non-finite rules.

use super::int16::*;
use super::tests::random_f32;
use crate::dispatch::available_isas;
use crate::format::WeightFormat;
use crate::matrix::WeightMatrix;

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

/// The VNNI tile against the scalar twin on the same int16 values, every tile height, with
/// ragged live rows: equal sums (small values keep them exact in f32; scales of 1).
#[test]
fn vnni_tile_matches_the_scalar_twin() {
    #[cfg(target_arch = "x86_64")]
    if available_isas().contains(&crate::dispatch::Isa::Avx512Vnni) {
        let (kp, lda) = (37, 2 * 37 + 6);
        let ints = |n: usize, seed: u64| -> Vec<i16> {
            random_f32(n, seed)
                .iter()
                .map(|v| (v * 2000.0) as i16)
                .collect()
        };
        let a = ints(12 * lda, 1);
        let b = ints(kp * 2 * 16, 2);
        let (ones, zero_bias) = ([1f32; 16], [0f32; 16]);
        for n in 1..=12 {
            for live in [16, 5] {
                let want = super::int16::tile_scalar(&a, lda, &b, kp, n);
                let mut got = vec![f32::NAN; n * 16];
                let dest = super::int16::Dest16 {
                    ptr: got.as_mut_ptr(),
                    ldo: 16,
                    live,
                    first: true,
                    bias: zero_bias.as_ptr(),
                    xs: ones.as_ptr(),
                    ws: ones.as_ptr(),
                };
                // SAFETY: the CPU has AVX-512 VNNI (checked above); a holds n rows of 2·kp
                // values lda apart, b kp·32, got n rows of 16, xs n ones and ws 16.
                unsafe { super::int16_x86::tile(a.as_ptr(), lda, b.as_ptr(), kp, n, &dest) };
                for i in 0..n {
                    for r in 0..16 {
                        let g = got[i * 16 + r];
                        match r < live {
                            true => {
                                assert_eq!(g, want[i][r] as f32, "n {n} live {live} [{i}][{r}]")
                            }
                            false => assert!(g.is_nan(), "n {n} live {live}: row {r} written"),
                        }
                    }
                }
            }
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
