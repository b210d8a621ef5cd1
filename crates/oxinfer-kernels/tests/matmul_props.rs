//! `matmul` against a naive dequantize-then-dot reference, and `WeightMatrix::new` size checks.

use oxinfer_kernels::fast::matmul_fast;
use oxinfer_kernels::vecdot::available_isas;
use oxinfer_kernels::{
    dequantize_row, matmul, matmul::SINGLE_THREAD_WORK, matmul_reference, num_threads,
    set_num_threads, KernelError, WeightFormat, WeightMatrix,
};
use proptest::prelude::*;
use std::sync::Mutex;

/// `set_num_threads` is process-wide; tests that change it take this lock.
static THREADS: Mutex<()> = Mutex::new(());

fn any_format() -> impl Strategy<Value = WeightFormat> {
    proptest::sample::select(WeightFormat::ALL.to_vec())
}

/// Random bytes for `blocks` blocks of `f`, with every scale field set to a small finite value
/// (and float formats holding small finite numbers), so products stay finite.
fn random_weights(f: WeightFormat, blocks: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let small = |n: &mut dyn FnMut() -> u64| ((n() % 2001) as f32 - 1000.0) / 10_000.0;
    let bb = f.block_bytes();
    let mut out = vec![0u8; blocks * bb];
    for blk in out.chunks_exact_mut(bb) {
        for b in blk.iter_mut() {
            *b = next() as u8;
        }
        let v = small(&mut next);
        let h = half::f16::from_f32(v).to_le_bytes();
        let h2 = half::f16::from_f32(small(&mut next)).to_le_bytes();
        match f {
            WeightFormat::F32 => blk.copy_from_slice(&(v * 10.0).to_le_bytes()),
            WeightFormat::F16 => blk.copy_from_slice(&h),
            WeightFormat::BF16 => blk.copy_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
            WeightFormat::Q4_0 | WeightFormat::Q5_0 | WeightFormat::Q8_0 => {
                blk[..2].copy_from_slice(&h)
            }
            WeightFormat::Q4_1 | WeightFormat::Q5_1 | WeightFormat::Q4K | WeightFormat::Q5K => {
                blk[..2].copy_from_slice(&h);
                blk[2..4].copy_from_slice(&h2);
            }
            WeightFormat::Q2K => {
                blk[80..82].copy_from_slice(&h);
                blk[82..84].copy_from_slice(&h2);
            }
            WeightFormat::Q3K => blk[108..110].copy_from_slice(&h),
            WeightFormat::Q6K => blk[208..210].copy_from_slice(&h),
            WeightFormat::Q8K => blk[..4].copy_from_slice(&v.to_le_bytes()),
            WeightFormat::IQ2_XXS
            | WeightFormat::IQ2_XS
            | WeightFormat::IQ2_S
            | WeightFormat::IQ3_XXS
            | WeightFormat::IQ3_S
            | WeightFormat::IQ1_S
            | WeightFormat::IQ4_NL
            | WeightFormat::IQ4_XS => blk[..2].copy_from_slice(&h),
            WeightFormat::TQ1_0 => blk[52..54].copy_from_slice(&h),
            WeightFormat::TQ2_0 => blk[64..66].copy_from_slice(&h),
            // E8M0 exponent 120..127: scales 2^-9..2^-2.
            WeightFormat::MXFP4 => blk[0] = 120 + blk[0] % 8,
            // f16 d in the top nibbles of the four scale words (bytes 49, 51, 53, 55).
            WeightFormat::IQ1_M => {
                let d = half::f16::from_f32(v).to_bits();
                for k in 0..4 {
                    let nib = ((d >> (4 * k)) & 0xF) as u8;
                    blk[49 + 2 * k] = (blk[49 + 2 * k] & 0x0F) | (nib << 4);
                }
            }
            WeightFormat::Q8 | WeightFormat::Q4 => unreachable!("ALL holds GGML formats only"),
        }
    }
    out
}

