//! Criterion benches of the CPU kernels, per weight format and instruction set:
//!
//! - `matvec/<format>/<isa>`: one token through a 2048 × 2048 matrix (decode; throughput in
//!   bytes of weights read, so criterion prints GB/s);
//! - `gemm/<format>/<isa>`: 64 tokens through the same matrix (prefill; throughput in
//!   multiply-adds × 2, so criterion's "elements/s" read as FLOP/s); `<isa>` `packed` is the
//!   packed GEMM ([`oxinfer_kernels::packed`], eight interleaved rows) on the best ISA, for the
//!   formats that have a packed layout (also under `matvec`);
//! - `unpack_dot/<format>/<isa>`: the row-major decode kernel of the K-quant and IQ/TQ
//!   formats on one thread, without the pool: every super-block of the same matrix unpacked
//!   ([`oxinfer_kernels::vecdot::unpack_k_isa`]) and dotted with one token
//!   ([`oxinfer_kernels::vecdot::dot_kblock`]); throughput in bytes of weights, as `matvec`
//!   (timed in the thread's CPU time where Linux gives it, so a loaded machine disturbs it
//!   less than `matvec`, whose region waits for a descheduled worker);
//! - `attention/[model/]<t>x<keys>`: the fused causal attention kernel (head_dim 64, 8 heads, 2
//!   kv heads; `smollm2/`, `gemma3/`: those models' head geometries at one decode step);
//! - `parallel_region/<pool|rayon>/<tasks>`: dispatch overhead of one parallel region of tiny
//!   tasks on our pool ([`oxinfer_kernels::pool::parallel_for`]) and on rayon (`par_iter`), the
//!   cost a decode step pays a few hundred times.
//!
//! Run: `cargo bench -p oxinfer-kernels --bench kernels [-- FILTER]`. Threads: the pool's
//! default, one per core (no environment variable sets it; `OXINFER_*` switches that pick
//! kernels are listed in [`oxinfer_kernels::dispatch`]). The weights are random bytes with sane
//! block scales.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use oxinfer_kernels::attention::{attention, AttnShape};
use oxinfer_kernels::fast::matmul_fast;
use oxinfer_kernels::packed::{matmul_packed, packing_pays, PackedMatrix};
use oxinfer_kernels::q8::{quantize_q8k, BlockQ8K};
use oxinfer_kernels::vecdot::{
    act_kind, available_isas, dot_kblock, unpack_k_isa, ActKind, KBlock,
};
use oxinfer_kernels::{WeightFormat, WeightMatrix};
use std::hint::black_box;

const ROWS: usize = 2048;
const COLS: usize = 2048;

/// A `ROWS × COLS` matrix of random quants with finite scales.
fn matrix(format: WeightFormat) -> Vec<u8> {
    oxinfer_kernels::synthetic::random_matrix(format, ROWS, COLS, format as u64 + 7)
        .expect("COLS fits the block size")
}

const FORMATS: [WeightFormat; 23] = [
    WeightFormat::F32,
    WeightFormat::F16,
    WeightFormat::BF16,
    WeightFormat::Q8_0,
    WeightFormat::Q4_0,
    WeightFormat::Q4_1,
    WeightFormat::Q5_0,
    WeightFormat::Q5_1,
    WeightFormat::Q3K,
    WeightFormat::Q4K,
    WeightFormat::Q5K,
    WeightFormat::Q6K,
    WeightFormat::IQ4_XS,
    WeightFormat::IQ3_S,
    WeightFormat::IQ3_XXS,
    WeightFormat::IQ2_S,
    WeightFormat::IQ2_XS,
    WeightFormat::IQ2_XXS,
    WeightFormat::IQ1_M,
    WeightFormat::IQ1_S,
    WeightFormat::TQ2_0,
    WeightFormat::TQ1_0,
    WeightFormat::IQ4_NL,
];

fn bench_matmul(c: &mut Criterion) {
    for (name, t) in [("matvec", 1usize), ("gemm", 64)] {
        let mut g = c.benchmark_group(name);
        g.sample_size(10);
        let x: Vec<f32> = (0..t * COLS)
            .map(|i| ((i % 97) as f32 / 48.0) - 1.0)
            .collect();
        let mut y = vec![0f32; t * ROWS];
        for format in FORMATS {
            let data = matrix(format);
            let w = WeightMatrix::new(format, &data, ROWS, COLS).expect("matrix geometry");
            g.throughput(if t == 1 {
                Throughput::Bytes(data.len() as u64)
            } else {
                Throughput::Elements((2 * t * ROWS * COLS) as u64)
            });
            for isa in available_isas() {
                g.bench_with_input(
                    BenchmarkId::new(format.to_string(), isa.name()),
                    &isa,
                    |b, &isa| b.iter(|| matmul_fast(&w, black_box(&x), t, &mut y, isa)),
                );
            }
            if packing_pays(format) {
                let p = PackedMatrix::pack(&w).expect("format has a packed layout");
                g.bench_function(BenchmarkId::new(format.to_string(), "packed"), |b| {
                    b.iter(|| matmul_packed(&p, black_box(&x), t, &mut y))
                });
            }
        }
        g.finish();
    }
}

