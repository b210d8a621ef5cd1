//! Criterion bench of the packed float GEMM ([`oxinfer_kernels::packed::float`]) against the
//! row-major matmul ([`oxinfer_kernels::matmul`]) at the shapes of an all-MiniLM-L6-v2 batch:
//! 512 tokens through the 384 × 384 attention projections and the 1536 × 384 / 384 × 1536 MLP,
//! f32 and bf16 weights, and the int16 GEMM ([`oxinfer_kernels::packed::float::int16`], the
//! f32 weights rounded; the activations rounded inside each product, as in the encoders).
//! Throughput is multiply-adds × 2, so criterion's "elements/s" read as FLOP/s.
//!
//! Run: `cargo bench -p oxinfer-kernels --bench float_gemm [-- FILTER]` (threads: one per core).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use oxinfer_kernels::packed::float::int16::{matmul_int16_packed_post, PackedInt16Matrix};
use oxinfer_kernels::packed::float::{matmul_float_packed, PackedFloatMatrix};
use oxinfer_kernels::{matmul, WeightFormat, WeightMatrix};
use std::hint::black_box;

const TOKENS: usize = 512;

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("float_gemm");
    g.sample_size(10);
    for format in [WeightFormat::F32, WeightFormat::BF16] {
        for (rows, cols) in [(384usize, 384usize), (1536, 384), (384, 1536)] {
            let data = oxinfer_kernels::synthetic::random_matrix(format, rows, cols, 11)
                .expect("float formats have no blocks");
            let w = WeightMatrix::new(format, &data, rows, cols).expect("sizes match");
            let packed = PackedFloatMatrix::pack(&w).expect("a float format");
            let x: Vec<f32> = (0..TOKENS * cols)
                .map(|i| ((i % 97) as f32 / 48.0) - 1.0)
                .collect();
            let mut y = vec![0f32; TOKENS * rows];
            g.throughput(Throughput::Elements((2 * rows * cols * TOKENS) as u64));
            let id = format!("{format}/{rows}x{cols}");
            g.bench_function(BenchmarkId::new("packed", &id), |b| {
                b.iter(|| matmul_float_packed(&packed, black_box(&x), TOKENS, &mut y))
            });
            g.bench_function(BenchmarkId::new("row-major", &id), |b| {
                b.iter(|| matmul(&w, black_box(&x), TOKENS, &mut y))
            });
            if format == WeightFormat::F32 {
                let p16 = PackedInt16Matrix::pack(&w).expect("finite weights");
                g.bench_function(BenchmarkId::new("packed-i16", &id), |b| {
                    b.iter(|| {
                        matmul_int16_packed_post(&p16, black_box(&x), TOKENS, None, &mut y, None)
                    })
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