fn naive(w: &WeightMatrix, x: &[f32], t: usize) -> (Vec<f32>, Vec<f32>) {
    // returns y and, per output, sum |x_i * w_i| (the scale of the rounding error)
    let mut y = vec![0.0f32; t * w.rows];
    let mut mag = vec![0.0f32; t * w.rows];
    let mut row = vec![0.0f32; w.cols];
    for r in 0..w.rows {
        dequantize_row(w.format, w.row(r), &mut row).unwrap();
        for ti in 0..t {
            let xs = &x[ti * w.cols..(ti + 1) * w.cols];
            let (mut s, mut m) = (0.0f64, 0.0f64);
            for (a, b) in row.iter().zip(xs) {
                s += *a as f64 * *b as f64;
                m += (*a as f64 * *b as f64).abs();
            }
            y[ti * w.rows + r] = s as f32;
            mag[ti * w.rows + r] = m as f32;
        }
    }
    (y, mag)
}

fn check(f: WeightFormat, rows: usize, blocks_per_row: usize, t: usize, threads: usize, seed: u64) {
    let cols = blocks_per_row * f.block_size();
    let data = random_weights(f, rows * blocks_per_row, seed);
    let w = WeightMatrix::new(f, &data, rows, cols).unwrap();
    let x: Vec<f32> = (0..t * cols)
        .map(|i| {
            (((i as u64).wrapping_mul(2_654_435_761).wrapping_add(seed) % 1000) as f32 - 500.0)
                / 250.0
        })
        .collect();
    let (want, mag) = naive(&w, &x, t);
    let mut y = vec![f32::NAN; t * rows];
    {
        let _g = THREADS.lock().unwrap_or_else(|e| e.into_inner());
        set_num_threads(threads);
        matmul_reference(&w, &x, t, &mut y);
        set_num_threads(0);
    }
    check_fast(&w, &x, t, &want, &mag);
    for i in 0..y.len() {
        // recursive-summation bound (cols products, f32) plus rounding the f64 reference
        let tol = (cols + 2) as f32 * f32::EPSILON * mag[i];
        assert!(
            (y[i] - want[i]).abs() <= tol,
            "{f} rows={rows} cols={cols} t={t} threads={threads}: y[{i}] = {} vs {} (tol {tol})",
            y[i],
            want[i]
        );
    }
}

