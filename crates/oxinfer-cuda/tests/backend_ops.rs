//! Backend ops against their CPU twins over a grid of formats and shapes (in the manner of
//! llama.cpp's test-backend-ops): quantized and float matmuls, attention, the gated MLP, a
//! whole model plan (prefill and decode over the device KV cache), convolution. Runs on the
//! first CUDA GPU; where there is none it prints one "skipped: no CUDA device" line to stderr
//! and passes.

#[path = "common/blocks.rs"]
mod blocks;
#[path = "common/rng.rs"]
mod rng;
use rng::Rng;

use half::{bf16, f16};
use oxinfer::backend::{AttentionGeom, AttnShape, Backend, Job};
use oxinfer_cuda::{CudaBackend, QuantPath};
use oxinfer_kernels::attention::KvType;
use oxinfer_kernels::{WeightFormat, WeightMatrix};

/// The backend on GPU 0 taking every op (min_tokens 1), or `None` after printing why not.
fn gpu(path: QuantPath) -> Option<CudaBackend> {
    let start = std::time::Instant::now();
    match CudaBackend::with_options(0, path, 1) {
        Ok(b) => {
            // Start-up: both NVRTC programs compiled and loaded (in parallel).
            println!("backend opened in {:.2} s", start.elapsed().as_secs_f64());
            Some(b)
        }
        Err(e) => {
            eprintln!("skipped: no CUDA device ({e})");
            None
        }
    }
}

/// Random but valid weights `[rows, cols]` in `f`: random quants, scales set to sane values
/// (every byte pattern is a valid code in every block format).
fn random_weights(f: WeightFormat, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    let n_blocks = rows * cols / f.block_size();
    let bb = f.block_bytes();
    let mut data: Vec<u8> = (0..n_blocks * bb).map(|_| rng.next() as u8).collect();
    for blk in data.chunks_exact_mut(bb) {
        let d = 0.002 + 0.01 * rng.f().abs();
        let m = 0.01 * rng.f();
        match f {
            WeightFormat::F16 => blk.copy_from_slice(&f16::from_f32(rng.f()).to_le_bytes()),
            WeightFormat::BF16 => blk.copy_from_slice(&bf16::from_f32(rng.f()).to_le_bytes()),
            WeightFormat::Q8K => blocks::set_scales(f, blk, d * 0.1, 0.0),
            _ => blocks::set_scales(f, blk, d, m.abs()),
        }
    }
    data
}

/// max |a − b| / max |b|.
fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    let mut md = 0f64;
    let mut mr = 0f64;
    for (&x, &y) in a.iter().zip(b) {
        md = md.max((x as f64 - y as f64).abs());
        mr = mr.max((y as f64).abs());
        if !x.is_finite() {
            return f64::INFINITY;
        }
    }
    md / mr.max(1e-30)
}

/// Every weight format the device takes: the legacy and K-quants, the floats, [`WeightFormat::IQ`].
fn formats() -> impl Iterator<Item = WeightFormat> {
    FORMATS.into_iter().chain(WeightFormat::IQ)
}

const FORMATS: [WeightFormat; 13] = [
    WeightFormat::Q4_0,
    WeightFormat::Q4_1,
    WeightFormat::Q5_0,
    WeightFormat::Q5_1,
    WeightFormat::Q8_0,
    WeightFormat::Q2K,
    WeightFormat::Q3K,
    WeightFormat::Q4K,
    WeightFormat::Q5K,
    WeightFormat::Q6K,
    WeightFormat::Q8K,
    WeightFormat::BF16,
    WeightFormat::F16,
];

/// (n_out, n_in, t): ragged row and token counts around the 128 x 128 tile.
const SHAPES: [(usize, usize, usize); 6] = [
    (64, 256, 1),
    (100, 96, 50),
    (130, 512, 17),
    (256, 768, 128),
    (333, 1024, 200),
    (512, 2048, 300),
];