fn bench_unpack_dot(c: &mut Criterion) {
    let mut g = c.benchmark_group("unpack_dot");
    g.sample_size(10);
    let x: Vec<f32> = (0..COLS).map(|i| ((i % 97) as f32 / 48.0) - 1.0).collect();
    let mut xq = vec![BlockQ8K::default(); COLS / 256];
    quantize_q8k(&x, &mut xq);
    for format in FORMATS.into_iter().filter(|f| act_kind(*f) == ActKind::Q8K) {
        let data = matrix(format);
        let bb = format.block_bytes();
        g.throughput(Throughput::Bytes(data.len() as u64));
        for isa in available_isas() {
            g.bench_with_input(
                BenchmarkId::new(format.to_string(), isa.name()),
                &isa,
                |b, &isa| {
                    let mut kb = KBlock::default();
                    b.iter_custom(|iters| {
                        let t0 = CpuClock::now();
                        for _ in 0..iters {
                            let mut sum = 0f32;
                            for (blk, y) in data.chunks_exact(bb).zip(xq.iter().cycle()) {
                                unpack_k_isa(format, black_box(blk), &mut kb, isa);
                                sum += dot_kblock(&kb, y, isa);
                            }
                            black_box(sum);
                        }
                        t0.elapsed()
                    })
                },
            );
        }
    }
    g.finish();
}

/// The calling thread's time on a CPU (Linux: `/proc/thread-self/schedstat`, nanoseconds),
/// else wall time: the single-thread groups then measure work, not the other processes'
/// share of a loaded machine.
enum CpuClock {
    Thread(u64),
    Wall(std::time::Instant),
}

impl CpuClock {
    fn thread_ns() -> Option<u64> {
        let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
        s.split_whitespace().next()?.parse().ok()
    }

    fn now() -> Self {
        match Self::thread_ns() {
            Some(ns) => CpuClock::Thread(ns),
            None => CpuClock::Wall(std::time::Instant::now()),
        }
    }

    fn elapsed(&self) -> std::time::Duration {
        match (self, Self::thread_ns()) {
            (CpuClock::Thread(t0), Some(t1)) => std::time::Duration::from_nanos(t1 - t0),
            (CpuClock::Wall(t0), _) => t0.elapsed(),
            (CpuClock::Thread(_), None) => unreachable!("schedstat was readable a moment ago"),
        }
    }
}

fn bench_attention(c: &mut Criterion) {
    let mut g = c.benchmark_group("attention");
    g.sample_size(10);
    let shape = |n_heads, n_kv_heads, head_dim| AttnShape {
        n_heads,
        n_kv_heads,
        head_dim,
        scale: 0.125,
        window: None,
        softcap: None,
    };
    // (name, shape, new queries, earlier keys): an 8-head model at prefill and at depth, and
    // one decode step at a short depth of SmolLM2's and Gemma 3 270M's geometries (there the
    // call's fixed costs and its split over the threads are most of the time).
    let cases = [
        ("", shape(8, 2, 64), 512usize, 0usize),
        ("", shape(8, 2, 64), 1, 2047),
        ("smollm2/", shape(9, 3, 64), 1, 127),
        ("gemma3/", shape(4, 1, 256), 1, 127),
    ];
    for (name, s, t, pos0) in cases {
        let keys = pos0 + t;
        let (q_row, kv_row) = (s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim);
        let q: Vec<f32> = (0..t * q_row)
            .map(|i| ((i % 89) as f32 / 44.0) - 1.0)
            .collect();
        let kv: Vec<f32> = (0..keys * kv_row)
            .map(|i| ((i % 83) as f32 / 41.0) - 1.0)
            .collect();
        let mut out = vec![0f32; t * q_row];
        g.throughput(Throughput::Elements(
            (4 * t * keys * q_row / if t > 1 { 2 } else { 1 }) as u64,
        ));
        g.bench_function(format!("{name}{t}x{keys}"), |b| {
            b.iter(|| attention(black_box(&q), &kv, &kv, t, pos0, &s, &mut out))
        });
    }
    g.finish();
}

fn bench_parallel_region(c: &mut Criterion) {
    use rayon::prelude::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let mut g = c.benchmark_group("parallel_region");
    let threads = oxinfer_kernels::pool::pool_threads();
    let rayon_pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("rayon pool");
    let hits = AtomicUsize::new(0);
    for tasks in [threads, 64] {
        g.bench_function(BenchmarkId::new("pool", tasks), |b| {
            b.iter(|| {
                oxinfer_kernels::pool::parallel_for(tasks, &|i| {
                    hits.fetch_add(black_box(i), Ordering::Relaxed);
                })
            })
        });
        g.bench_function(BenchmarkId::new("rayon", tasks), |b| {
            b.iter(|| {
                rayon_pool.install(|| {
                    (0..tasks).into_par_iter().for_each(|i| {
                        hits.fetch_add(black_box(i), Ordering::Relaxed);
                    })
                })
            })
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    bench_matmul,
    bench_unpack_dot,
    bench_attention,
    bench_parallel_region
);
criterion_main!(benches);
