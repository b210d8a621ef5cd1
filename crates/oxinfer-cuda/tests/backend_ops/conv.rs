//! Backend op tests of the convolution: the implicit-GEMM `conv2d` with its fused norm against
//! the CPU reference, and f16/bf16 matmuls of widths that are not a multiple of 16 (convolution
//! weights are `k²·cin` wide). Part of the `backend_ops` test binary (helpers from there).

use super::{device_matmul, gpu, random_weights, rel_err, rounded_reference, Rng};
use half::bf16;
use oxinfer::backend::{Backend, ConvGeom, Job, NormKind, NormSpec};
use oxinfer_cuda::{ConvPath, CudaBackend, QuantPath};
use oxinfer_kernels::{WeightFormat, WeightMatrix};

/// The weight `[rows, cols]` decoded to f32, as F32 bytes (the CPU reference of a device
/// product that multiplies decoded weights with f32 activations).
fn decoded_f32(w: &WeightMatrix) -> Vec<u8> {
    let mut row = vec![0f32; w.cols];
    let mut out = Vec::with_capacity(w.rows * w.cols * 4);
    for r in 0..w.rows {
        w.dequantize_row_into(r, &mut row);
        out.extend(row.iter().flat_map(|v| v.to_le_bytes()));
    }
    out
}

/// A random channels-last input `[h * w, cin]` with an offset (so that a norm's mean matters)
/// and a norm's gamma and beta `[cin]`.
struct ConvInput {
    x: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
    /// GroupNorm groups: 8 where they divide `cin`, else 1.
    groups: usize,
}

impl ConvInput {
    fn random(h: usize, w: usize, cin: usize, rng: &mut Rng) -> Self {
        let x = (0..h * w * cin).map(|_| 2.0 * rng.f() + 0.5).collect();
        let gamma = (0..cin).map(|_| 1.0 + 0.5 * rng.f()).collect();
        let beta = (0..cin).map(|_| 0.3 * rng.f()).collect();
        let groups = if cin.is_multiple_of(8) { 8 } else { 1 };
        ConvInput {
            x,
            gamma,
            beta,
            groups,
        }
    }

    /// No norm, GroupNorm + SiLU, LayerNorm.
    fn norms(&self) -> [Option<NormSpec<'_>>; 3] {
        let norm = |kind, silu| NormSpec {
            kind,
            eps: 1e-5,
            gamma: &self.gamma,
            beta: &self.beta,
            silu,
        };
        [
            None,
            Some(norm(NormKind::Group(self.groups), true)),
            Some(norm(NormKind::Layer, false)),
        ]
    }
}

/// One device convolution against the CPU reference with the same (decoded) weights and f32
/// activations; returns the relative error.
fn conv_case(
    b: &CudaBackend,
    x: &[f32],
    g: &ConvGeom,
    norm: Option<&NormSpec>,
    w: WeightMatrix,
) -> f64 {
    let dev = b
        .upload(&w)
        .unwrap_or_else(|| panic!("{} [{}x{}] upload declined", w.format, w.rows, w.cols));
    let mut y = vec![f32::NAN; g.oh * g.ow * w.rows];
    let mut job = Job {
        w,
        dev: &dev,
        y: &mut y,
    };
    assert!(b.conv2d(x, g, norm, &mut job), "conv2d declined: {g:?}");
    // Float weights: the CPU matmul is f32 already; quantized: compare with f32 activations.
    let dec = decoded_f32(&w);
    let wf = WeightMatrix::new(WeightFormat::F32, &dec, w.rows, w.cols).expect("f32 matrix");
    let mut cpu = vec![0f32; y.len()];
    oxinfer::nn::conv2d_cpu(x, g, norm, &wf, &mut cpu).expect("valid shapes");
    rel_err(&y, &cpu)
}