/// The fast path (int8 activations, SIMD and scalar kernels) against the exact result, within
/// the activation-quantization error: each product is off by at most |w| · (max|x| / 127) / 2.
fn check_fast(w: &WeightMatrix, x: &[f32], t: usize, want: &[f32], mag: &[f32]) {
    let mut wabs = vec![0.0f32; w.rows];
    let mut row = vec![0.0f32; w.cols];
    for (r, a) in wabs.iter_mut().enumerate() {
        dequantize_row(w.format, w.row(r), &mut row).unwrap();
        *a = row.iter().map(|v| v.abs()).sum();
    }
    let float = matches!(
        w.format,
        WeightFormat::F32 | WeightFormat::F16 | WeightFormat::BF16
    );
    for isa in available_isas() {
        let mut y = vec![f32::NAN; t * w.rows];
        matmul_fast(w, x, t, &mut y, isa);
        for ti in 0..t {
            let xs = &x[ti * w.cols..(ti + 1) * w.cols];
            let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (r, wa) in wabs.iter().enumerate() {
                let i = ti * w.rows + r;
                let quant = if float { 0.0 } else { 0.5 * wa * amax / 127.0 };
                let tol = quant * 1.01 + (w.cols + 2) as f32 * f32::EPSILON * mag[i] * 4.0 + 1e-6;
                assert!(
                    (y[i] - want[i]).abs() <= tol,
                    "{} fast {isa:?} rows={} cols={} t={t}: y[{i}] = {} vs {} (tol {tol})",
                    w.format,
                    w.rows,
                    w.cols,
                    y[i],
                    want[i]
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn matmul_matches_naive(
        f in any_format(),
        rows in 1usize..40,
        blocks_per_row in 1usize..5,
        t in 1usize..11,
        threads in 1usize..5,
        seed in any::<u64>(),
    ) {
        check(f, rows, blocks_per_row, t, threads, seed);
    }

    #[test]
    fn matrix_new_checks_sizes(
        f in any_format(),
        rows in 0usize..20,
        blocks in 0usize..4,
        extra in prop_oneof![Just(0usize), 1usize..300],
        delta in -3isize..4,
    ) {
        let cols = blocks * f.block_size() + extra % f.block_size();
        let good = f.row_bytes(cols).map(|rb| rb * rows);
        let len = match good { Some(g) => (g as isize + delta).max(0) as usize, None => 64 };
        let data = vec![0u8; len];
        let r = WeightMatrix::new(f, &data, rows, cols);
        match (good, r) {
            (Some(g), Ok(w)) => {
                prop_assert_eq!(g, len);
                prop_assert_eq!((w.rows, w.cols, w.data.len()), (rows, cols, len));
            }
            (Some(g), Err(e)) => {
                prop_assert_ne!(g, len);
                prop_assert_eq!(e, KernelError::MatrixBytes { format: f, rows, cols, expected: g, actual: len });
            }
            (None, Ok(_)) => prop_assert!(false, "accepted cols {} for {}", cols, f),
            (None, Err(e)) => {
                let is_not_multiple = matches!(e, KernelError::NotBlockMultiple { .. });
                prop_assert!(is_not_multiple, "{}", e);
            }
        }
    }
}

/// Shapes large enough that several threads really run (work ≥ the single-thread threshold),
/// with t = 1 (contiguous split) and t > 1 (strided outputs), and more threads than rows.
#[test]
fn matmul_multithreaded_large() {
    for (f, rows, bpr, t, threads) in [
        (WeightFormat::Q4K, 37, 8, 1, 4),
        (WeightFormat::Q4K, 37, 8, 3, 4),
        (WeightFormat::Q8_0, 129, 17, 1, 3),
        (WeightFormat::Q8_0, 129, 17, 5, 3),
        (WeightFormat::Q6K, 5, 40, 2, 8),
        (WeightFormat::F16, 300, 256, 2, 2),
        (WeightFormat::Q5_1, 64, 64, 7, 0), // 0 = default thread count
        (WeightFormat::IQ4_XS, 37, 8, 3, 4),
        (WeightFormat::IQ2_XS, 37, 8, 1, 4),
        (WeightFormat::IQ4_NL, 129, 17, 5, 3),
    ] {
        assert!(
            rows * bpr * f.block_size() * t >= SINGLE_THREAD_WORK,
            "{f} {rows} {bpr} {t}"
        );
        check(f, rows, bpr, t, threads, rows as u64 * 31 + t as u64);
    }
}

/// Every GGML format, decode (t = 1) and prefill (t = 5, which takes the four-token kernels),
/// deterministically (the proptest above samples formats at random).
#[test]
fn every_format_decode_and_prefill() {
    for f in WeightFormat::ALL {
        for t in [1, 5] {
            check(f, 9, 2, t, 1, 7 * t as u64 + f.block_bytes() as u64);
        }
    }
}

#[test]
fn threads_setting() {
    let _g = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    set_num_threads(3);
    assert_eq!(num_threads(), 3);
    set_num_threads(0);
    assert_eq!(
        num_threads(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
}

#[test]
fn matmul_empty_shapes() {
    let w = WeightMatrix::new(WeightFormat::Q4_0, &[], 0, 64).unwrap();
    matmul(&w, &[0.0; 128], 2, &mut []);
    let data = random_weights(WeightFormat::Q4_0, 2, 1);
    let w = WeightMatrix::new(WeightFormat::Q4_0, &data, 1, 64).unwrap();
    matmul(&w, &[], 0, &mut []);
    let w = WeightMatrix::new(WeightFormat::F32, &[], 3, 0).unwrap();
    let mut y = [1.0f32; 6];
    matmul(&w, &[], 2, &mut y);
    assert_eq!(y, [0.0; 6]);
}