/// Exact product of bf16-rounded (f16 for F16 weights) activations with the dequantized
/// weights rounded the same way: what the device computes, up to summation order.
fn rounded_reference(w: &WeightMatrix, x: &[f32], t: usize) -> Vec<f32> {
    let round = |v: f32| -> f64 {
        if w.format == WeightFormat::F16 {
            f16::from_f32(v).to_f64()
        } else {
            bf16::from_f32(v).to_f64()
        }
    };
    let mut row = vec![0f32; w.cols];
    let mut y = vec![0f32; t * w.rows];
    for r in 0..w.rows {
        w.dequantize_row_into(r, &mut row);
        let wr: Vec<f64> = row.iter().map(|&v| round(v)).collect();
        for i in 0..t {
            let xi = &x[i * w.cols..(i + 1) * w.cols];
            let s: f64 = xi.iter().zip(&wr).map(|(&a, &b)| round(a) * b).sum();
            y[i * w.rows + r] = s as f32;
        }
    }
    y
}

/// What the dequantize + cuBLAS path computes, up to summation order: activations quantized to
/// int8 blocks as the CPU kernels do (32 or 256 values), each `d·q` rounded to f16, times the
/// dequantized weights rounded to f16.
fn q8_f16_reference(w: &WeightMatrix, x: &[f32], t: usize) -> Vec<f32> {
    use oxinfer_kernels::q8::{quantize_q8, quantize_q8k, BlockQ8, BlockQ8K};
    use oxinfer_kernels::vecdot::{act_kind, ActKind};
    let k = w.cols;
    let mut xq = vec![0f64; t * k];
    for i in 0..t {
        let xi = &x[i * k..(i + 1) * k];
        let dst = &mut xq[i * k..(i + 1) * k];
        if act_kind(w.format) == ActKind::Q8K {
            let mut b = vec![BlockQ8K::default(); k / 256];
            quantize_q8k(xi, &mut b);
            for (j, v) in dst.iter_mut().enumerate() {
                let blk = &b[j / 256];
                *v = f16::from_f32(blk.d * blk.qs[j % 256] as f32).to_f64();
            }
        } else {
            let mut b = vec![BlockQ8::default(); k / 32];
            quantize_q8(xi, &mut b);
            for (j, v) in dst.iter_mut().enumerate() {
                let blk = &b[j / 32];
                *v = f16::from_f32(blk.d * blk.qs[j % 32] as f32).to_f64();
            }
        }
    }
    let mut row = vec![0f32; k];
    let mut y = vec![0f32; t * w.rows];
    for r in 0..w.rows {
        w.dequantize_row_into(r, &mut row);
        let wr: Vec<f64> = row.iter().map(|&v| f16::from_f32(v).to_f64()).collect();
        for i in 0..t {
            let s: f64 = xq[i * k..(i + 1) * k]
                .iter()
                .zip(&wr)
                .map(|(a, b)| a * b)
                .sum();
            y[i * w.rows + r] = s as f32;
        }
    }
    y
}

/// One random product on the device: weights `[n, k]` in `f` (`k` rounded up to whole blocks)
/// times activations `[t, k]` in [-1, 1). Returns `k`, the weight bytes, the activations and
/// the device's `[t, n]` result.
fn device_matmul(
    b: &CudaBackend,
    f: WeightFormat,
    (n, k, t): (usize, usize, usize),
    rng: &mut Rng,
) -> (usize, Vec<u8>, Vec<f32>, Vec<f32>) {
    let k = k.next_multiple_of(f.block_size());
    let data = random_weights(f, n, k, rng);
    let w = WeightMatrix::new(f, &data, n, k).expect("valid matrix");
    let x: Vec<f32> = (0..t * k).map(|_| rng.f()).collect();
    let dev = b
        .upload(&w)
        .unwrap_or_else(|| panic!("{f} upload declined"));
    let mut y = vec![0f32; t * n];
    let job = Job {
        w,
        dev: &dev,
        y: &mut y,
    };
    assert!(
        b.matmul(&x, t, k, &mut [job]),
        "{f} [{n}x{k}] t={t}: matmul declined"
    );
    (k, data, x, y)
}

