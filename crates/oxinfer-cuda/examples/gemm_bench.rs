//! GEMM throughput on the first CUDA GPU: each weight format through the in-tile dequantizing
//! tensor-core GEMM and through dequantize + cuBLAS, against cuBLAS bf16, at 4096³ and at the
//! prefill shapes of the models we run (t = 512 tokens). Weights are device-resident; times
//! exclude transfers. `cargo run --release -p oxinfer-cuda --example gemm_bench`.

use oxinfer_cuda::{CudaBackend, QuantPath};
use oxinfer_kernels::WeightFormat as F;

fn main() {
    let b = match CudaBackend::with_options(0, QuantPath::Mma, 1) {
        Ok(b) => b,
        Err(e) => {
            println!("skipped: no CUDA device ({e})");
            return;
        }
    };
    print!("{}", b.kernel_report());
    // (label, n_out, n_in, tokens)
    let shapes = [
        ("4096^3", 4096, 4096, 4096),
        ("7B q/o 3584x3584 t512", 3584, 3584, 512),
        ("7B gate/up 18944x3584 t512", 18944, 3584, 512),
        ("7B down 3584x18944 t512", 3584, 18944, 512),
        ("SmolLM2 up 1536x576 t512", 1536, 576, 512),
        ("SmolLM2 down 576x1536 t512", 576, 1536, 512),
    ];
    let formats = [
        F::Q4_0,
        F::Q4_1,
        F::Q5_0,
        F::Q5_1,
        F::Q8_0,
        F::Q2K,
        F::Q3K,
        F::Q4K,
        F::Q5K,
        F::Q6K,
    ];
    let only: Option<String> = std::env::args().nth(1);
    println!("| shape | format | path | ms | TFLOP/s | % of cuBLAS bf16 |");
    println!("|---|---|---|---|---|---|");
    for (label, n, k, t) in shapes {
        if only.as_deref().is_some_and(|o| !label.contains(o)) {
            continue;
        }
        let flop = 2.0 * n as f64 * k as f64 * t as f64;
        let reps = if flop > 1e11 { 20 } else { 50 };
        let base = match b.time_gemm(F::BF16, n, k, t, QuantPath::Mma, reps) {
            Ok(s) => s,
            Err(e) => {
                println!("{label}: bf16 failed: {e}");
                continue;
            }
        };
        let tf = |s: f64| flop / s / 1e12;
        println!(
            "| {label} | BF16 | cuBLAS | {:.3} | {:.1} | 100 |",
            base * 1e3,
            tf(base)
        );
        for f in formats {
            if k % f.block_size() != 0 {
                continue;
            }
            for (path, pname) in [
                (QuantPath::Mma, "in-tile mma"),
                (QuantPath::DequantCublas, "dequant+cuBLAS"),
                (QuantPath::Exact, "exact (f32 SGEMM)"),
            ] {
                match b.time_gemm(f, n, k, t, path, reps) {
                    Ok(s) => println!(
                        "| {label} | {f} | {pname} | {:.3} | {:.1} | {:.0} |",
                        s * 1e3,
                        tf(s),
                        100.0 * base / s
                    ),
                    Err(e) => println!("| {label} | {f} | {pname} | failed: {e} | | |"),
                }
            }
        }
    }
}
