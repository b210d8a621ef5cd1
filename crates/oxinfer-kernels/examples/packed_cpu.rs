//! CPU-time A/B of the row-major fast matmul and the packed GEMM on one matrix:
//! `packed_cpu FORMAT ROWS COLS T ITERS [fast|packed] [THREADS]` (float formats: `fast` only); prints GFLOP/s and GB/s of
//! weights per user-CPU second (`HUGE=1`: the weights on transparent huge pages), and GFLOP/s of the fastest single call (the one no other
//! process interrupted: the steadiest A/B number on a loaded machine). THREADS (default 1) sizes the kernel pool: one thread measures a
//! core's kernel throughput without the pool's spin-waits in the CPU time; a matrix larger than
//! the last-level cache (e.g. `Q4_K 18944 3584 1 ...`) measures the DRAM-streaming decode.
use oxinfer_kernels::fast::matmul_fast;
use oxinfer_kernels::packed::{matmul_packed, PackedMatrix};
use oxinfer_kernels::vecdot::detected_isa;
use oxinfer_kernels::{WeightFormat, WeightMatrix};

fn user_cpu() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let f: Vec<&str> = s.rsplit(')').next().unwrap().split_whitespace().collect();
    f[11].parse::<f64>().unwrap() / 100.0
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let format = WeightFormat::from_name(&a[1]).unwrap();
    let (rows, cols, t, iters): (usize, usize, usize, usize) = (
        a[2].parse().unwrap(),
        a[3].parse().unwrap(),
        a[4].parse().unwrap(),
        a[5].parse().unwrap(),
    );
    let threads: usize = a.get(7).map_or(1, |v| v.parse().unwrap());
    oxinfer_kernels::set_num_threads(threads);
    let data = oxinfer_kernels::synthetic::random_matrix(format, rows, cols, 0x1234_5678_9abc_def1)
        .expect("cols fits the block size");
    // HUGE=1: the weights on transparent huge pages (as packed copies are), not the
    // allocator's 4 KiB pages (as a mapped file's row-major weights are).
    let data: Vec<u8> = data;
    let huge = std::env::var("HUGE").is_ok_and(|v| v == "1");
    let held = huge.then(|| oxinfer_kernels::huge::HugeBytes::copy_of(&data));
    let bytes: &[u8] = held.as_deref().unwrap_or(&data);
    let w = WeightMatrix::new(format, bytes, rows, cols).unwrap();
    let x: Vec<f32> = (0..t * cols)
        .map(|i| ((i % 97) as f32 / 48.0) - 1.0)
        .collect();
    let mut y = vec![0f32; t * rows];
    let packed = a.get(6).map(|v| v == "packed").unwrap_or(true);
    // Float formats have no packed layout here: only `fast` runs them.
    let p = packed.then(|| PackedMatrix::pack(&w).expect("a format with a packed layout"));
    let (c0, w0) = (user_cpu(), std::time::Instant::now());
    let mut best = f64::INFINITY;
    for _ in 0..iters {
        let t0 = std::time::Instant::now();
        if packed {
            matmul_packed(p.as_ref().expect("packed above"), &x, t, &mut y);
        } else {
            matmul_fast(&w, &x, t, &mut y, detected_isa());
        }
        best = best.min(t0.elapsed().as_secs_f64());
    }
    let (cpu, wall) = (user_cpu() - c0, w0.elapsed().as_secs_f64());
    let flops = 2.0 * (rows * cols * t * iters) as f64;
    let bytes = (data.len() * iters) as f64;
    // The fastest single call: on a loaded machine, the one no other process interrupted.
    let best_gflops = flops / iters as f64 / best / 1e9;
    println!(
        "{} {} {rows}x{cols} t={t}: {:.1} GFLOP/s, {:.1} GB/s per CPU-second ({cpu:.2} s); \
         {:.1} GB/s wall; best call {best_gflops:.1} GFLOP/s",
        format,
        if packed { "packed" } else { "fast" },
        flops / cpu / 1e9,
        bytes / cpu / 1e9,
        bytes / wall / 1e9
    );
}