fn check_matmul(path: QuantPath) {
    let Some(b) = gpu(path) else { return };
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let mut worst = Vec::new();
    for f in formats() {
        if path == QuantPath::DequantCublas && !f.is_quantized() {
            continue;
        }
        for &(n, k, t) in &SHAPES {
            if f.is_quantized() && t <= GEMV_ROWS {
                // Decode-sized products take the GEMV (`gemv_matches_cpu_twin`).
                continue;
            }
            let (k, data, x, y) = device_matmul(&b, f, (n, k, t), &mut rng);
            let w = WeightMatrix::new(f, &data, n, k).expect("valid matrix");
            // Quantized weights take the dequantize + cuBLAS path on request and where the
            // in-tile kernel's 64-column step does not divide n_in.
            let q8 = f.is_quantized() && (path == QuantPath::DequantCublas || k % 64 != 0);
            let exact = if q8 {
                q8_f16_reference(&w, &x, t)
            } else {
                rounded_reference(&w, &x, t)
            };
            let e = rel_err(&y, &exact);
            let mut cpu = vec![0f32; t * n];
            oxinfer_kernels::matmul(&w, &x, t, &mut cpu);
            let e_cpu = rel_err(&y, &cpu);
            println!("{path:?} {f:5} [{n:4}x{k:4}] t={t:3}: vs rounded exact {e:.2e}, vs CPU twin {e_cpu:.2e}");
            // With the CPU's int8 activations the device differs from the CPU twin by f16
            // rounding only.
            let cpu_bound = if q8 { 5e-3 } else { 3e-2 };
            assert!(
                e < 1e-4,
                "{f} [{n}x{k}] t={t}: error {e} vs the exact product"
            );
            assert!(
                e_cpu < cpu_bound,
                "{f} [{n}x{k}] t={t}: error {e_cpu} vs the CPU matmul"
            );
            worst.push(e);
        }
    }
}

/// Most activation rows quantized products take through the GEMV kernels.
const GEMV_ROWS: usize = 8;

/// The quantized GEMV (1 to 8 activation rows, weights read in their blocks, f32 sums of the
/// CPU's int8 activation values) against the CPU matmul: every block format, ragged row
/// counts, on every quantized path (the GEMV does not depend on it). Also prints the
/// bandwidth it reaches on 7B-sized matrices (no timed assertion).
#[test]
fn gemv_matches_cpu_twin() {
    let Some(b) = gpu(QuantPath::DequantCublas) else {
        return;
    };
    let mut rng = Rng(0x6E3F_0000_0000_0001);
    let shapes = [
        (64, 256, 1),
        (300, 512, 2),
        (129, 1024, 3),
        (77, 768, 5),
        (512, 2048, 8),
        (1000, 4096, 1),
        // Enough rows for the int8 GEMV's warp-per-row grid (the smaller ones split a row over
        // a block's warps; ops::gemv_split).
        (9000, 512, 1),
        (9000, 256, 4),
        // A 3584-wide Q4_K row of few rows: two warps per row (gemv::gemv_split).
        (700, 3584, 1),
        (700, 3584, 2),
        // Nine full groups of eight K-quant blocks and a partial one in the grouped one-row
        // input layout (ops::Int8Layout).
        (40, 18944, 1),
    ];
    for f in formats().filter(|f| f.is_quantized()) {
        for &(n, k, t) in &shapes {
            let (k, data, x, y) = device_matmul(&b, f, (n, k, t), &mut rng);
            let w = WeightMatrix::new(f, &data, n, k).expect("valid matrix");
            let mut cpu = vec![0f32; t * n];
            oxinfer_kernels::matmul(&w, &x, t, &mut cpu);
            let e = rel_err(&y, &cpu);
            println!("gemv {f:5} [{n:4}x{k:4}] t={t}: vs CPU twin {e:.2e}");
            assert!(e < 2e-5, "{f} [{n}x{k}] t={t}: error {e} vs the CPU matmul");
        }
    }
    for f in [
        WeightFormat::Q4K,
        WeightFormat::Q6K,
        WeightFormat::Q8_0,
        WeightFormat::Q4_0,
        WeightFormat::Q4_1,
        WeightFormat::IQ4_XS,
        WeightFormat::IQ4_NL,
        WeightFormat::IQ2_XS,
    ] {
        for (n, k) in [(18944, 3584), (3584, 18944), (152064, 3584)] {
            for t in [1, 4, 8] {
                let secs = b.time_gemv(f, n, k, t, 20).expect("timing");
                let bytes = n * f.row_bytes(k).expect("whole blocks");
                println!(
                    "gemv {f:5} [{n:6}x{k:5}] t={t}: {:8.1} us, {:6.0} GB/s of weights",
                    secs * 1e6,
                    bytes as f64 / secs / 1e9
                );
            }
        }
    }
}

