//! Criterion benches of the weight quantizer and of the split formats' kernels, per instruction
//! set:
//!
//! - `quantize/<format>/<isa>`: one 2048 × 2048 BF16 matrix converted by
//!   [`quantize_matrix`] (throughput in BF16 bytes read, so criterion prints GB/s; the thread
//!   pool's threads, one per core), and `quantize_row/<format>/<isa>`: the row quantizer
//!   alone on one thread (f32 bytes read);
//! - `matvec/<format>/<isa>`: one token through a 2048 × 2048 matrix in Q8, Q4 (split) and, for
//!   comparison, GGUF's Q8_0 and Q4_0 (throughput in bytes of weights + scales read);
//! - `gemm4/<format>/<isa>`: 4 tokens through the same matrix (the `dot_split_x4` path).
//!
//! Run: `cargo bench -p oxinfer-kernels --bench quant [-- FILTER]`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use oxinfer_kernels::fast::matmul_fast;
use oxinfer_kernels::quantize::{quantize_matrix, quantize_row_isa, TARGETS};
use oxinfer_kernels::vecdot::{available_isas, Isa};
use oxinfer_kernels::{WeightFormat, WeightMatrix};
use std::hint::black_box;

const ROWS: usize = 2048;
const COLS: usize = 2048;

/// Weight-like f32 values (roughly normal, a few outliers), deterministic.
fn weights(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    (0..n)
        .map(|i| {
            let v = (next() + next() + next()) * 0.05;
            if i % 211 == 0 {
                v * 8.0
            } else {
                v
            }
        })
        .collect()
}

fn bf16_bytes(x: &[f32]) -> Vec<u8> {
    x.iter()
        .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
        .collect()
}

fn bench_quantize(c: &mut Criterion) {
    let x = weights(ROWS * COLS, 3);
    let src_bytes = bf16_bytes(&x);
    let src = WeightMatrix::new(WeightFormat::BF16, &src_bytes, ROWS, COLS).expect("geometry");
    let mut g = c.benchmark_group("quantize");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(src_bytes.len() as u64));
    for format in [WeightFormat::Q8, WeightFormat::Q4] {
        g.bench_function(BenchmarkId::new(format.to_string(), "best"), |b| {
            b.iter(|| quantize_matrix(black_box(&src), format).expect("finite"))
        });
    }
    g.finish();
    let mut g = c.benchmark_group("quantize_row");
    let row = &x[..COLS * 16];
    g.throughput(Throughput::Bytes((row.len() * 4) as u64));
    for format in TARGETS {
        let mut q = vec![0u8; format.row_bytes(row.len()).expect("blocks")];
        let mut s = vec![0u8; format.row_scale_bytes(row.len()).expect("blocks")];
        for isa in available_isas() {
            g.bench_with_input(
                BenchmarkId::new(format.to_string(), isa.name()),
                &isa,
                |b, &isa: &Isa| {
                    b.iter(|| quantize_row_isa(format, black_box(row), &mut q, &mut s, isa))
                },
            );
        }
    }
    g.finish();
}

fn bench_split_matmul(c: &mut Criterion) {
    let w = weights(ROWS * COLS, 5);
    let f32_bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    let src = WeightMatrix::new(WeightFormat::F32, &f32_bytes, ROWS, COLS).expect("geometry");
    let q8 = quantize_matrix(&src, WeightFormat::Q8).expect("finite");
    let q4 = quantize_matrix(&src, WeightFormat::Q4).expect("finite");
    // GGUF's Q8_0 / Q4_0 with the same quants: the scale (f16) before each block's quants.
    let interleave = |q: &oxinfer_kernels::quantize::Quantized, sb: usize, bb: usize| {
        let mut out = Vec::new();
        for (qs, s) in q.data.chunks_exact(bb).zip(q.scales.chunks_exact(sb)) {
            let d = if sb == 4 {
                f32::from_le_bytes([s[0], s[1], s[2], s[3]])
            } else {
                half::f16::from_le_bytes([s[0], s[1]]).to_f32()
            };
            out.extend_from_slice(&half::f16::from_f32(d).to_le_bytes());
            out.extend_from_slice(qs);
        }
        out
    };
    let q8_0 = interleave(&q8, 4, 32);
    let q4_0 = interleave(&q4, 2, 16);
    let mats: Vec<(WeightFormat, WeightMatrix, usize)> = vec![
        (
            WeightFormat::Q8,
            q8.matrix(ROWS, COLS).expect("geometry"),
            q8.data.len() + q8.scales.len(),
        ),
        (
            WeightFormat::Q4,
            q4.matrix(ROWS, COLS).expect("geometry"),
            q4.data.len() + q4.scales.len(),
        ),
        (
            WeightFormat::Q8_0,
            WeightMatrix::new(WeightFormat::Q8_0, &q8_0, ROWS, COLS).expect("geometry"),
            q8_0.len(),
        ),
        (
            WeightFormat::Q4_0,
            WeightMatrix::new(WeightFormat::Q4_0, &q4_0, ROWS, COLS).expect("geometry"),
            q4_0.len(),
        ),
    ];
    for (name, t) in [("matvec", 1usize), ("gemm4", 4)] {
        let mut g = c.benchmark_group(name);
        g.sample_size(20);
        let x: Vec<f32> = (0..t * COLS)
            .map(|i| ((i % 97) as f32 / 48.0) - 1.0)
            .collect();
        let mut y = vec![0f32; t * ROWS];
        for (format, m, bytes) in &mats {
            g.throughput(Throughput::Bytes(*bytes as u64));
            for isa in available_isas() {
                g.bench_with_input(
                    BenchmarkId::new(format.to_string(), isa.name()),
                    &isa,
                    |b, &isa| b.iter(|| matmul_fast(m, black_box(&x), t, &mut y, isa)),
                );
            }
        }
        g.finish();
    }
}

criterion_group!(benches, bench_quantize, bench_split_matmul);
criterion_main!(benches);