/// The implicit-GEMM convolution with its fused GroupNorm / LayerNorm (+ SiLU) against the CPU
/// reference (`oxinfer::nn::conv2d_cpu`) over shapes, strides, kernel sizes, norms and weight
/// formats (both compute in f32), then one SD-like shape timed.
#[test]
fn conv2d_matches_cpu_twin() {
    let Some(b) = gpu(QuantPath::DequantCublas) else {
        return;
    };
    let b = b.with_conv_path(ConvPath::F32);
    let mut rng = Rng(0x5EED_C0DE_0000_0007);
    let mut worst = 0f64;
    for (h, w) in [(8, 8), (13, 7), (32, 32)] {
        for cin in [3, 32, 40] {
            let input = ConvInput::random(h, w, cin, &mut rng);
            let (x, norms) = (&input.x, input.norms());
            for (k, stride) in [(1, 1), (1, 2), (3, 1), (3, 2)] {
                let g = oxinfer::nn::conv_geom(h, w, cin, k, stride).expect("geometry");
                for n_out in [16, 33, 64] {
                    for f in [WeightFormat::F16, WeightFormat::BF16] {
                        let data = random_weights(f, n_out, k * k * cin, &mut rng);
                        for n in &norms {
                            let wm =
                                WeightMatrix::new(f, &data, n_out, k * k * cin).expect("matrix");
                            let e = conv_case(&b, x, &g, n.as_ref(), wm);
                            let nk = n.map(|n| (n.kind, n.silu));
                            let case = format!("{h}x{w}x{cin} -> {n_out} k{k} s{stride} {f}");
                            println!("conv2d {case} {nk:?}: {e:.2e}");
                            assert!(e < 1e-4, "{case} {nk:?}: error {e}");
                            worst = worst.max(e);
                        }
                    }
                }
            }
        }
    }
    // Quantized weights are decoded to f32 once on the device (widths: whole blocks).
    for (f, cin) in [
        (WeightFormat::Q8_0, 32),
        (WeightFormat::Q4_1, 64),
        (WeightFormat::Q4K, 256),
    ] {
        for k in [1, 3] {
            let (h, w, n_out) = (13, 7, 40);
            let g = oxinfer::nn::conv_geom(h, w, cin, k, 1).expect("geometry");
            let x: Vec<f32> = (0..h * w * cin).map(|_| rng.f()).collect();
            let data = random_weights(f, n_out, k * k * cin, &mut rng);
            let wm = WeightMatrix::new(f, &data, n_out, k * k * cin).expect("matrix");
            let e = conv_case(&b, &x, &g, None, wm);
            println!("conv2d {h}x{w}x{cin} -> {n_out} k{k} {f}: {e:.2e}");
            assert!(e < 1e-4, "{f} k{k}: error {e}");
            worst = worst.max(e);
        }
    }
    println!("conv2d worst relative error: {worst:.2e}");

    // SD-like: a 64x64 latent with 320 channels, GroupNorm(32) + SiLU, 3x3 to 320 channels.
    let (h, w, cin, n_out) = (64, 64, 320, 320);
    let g = oxinfer::nn::conv_geom(h, w, cin, 3, 1).expect("geometry");
    let x: Vec<f32> = (0..h * w * cin).map(|_| rng.f()).collect();
    let ones = vec![1f32; cin];
    let zeros = vec![0f32; cin];
    let norm = NormSpec {
        kind: NormKind::Group(32),
        eps: 1e-5,
        gamma: &ones,
        beta: &zeros,
        silu: true,
    };
    let data = random_weights(WeightFormat::F16, n_out, 9 * cin, &mut rng);
    let wm = WeightMatrix::new(WeightFormat::F16, &data, n_out, 9 * cin).expect("matrix");
    let flop = 2.0 * (g.oh * g.ow * n_out * 9 * cin) as f64;
    if let Some(bm) = gpu(QuantPath::DequantCublas) {
        let bm = bm.with_conv_path(ConvPath::Bf16);
        let s = bm.time_conv(&x, &g, Some(&norm), &wm, 20).expect("timing");
        println!(
            "conv2d 64x64x320 -> 320 k3 GroupNorm(32)+SiLU F16, bf16 tensor cores: device \
             {:.3} ms ({:.1} TFLOP/s)",
            s * 1e3,
            flop / s / 1e12
        );
    }
    let dev_s = b.time_conv(&x, &g, Some(&norm), &wm, 20).expect("timing");
    let dev = b.upload(&wm).expect("upload");
    let mut y = vec![0f32; g.oh * g.ow * n_out];
    let t = std::time::Instant::now();
    assert!(b.conv2d(
        &x,
        &g,
        Some(&norm),
        &mut Job {
            w: wm,
            dev: &dev,
            y: &mut y
        }
    ));
    let wall_s = t.elapsed().as_secs_f64();
    let mut cpu = vec![0f32; y.len()];
    let t = std::time::Instant::now();
    oxinfer::nn::conv2d_cpu(&x, &g, Some(&norm), &wm, &mut cpu).expect("valid shapes");
    let cpu_s = t.elapsed().as_secs_f64();
    println!(
        "conv2d 64x64x320 -> 320 k3 GroupNorm(32)+SiLU F16, f32: device {:.3} ms ({:.1} TFLOP/s), \
         with transfers {:.3} ms, CPU {:.1} ms ({:.2} TFLOP/s); rel err {:.2e}",
        dev_s * 1e3,
        flop / dev_s / 1e12,
        wall_s * 1e3,
        cpu_s * 1e3,
        flop / cpu_s / 1e12,
        rel_err(&y, &cpu)
    );
}