#[test]
fn matmul_in_tile_mma_matches_cpu() {
    check_matmul(QuantPath::Mma);
}

#[test]
fn matmul_dequant_cublas_matches_cpu() {
    check_matmul(QuantPath::DequantCublas);
}

/// The exact-product path (f32 decodings, activations quantized like the CPU's, SGEMM) agrees
/// with the CPU matmul to f32 rounding: every format, every shape, ragged widths included.
#[test]
fn matmul_exact_matches_cpu_twin() {
    let Some(b) = gpu(QuantPath::Exact) else {
        return;
    };
    let mut rng = Rng(0x5EED_1234_ABCD_0002);
    for f in formats() {
        for &(n, k, t) in &SHAPES {
            let (k, data, x, y) = device_matmul(&b, f, (n, k, t), &mut rng);
            let w = WeightMatrix::new(f, &data, n, k).expect("valid matrix");
            let mut cpu = vec![0f32; t * n];
            oxinfer_kernels::matmul(&w, &x, t, &mut cpu);
            let e = rel_err(&y, &cpu);
            println!("Exact {f:5} [{n:4}x{k:4}] t={t:3}: vs CPU twin {e:.2e}");
            assert!(e < 2e-5, "{f} [{n}x{k}] t={t}: error {e} vs the CPU matmul");
        }
    }
}

/// The device's whole-matrix f32 decoders (the exact path's; the same per-format dq16 code as
/// every kernel) against the CPU dequantizer, bit for bit, for the IQ / TQ / MXFP4 formats,
/// whose decoders only multiply. The other block formats are printed, not asserted: their
/// `d * q - m` may be contracted to one FMA on the device.
#[test]
fn dequant_matches_cpu_bit_for_bit() {
    let Some(b) = gpu(QuantPath::Exact) else {
        return;
    };
    let mut rng = Rng(0xDE0A_0000_0000_0004);
    for f in formats().filter(|f| f.is_quantized()) {
        let (n, k) = (37, 4 * f.block_size());
        let data = random_weights(f, n, k, &mut rng);
        let w = WeightMatrix::new(f, &data, n, k).expect("valid matrix");
        let dev = b.dequantize(&w).unwrap_or_else(|e| panic!("{f}: {e}"));
        let mut cpu = vec![0f32; n * k];
        for (r, row) in cpu.chunks_exact_mut(k).enumerate() {
            w.dequantize_row_into(r, row);
        }
        let differ = dev
            .iter()
            .zip(&cpu)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        println!(
            "dequant {f:7}: {differ} of {} values differ from the CPU's bits",
            n * k
        );
        if WeightFormat::IQ.contains(&f) {
            assert_eq!(
                differ, 0,
                "{f}: device decoder differs from the CPU dequantizer"
            );
        }
    }
}

/// Matmul inputs far beyond f16's ±65504 (rows of ~1e6 and one of ~1e-3) still match the CPU
/// int8 matmul: the device scales f16 inputs by a power of two and the product back.
#[test]
fn matmul_guards_f16_overflow() {
    let Some(b) = gpu(QuantPath::DequantCublas) else {
        return;
    };
    let mut rng = Rng(0x0F10_0000_0000_0003);
    for f in [WeightFormat::Q4_1, WeightFormat::Q4K, WeightFormat::F16] {
        let (n, k, t) = (96, 512, 20);
        let data = random_weights(f, n, k, &mut rng);
        let w = WeightMatrix::new(f, &data, n, k).expect("valid matrix");
        let mut x: Vec<f32> = (0..t * k).map(|_| 1e6 * rng.f()).collect();
        x[..k].iter_mut().for_each(|v| *v *= 1e-9);
        let dev = b.upload(&w).expect("upload");
        let mut y = vec![0f32; t * n];
        let mut job = [Job {
            w,
            dev: &dev,
            y: &mut y,
        }];
        assert!(b.matmul(&x, t, k, &mut job), "{f}: matmul declined");
        let mut cpu = vec![0f32; t * n];
        oxinfer_kernels::matmul(&w, &x, t, &mut cpu);
        let e = rel_err(&y, &cpu);
        let e0 = rel_err(&y[..n], &cpu[..n]);
        println!("{f}: inputs to 1e6, error vs CPU {e:.2e} (small row {e0:.2e})");
        assert!(e < 3e-2, "{f}: error {e} with large inputs");
    }
}

