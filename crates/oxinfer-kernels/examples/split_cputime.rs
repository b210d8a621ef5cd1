//! CPU time (not wall time: the machines this runs on are often shared) of the row quantizer
//! (f32 → BF16 / Q8 / Q4, GB/s of f32 read) and of one-token matvecs through an N × N matrix in the split formats Q8 / Q4 and GGUF's Q8_0 / Q4_0 holding the
//! same quants, on one thread, per instruction set. CPU time is the calling thread's run time
//! from `/proc/thread-self/schedstat` (Linux).
//!
//! Run: `cargo run --release -p oxinfer-kernels --example split_cputime [-- ITERS [T [N]]]`
//! (T tokens per matmul, default 1; an N × N matrix, default 2048: 8192 leaves the caches).

use oxinfer_kernels::fast::matmul_fast;
use oxinfer_kernels::quantize::{quantize_matrix, quantize_row_isa, Quantized, TARGETS};
use oxinfer_kernels::vecdot::available_isas;
use oxinfer_kernels::{WeightFormat, WeightMatrix};
use std::hint::black_box;

/// The calling thread's CPU time in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").expect("Linux schedstat");
    s.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .expect("schedstat's first field")
}

fn interleave(q: &Quantized, sb: usize, bb: usize) -> Vec<u8> {
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
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let iters = args.first().copied().unwrap_or(300);
    let t = args.get(1).copied().unwrap_or(1);
    let n = args.get(2).copied().unwrap_or(2048);
    let (rows, cols) = (n, n);
    oxinfer_kernels::set_num_threads(1);
    let mut s = 5u64;
    let w: Vec<f32> = (0..rows * cols)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1
        })
        .collect();
    let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    let src = WeightMatrix::new(WeightFormat::F32, &bytes, rows, cols).expect("geometry");
    let q8 = quantize_matrix(&src, WeightFormat::Q8).expect("finite");
    let q4 = quantize_matrix(&src, WeightFormat::Q4).expect("finite");
    let (q8_0, q4_0) = (interleave(&q8, 4, 32), interleave(&q4, 2, 16));
    let mats = [
        (
            q8.matrix(rows, cols).expect("geometry"),
            q8.data.len() + q8.scales.len(),
        ),
        (
            q4.matrix(rows, cols).expect("geometry"),
            q4.data.len() + q4.scales.len(),
        ),
        (
            WeightMatrix::new(WeightFormat::Q8_0, &q8_0, rows, cols).expect("geometry"),
            q8_0.len(),
        ),
        (
            WeightMatrix::new(WeightFormat::Q4_0, &q4_0, rows, cols).expect("geometry"),
            q4_0.len(),
        ),
    ];
    for format in TARGETS {
        let (rq, rs) = (
            format.row_bytes(cols).expect("blocks"),
            format.row_scale_bytes(cols).expect("blocks"),
        );
        let (mut q, mut sc) = (vec![0u8; rq], vec![0u8; rs]);
        for isa in available_isas() {
            let c0 = thread_cpu_ns();
            for row in w.chunks_exact(cols) {
                quantize_row_isa(format, black_box(row), &mut q, &mut sc, isa).expect("finite");
            }
            let ns = (thread_cpu_ns() - c0) as f64;
            println!(
                "quantize f32 -> {:<5} {:<18} {:6.2} GB/s of f32",
                format.to_string(),
                isa.name(),
                (w.len() * 4) as f64 / ns
            );
        }
    }
    let x: Vec<f32> = (0..t * cols)
        .map(|i| ((i % 97) as f32 / 48.0) - 1.0)
        .collect();
    let mut y = vec![0f32; t * rows];
    println!("{rows} x {cols}, {t} token(s), 1 thread, {iters} iterations, CPU time per matmul");
    for isa in available_isas() {
        for (m, nbytes) in &mats {
            let n = if isa.has_avx2() || isa.is_neon() {
                iters
            } else {
                iters / 10 + 1
            };
            for _ in 0..n / 10 + 1 {
                matmul_fast(m, black_box(&x), t, &mut y, isa);
            }
            let c0 = thread_cpu_ns();
            for _ in 0..n {
                matmul_fast(m, black_box(&x), t, &mut y, isa);
            }
            let per = (thread_cpu_ns() - c0) as f64 / n as f64;
            println!(
                "{:>5} {:<18} {:8.1} us  {:6.2} GB/s of weights",
                m.format.to_string(),
                isa.name(),
                per / 1e3,
                *nbytes as f64 / per
            );
        }
    }
}