/// The tensor-core convolution (`ConvPath::Bf16`) against the CPU reference with its inputs
/// rounded as the kernel rounds them (normalized activations and weights to bf16; products
/// and sums in f32), and against the unrounded reference.
#[test]
fn conv2d_mma_matches_bf16_rounded_cpu() {
    let Some(b) = gpu(QuantPath::DequantCublas) else {
        return;
    };
    let b = b.with_conv_path(ConvPath::Bf16);
    let bf = |v: f32| bf16::from_f32(v).to_f32();
    let mut rng = Rng(0x5EED_C0DE_0000_0008);
    for (h, w) in [(13, 7), (32, 32)] {
        for cin in [3, 40, 256] {
            let input = ConvInput::random(h, w, cin, &mut rng);
            let (x, norms) = (&input.x, input.norms());
            for (k, stride) in [(1, 1), (3, 1), (3, 2)] {
                let g = oxinfer::nn::conv_geom(h, w, cin, k, stride).expect("geometry");
                for n_out in [33, 130] {
                    let cols = k * k * cin;
                    let data = random_weights(WeightFormat::F16, n_out, cols, &mut rng);
                    let wm = WeightMatrix::new(WeightFormat::F16, &data, n_out, cols).unwrap();
                    let dec = decoded_f32(&wm);
                    let w32 = WeightMatrix::new(WeightFormat::F32, &dec, n_out, cols).unwrap();
                    let rounded: Vec<u8> = dec
                        .chunks_exact(4)
                        .flat_map(|c| bf(f32::from_le_bytes(c.try_into().unwrap())).to_le_bytes())
                        .collect();
                    let wr = WeightMatrix::new(WeightFormat::F32, &rounded, n_out, cols).unwrap();
                    let dev = b.upload(&wm).expect("upload");
                    for n in &norms {
                        let mut y = vec![f32::NAN; g.oh * g.ow * n_out];
                        let mut job = Job {
                            w: wm,
                            dev: &dev,
                            y: &mut y,
                        };
                        assert!(b.conv2d(x, &g, n.as_ref(), &mut job), "declined");
                        let xn = match n {
                            Some(n) => oxinfer::nn::conv_input_norm(x, &g, n).unwrap(),
                            None => x.clone(),
                        };
                        let xr: Vec<f32> = xn.iter().map(|&v| bf(v)).collect();
                        let mut want = vec![0f32; y.len()];
                        oxinfer::nn::conv2d_cpu(&xr, &g, None, &wr, &mut want).unwrap();
                        let mut exact = vec![0f32; y.len()];
                        oxinfer::nn::conv2d_cpu(x, &g, n.as_ref(), &w32, &mut exact).unwrap();
                        let (e, e_exact) = (rel_err(&y, &want), rel_err(&y, &exact));
                        let nk = n.map(|n| (n.kind, n.silu));
                        let case = format!("{h}x{w}x{cin} -> {n_out} k{k} s{stride} {nk:?}");
                        println!("conv2d mma {case}: vs rounded {e:.2e}, vs f32 {e_exact:.2e}");
                        // A norm computed in another order may flip a bf16 rounding here and
                        // there (2^-9 of one input each): far below any indexing error.
                        assert!(e < 1e-3, "{case}: error {e} vs the bf16-rounded reference");
                        assert!(
                            e_exact < 2e-2,
                            "{case}: error {e_exact} vs the f32 reference"
                        );
                    }
                }
            }
        }
    }
}

/// f16/bf16 weights of widths that are not a multiple of 16 (convolution weights `k²·cin`
/// are) are taken by `upload` and multiply like any other width.
#[test]
fn matmul_float_odd_widths_match_cpu() {
    for path in [QuantPath::DequantCublas, QuantPath::Exact] {
        let Some(b) = gpu(path) else {
            return;
        };
        let mut rng = Rng(0x0DD0_0000_0000_0011);
        for f in [WeightFormat::F16, WeightFormat::BF16] {
            for (n, k, t) in [(16, 3, 20), (33, 27, 50), (64, 360, 17)] {
                // Float formats have blocks of one value: `k` stays odd.
                let (k, data, x, y) = device_matmul(&b, f, (n, k, t), &mut rng);
                let w = WeightMatrix::new(f, &data, n, k).expect("valid matrix");
                let want = if path == QuantPath::Exact {
                    let mut cpu = vec![0f32; t * n];
                    oxinfer_kernels::matmul(&w, &x, t, &mut cpu);
                    cpu
                } else {
                    rounded_reference(&w, &x, t)
                };
                let e = rel_err(&y, &want);
                println!("{path:?} {f} [{n}x{k}] t={t}: {e:.2e}");
                assert!(e < 1e-4, "{path:?} {f} [{n}x{k}] t={t}: error {e}");
            }
        }
    }
}