/// Attention against the CPU's: f32 on the exact path (`attention_f32` for prompts, the split
/// kernel for decode rows), and prompts on the tensor cores (`flash_attention_h*`, f16-rounded
/// inputs) on the fast paths.
#[test]
fn attention_matches_cpu() {
    for (path, bound) in [(QuantPath::Exact, 1e-4), (QuantPath::Mma, 3e-3)] {
        let Some(b) = gpu(path) else { return };
        attention_case(&b, bound);
    }
}

fn attention_case(b: &CudaBackend, bound: f64) {
    let mut rng = Rng(0xA77E_0000_0000_0042);
    // (t, pos0, heads, kv heads, head dim, window, softcap)
    let cases = [
        (1, 0, 2, 1, 32, None, None),
        (7, 0, 4, 4, 64, None, None),
        (33, 5, 8, 2, 128, None, None),
        (64, 100, 9, 3, 64, Some(40), None),
        (50, 0, 4, 1, 256, Some(16), Some(50.0)),
        (130, 0, 28, 4, 128, None, None),
        // Several query and key tiles, windows across tile edges, pos0 off the tile grid.
        (300, 700, 8, 2, 128, Some(256), None),
        (200, 37, 4, 2, 256, None, Some(30.0)),
        (129, 0, 6, 6, 96, Some(100), None),
        // Decode-sized (the split flash-decoding kernel) at long contexts.
        (1, 16383, 28, 4, 128, None, None),
        (4, 4092, 8, 1, 256, Some(1024), Some(50.0)),
        (2, 8190, 16, 8, 64, Some(4096), None),
        (8, 3000, 4, 2, 32, None, None),
    ];
    for (t, pos0, h, kvh, hd, window, softcap) in cases {
        let g = AttentionGeom {
            t,
            pos0,
            shape: AttnShape {
                n_heads: h,
                n_kv_heads: kvh,
                head_dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
                window,
                softcap,
            },
        };
        let nk = pos0 + t;
        let q: Vec<f32> = (0..t * h * hd).map(|_| 2.0 * rng.f()).collect();
        let k: Vec<f32> = (0..nk * kvh * hd).map(|_| 2.0 * rng.f()).collect();
        let v: Vec<f32> = (0..nk * kvh * hd).map(|_| rng.f()).collect();
        let mut out = vec![0f32; q.len()];
        assert!(b.attention(&q, &k, &v, &g, &mut out), "{g:?} declined");
        let cpu = oxinfer::nn::attention::attention_cpu(&q, &k, &v, &g);
        let e = rel_err(&out, &cpu);
        println!("attention {g:?}: {e:.2e}");
        assert!(e < bound, "{g:?}: error {e} (bound {bound:.0e})");
    }
}

#[test]
fn gated_mlp_matches_cpu() {
    use oxinfer::backend::{GateAct, Weight};
    let Some(b) = gpu(QuantPath::DequantCublas) else {
        return;
    };
    let mut rng = Rng(0x3141_5926_5358_9793);
    // (gate/up format, down format, dim, ffn, t, activation)
    let cases = [
        (
            WeightFormat::Q4K,
            WeightFormat::Q6K,
            256,
            768,
            40,
            GateAct::Silu,
        ),
        (
            WeightFormat::Q4_1,
            WeightFormat::Q4_1,
            576,
            1536,
            130,
            GateAct::Silu,
        ),
        (
            WeightFormat::Q8_0,
            WeightFormat::BF16,
            512,
            1024,
            17,
            GateAct::GeluTanh,
        ),
        (
            WeightFormat::IQ4_NL,
            WeightFormat::IQ3_XXS,
            256,
            768,
            40,
            GateAct::Silu,
        ),
    ];
    for (fg, fd, dim, ffn, t, act) in cases {
        let gd = random_weights(fg, ffn, dim, &mut rng);
        let ud = random_weights(fg, ffn, dim, &mut rng);
        let dd = random_weights(fd, dim, ffn, &mut rng);
        let gw = WeightMatrix::new(fg, &gd, ffn, dim).expect("gate");
        let uw = WeightMatrix::new(fg, &ud, ffn, dim).expect("up");
        let dw = WeightMatrix::new(fd, &dd, dim, ffn).expect("down");
        let (gdev, udev, ddev) = (
            b.upload(&gw).expect("gate upload"),
            b.upload(&uw).expect("up upload"),
            b.upload(&dw).expect("down upload"),
        );
        let x: Vec<f32> = (0..t * dim).map(|_| rng.f()).collect();
        let mut y = vec![0f32; t * dim];
        assert!(b.gated_mlp(
            &x,
            t,
            Weight { w: gw, dev: &gdev },
            Weight { w: uw, dev: &udev },
            Weight { w: dw, dev: &ddev },
            act,
            &mut y
        ));
        // f32 reference on the exactly dequantized weights.
        let mut g = vec![0f32; t * ffn];
        let mut u = vec![0f32; t * ffn];
        oxinfer_kernels::matmul_reference(&gw, &x, t, &mut g);
        oxinfer_kernels::matmul_reference(&uw, &x, t, &mut u);
        for (g, u) in g.iter_mut().zip(&u) {
            *g = act.apply(*g) * u;
        }
        let mut want = vec![0f32; t * dim];
        oxinfer_kernels::matmul_reference(&dw, &g, t, &mut want);
        let e = rel_err(&y, &want);
        println!("gated_mlp {fg}/{fd} dim {dim} ffn {ffn} t={t} {act:?}: {e:.2e}");
        assert!(e < 2e-2, "gated_mlp {fg}/{fd}: error {e}");
    }
}

