//! One-token matvecs (the decode GEMV) of SmolLM2-135M's shapes on one thread, per kernel:
//! wall time per call and GB/s of weights. Meant for the wasm build under wasmtime:
//! `cargo run --release -p oxinfer-kernels --example wasm_gemv --target wasm32-wasip1-threads`
//! (natively it runs too). A build with relaxed SIMD (`RUSTFLAGS="-C
//! target-feature=+simd128,+relaxed-simd"`) times the packed and four-row kernels of both
//! SIMD128 levels.

use oxinfer_kernels::dispatch::{available_isas, detected_isa};
use oxinfer_kernels::fast::matmul_fast;
use oxinfer_kernels::packed::{matmul_packed_isa, PackedMatrix};
use oxinfer_kernels::q8::{quantize_q8, BlockQ8};
use oxinfer_kernels::synthetic::random_matrix;
use oxinfer_kernels::vecdot::{dot_q8, dot_q8_rows4, Isa};
use oxinfer_kernels::{WeightFormat, WeightMatrix};
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let isa = detected_isa();
    // The SIMD128 levels of this build (SIMD128, and relaxed SIMD where built with it).
    let levels: Vec<Isa> = available_isas()
        .into_iter()
        .filter(|i| i.is_simd128())
        .collect();
    let levels = if levels.is_empty() { vec![isa] } else { levels };
    oxinfer_kernels::set_num_threads(1);
    for (format, rows, cols) in [
        (WeightFormat::Q4_1, 1536, 576),
        (WeightFormat::Q4_1, 576, 1536),
        (WeightFormat::Q8_0, 1536, 576),
        (WeightFormat::Q8_0, 49152, 576),
    ] {
        let rb = cols / 32 * format.block_bytes();
        // Random quants with finite f16 scales (and mins) in every block.
        let data = random_matrix(format, rows, cols, 7).expect("whole blocks");
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let mut q = vec![BlockQ8::default(); cols / 32];
        quantize_q8(&x, &mut q);
        let w = WeightMatrix::new(format, &data, rows, cols).unwrap();
        let mut y = vec![0f32; rows];
        let iters = (200_000_000 / data.len()).max(3);
        let gbs = |t: f64| data.len() as f64 / t / 1e9;
        let time = |f: &mut dyn FnMut()| {
            f();
            let t0 = Instant::now();
            for _ in 0..iters {
                f();
            }
            t0.elapsed().as_secs_f64() / iters as f64
        };
        let row = |r: usize| &data[r * rb..(r + 1) * rb];
        let t_one = time(&mut || {
            for (r, out) in y.iter_mut().enumerate() {
                *out = dot_q8(format, row(r), &q, isa);
            }
            black_box(&y);
        });
        let t_four = time(&mut || {
            for r in (0..rows).step_by(4) {
                let o = dot_q8_rows4(
                    format,
                    [row(r), row(r + 1), row(r + 2), row(r + 3)],
                    &q,
                    isa,
                );
                y[r..r + 4].copy_from_slice(&o);
            }
            black_box(&y);
        });
        let t_scalar = time(&mut || {
            for (r, out) in y.iter_mut().enumerate() {
                *out = dot_q8(format, row(r), &q, Isa::Scalar);
            }
            black_box(&y);
        });
        let t_mm = time(&mut || {
            matmul_fast(&w, &x, 1, &mut y, isa);
            black_box(&y);
        });
        let packed = PackedMatrix::pack(&w).unwrap();
        for &level in &levels {
            let t_packed = time(&mut || {
                matmul_packed_isa(&packed, &x, 1, &mut y, level);
                black_box(&y);
            });
            println!(
                "{format} {rows}x{cols} {level:?}: matmul_packed {:.1} us ({:.2} GB/s)",
                t_packed * 1e6,
                gbs(t_packed)
            );
        }
        println!(
            "{format} {rows}x{cols} {isa:?}: dot_q8 {:.1} us ({:.2} GB/s) | rows4 {:.1} us ({:.2}) | scalar {:.1} us ({:.2}) | matmul_fast {:.1} us ({:.2})",
            t_one * 1e6, gbs(t_one), t_four * 1e6, gbs(t_four), t_scalar * 1e6, gbs(t_scalar), t_mm * 1e6, gbs(t_mm)
        );
    }

    // Cold weights, as in a model: 64 different matrices (35 MB) in turn.
    let (format, rows, cols) = (WeightFormat::Q4_1, 1536, 576);
    let rb = cols / 32 * format.block_bytes();
    let mats: Vec<Vec<u8>> = (0..64)
        .map(|s| random_matrix(format, rows, cols, 100 + s).expect("whole blocks"))
        .collect();
    let x: Vec<f32> = (0..cols)
        .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
        .collect();
    let mut y = vec![0f32; rows];
    let mut q = vec![BlockQ8::default(); cols / 32];
    quantize_q8(&x, &mut q);
    let cold = |name: &str, f: &mut dyn FnMut(&[u8], &mut [f32])| {
        let mut y = vec![0f32; rows];
        let t0 = Instant::now();
        for _ in 0..5 {
            for m in &mats {
                f(m, &mut y);
                black_box(&y);
            }
        }
        let t = t0.elapsed().as_secs_f64() / (5 * mats.len()) as f64;
        println!(
            "{format} {rows}x{cols} cold (64 matrices in turn): {name} {:.1} us ({:.2} GB/s)",
            t * 1e6,
            (rows * rb) as f64 / t / 1e9
        );
    };
    cold("matmul_fast", &mut |m, y| {
        let w = WeightMatrix::new(format, m, rows, cols).unwrap();
        matmul_fast(&w, &x, 1, y, isa);
    });
    let packed: Vec<PackedMatrix> = mats
        .iter()
        .map(|m| PackedMatrix::pack(&WeightMatrix::new(format, m, rows, cols).unwrap()).unwrap())
        .collect();
    for &level in &levels {
        let mut i = 0;
        cold(&format!("matmul_packed {level:?}"), &mut |_, y| {
            matmul_packed_isa(&packed[i % packed.len()], &x, 1, y, level);
            i += 1;
        });
    }
    cold("dot_q8 per row", &mut |m, y| {
        for (r, out) in y.iter_mut().enumerate() {
            *out = dot_q8(format, &m[r * rb..(r + 1) * rb], &q, isa);
        }
    });
    for &level in &levels {
        cold(&format!("rows4 consecutive {level:?}"), &mut |m, y| {
            let row = |r: usize| &m[r * rb..(r + 1) * rb];
            for r in (0..rows).step_by(4) {
                let o = dot_q8_rows4(
                    format,
                    [row(r), row(r + 1), row(r + 2), row(r + 3)],
                    &q,
                    level,
                );
                y[r..r + 4].copy_from_slice(&o);
            }
        });
    }
    for split in [4, 16, 64] {
        cold(&format!("rows4 every {split}"), &mut |m, y| {
            let row = |r: usize| &m[r * rb..(r + 1) * rb];
            for base in (0..rows).step_by(4 * split) {
                for i in 0..split {
                    let r = [
                        base + i,
                        base + split + i,
                        base + 2 * split + i,
                        base + 3 * split + i,
                    ];
                    let o = dot_q8_rows4(format, r.map(row), &q, isa);
                    for (j, v) in r.into_iter().zip(o) {
                        y[j] = v;
                    }
                }
            }
        });
    }
    let _ = &mut y;
}
