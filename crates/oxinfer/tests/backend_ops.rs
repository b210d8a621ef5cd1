//! Backend ops against their CPU twins over a grid of formats and shapes (in the manner of
//! llama.cpp's test-backend-ops): quantized and float matmuls, attention. Runs on the first CUDA
//! GPU; where there is none it prints one "skipped: no CUDA device" line and passes.

use half::{bf16, f16};
use oxinfer::backend::{AttentionGeom, Backend, Job};
use oxinfer_cuda::{CudaBackend, QuantPath};
use oxinfer_kernels::{WeightFormat, WeightMatrix};

/// The backend on GPU 0 taking every op (min_tokens 1), or `None` after printing why not.
fn gpu(path: QuantPath) -> Option<CudaBackend> {
    match CudaBackend::with_options(0, path, 1) {
        Ok(b) => Some(b),
        Err(e) => {
            println!("skipped: no CUDA device ({e})");
            None
        }
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [-1, 1).
    fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Random but valid weights `[rows, cols]` in `f`: random quants, scales set to sane values.
fn random_weights(f: WeightFormat, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    let n_blocks = rows * cols / f.block_size();
    let bb = f.block_bytes();
    let mut data: Vec<u8> = (0..n_blocks * bb).map(|_| rng.next() as u8).collect();
    let put16 = |b: &mut [u8], at: usize, v: f32| {
        b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
    };
    for blk in data.chunks_exact_mut(bb) {
        let d = 0.002 + 0.01 * rng.f().abs();
        let m = 0.01 * rng.f();
        match f {
            WeightFormat::F16 => blk.copy_from_slice(&f16::from_f32(rng.f()).to_le_bytes()),
            WeightFormat::BF16 => blk.copy_from_slice(&bf16::from_f32(rng.f()).to_le_bytes()),
            WeightFormat::Q4_0 | WeightFormat::Q5_0 | WeightFormat::Q8_0 => put16(blk, 0, d),
            WeightFormat::Q4_1 | WeightFormat::Q5_1 | WeightFormat::Q4K | WeightFormat::Q5K => {
                put16(blk, 0, d);
                put16(blk, 2, m.abs());
            }
            WeightFormat::Q2K => {
                put16(blk, 80, d);
                put16(blk, 82, m.abs());
            }
            WeightFormat::Q3K => put16(blk, 108, d),
            WeightFormat::Q6K => put16(blk, 208, d),
            WeightFormat::Q8K => blk[..4].copy_from_slice(&(d * 0.1).to_le_bytes()),
            _ => unreachable!("format {f} not in the grid"),
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

fn check_matmul(path: QuantPath) {
    let Some(b) = gpu(path) else { return };
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let mut worst = Vec::new();
    for f in FORMATS {
        if path == QuantPath::DequantCublas && !f.is_quantized() {
            continue;
        }
        for &(n, k, t) in &SHAPES {
            let k = k.next_multiple_of(f.block_size());
            let data = random_weights(f, n, k, &mut rng);
            let w = WeightMatrix::new(f, &data, n, k).expect("valid matrix");
            let x: Vec<f32> = (0..t * k).map(|_| rng.f()).collect();
            let dev = b
                .upload(&w)
                .unwrap_or_else(|| panic!("{f} upload declined"));
            let mut y = vec![0f32; t * n];
            assert!(
                b.matmul(
                    &x,
                    t,
                    k,
                    &mut [Job {
                        w,
                        dev: &dev,
                        y: &mut y
                    }]
                ),
                "{f} [{n}x{k}] t={t}: matmul declined"
            );
            let exact = rounded_reference(&w, &x, t);
            let e = rel_err(&y, &exact);
            let mut cpu = vec![0f32; t * n];
            oxinfer_kernels::matmul(&w, &x, t, &mut cpu);
            let e_cpu = rel_err(&y, &cpu);
            println!("{path:?} {f:5} [{n:4}x{k:4}] t={t:3}: vs rounded exact {e:.2e}, vs CPU twin {e_cpu:.2e}");
            assert!(
                e < 1e-4,
                "{f} [{n}x{k}] t={t}: error {e} vs the exact product"
            );
            assert!(
                e_cpu < 3e-2,
                "{f} [{n}x{k}] t={t}: error {e_cpu} vs the CPU matmul"
            );
            worst.push(e);
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

#[test]
fn attention_matches_cpu() {
    let Some(b) = gpu(QuantPath::Mma) else { return };
    let mut rng = Rng(0xA77E_0000_0000_0042);
    // (t, pos0, heads, kv heads, head dim, window, softcap)
    let cases = [
        (1, 0, 2, 1, 32, None, None),
        (7, 0, 4, 4, 64, None, None),
        (33, 5, 8, 2, 128, None, None),
        (64, 100, 9, 3, 64, Some(40), None),
        (50, 0, 4, 1, 256, Some(16), Some(50.0)),
        (130, 0, 28, 4, 128, None, None),
    ];
    for (t, pos0, h, kvh, hd, window, softcap) in cases {
        let g = AttentionGeom {
            t,
            pos0,
            n_heads: h,
            n_kv_heads: kvh,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            window,
            softcap,
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
        assert!(e < 1e-4, "{g:?}: error {e}");
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