/// A whole plan on the device ([`Backend::run_plan`] through the runner) against the CPU
/// executor: two sequences (one with 20 cached positions, so the sliding layer's ring has
/// wrapped and its past comes in two pieces), GQA, q/k biases, QK-norms; layer 0 Llama-style
/// with RoPE table 0, layer 1 Gemma-style (post-attention and post-MLP norms, RoPE table 1,
/// sliding window 12); final soft-cap; logits of every row of one sequence and the last of the
/// other. With f16 weights (no int8 activations anywhere) every layer and the logits must agree
/// to f16 rounding, which checks the plumbing; with K-quant and 32-block weights later layers
/// may move by the int8 jitter the CPU executor itself shows.
#[test]
fn plan_f16_weights_matches_cpu() {
    plan::plan_case(plan::PlanWeights::F16, KvType::F32);
}

/// [`plan_f16_weights_matches_cpu`] with quantized weights.
#[test]
fn plan_matches_cpu() {
    plan::plan_case(plan::PlanWeights::Quantized, KvType::F32);
}

/// [`plan_matches_cpu`] with f16, bf16, Q8_0 and Q4_0 KV caches on both sides: the device
/// keeps the host's type (its kernels round and quantize as the CPU does, and rotate the block
/// types' keys, values and queries by the CPU's rule), rows go up and come down unchanged, and
/// the prompt and decode attention read them.
#[test]
fn plan_stored_caches_match_cpu() {
    for kv in [KvType::F16, KvType::Bf16, KvType::Q8_0, KvType::Q4_0] {
        println!("-- KV cache {kv}");
        plan::plan_case(plan::PlanWeights::Quantized, kv);
    }
}

/// [`plan_matches_cpu`] with IQ weights (IQ4_XS, IQ2_XXS, IQ4_NL, IQ3_S, MXFP4: their int8
/// GEMVs in decode, or the register-decoding ones with `OXINFER_CUDA_GEMV=generic`).
#[test]
fn plan_iq_weights_matches_cpu() {
    plan::plan_case(plan::PlanWeights::Iq, KvType::F32);
}

/// [`plan_matches_cpu`] with value projections in another format than the query's and key's
/// (Q4_K with Q6_K, Q5_0 with Q8_0): decode steps take the mixed one-row GEMV launches.
#[test]
fn plan_mixed_value_formats_match_cpu() {
    plan::plan_case(plan::PlanWeights::Mixes, KvType::F32);
}

/// Convolution (and the odd-width float uploads it needs): in its own file, same binary.
#[path = "backend_ops/conv.rs"]
mod conv;

/// Decode over the device KV caches (the second half of the plan tests): same binary.
#[path = "backend_ops/decode.rs"]
mod decode;

/// The whole-plan case of the plan tests: same binary.
#[path = "backend_ops/plan.rs"]
mod plan;

/// Whole encoder passes (BERT-style, `run_encoder`): same binary.
#[path = "backend_ops/encoder.rs"]
mod encoder;
