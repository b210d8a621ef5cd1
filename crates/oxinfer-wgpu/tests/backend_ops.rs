//! Every wgpu kernel against its CPU twin (in the manner of the CUDA crate's backend_ops):
//! matmuls of every weight format the shaders decode, attention (causal, GQA, sliding window,
//! soft-cap, long contexts), the gated MLP, RMSNorm, RoPE (both pairings), the gated
//! activations and the soft-cap. Runs on the first wgpu adapter (lavapipe in CI); without one
//! it prints a `skipped:` line, and under `CI=true` it fails instead.

mod device;

use device::{backend, randoms, rel_err};
use oxinfer::backend::{AttentionGeom, AttnShape, Backend, GateAct, Job, Weight};
use oxinfer_kernels::{WeightFormat, WeightMatrix};
use oxinfer_wgpu::{WgpuBackend, FORMATS};

/// Weights `[rows, cols]` of `f`: random quants with small scales for block formats
/// (`synthetic::random_matrix`), the split formats quantized from random f32.
fn weights(f: WeightFormat, rows: usize, cols: usize, seed: u64) -> (Vec<u8>, Vec<u8>) {
    if WeightFormat::SPLIT.contains(&f) {
        let src = oxinfer_kernels::synthetic::random_matrix(WeightFormat::F32, rows, cols, seed)
            .expect("f32 weights");
        let m = WeightMatrix::new(WeightFormat::F32, &src, rows, cols).expect("matrix");
        let q = oxinfer_kernels::quantize::quantize_matrix(&m, f).expect("quantize");
        return (q.data, q.scales);
    }
    let data = oxinfer_kernels::synthetic::random_matrix(f, rows, cols, seed).expect("weights");
    (data, Vec::new())
}

/// Every decoded format against the CPU matmul (int8-rounded activations for quantized
/// formats, exactly as the CPU rounds them), over decode- and prefill-sized row counts,
/// ragged against the 8-row step; float rows also of a width that is no multiple of 32.
/// The CPU product the device's should equal: the exact one (f32 inputs), or with
/// `OXINFER_WGPU_INT8_INPUTS=1` the integer kernels' (inputs rounded through int8 blocks).
fn cpu_matmul(w: &WeightMatrix, x: &[f32], t: usize, y: &mut [f32]) {
    if oxinfer_wgpu::int8_inputs() {
        oxinfer_kernels::matmul(w, x, t, y);
    } else {
        oxinfer_kernels::matmul_reference(w, x, t, y);
    }
}

/// One `[n, k]` matrix of format `f` (weights from `seed`) times `t` random rows on `b` against
/// the CPU twin: asserts and prints the relative error (`what` labels the line).
fn check_matmul(
    b: &WgpuBackend,
    f: WeightFormat,
    (n, k, t): (usize, usize, usize),
    seed: u64,
    what: &str,
) {
    let (data, scales) = weights(f, n, k, seed);
    let w = WeightMatrix::new_split(f, &data, &scales, n, k).expect("matrix");
    let x = randoms(t * k, 93 + seed, 1.0);
    let dev = b
        .upload(&w)
        .unwrap_or_else(|| panic!("{f} upload declined"));
    let mut y = vec![0f32; t * n];
    let job = Job {
        w,
        dev: &dev,
        y: &mut y,
    };
    assert!(b.matmul(&x, t, k, &mut [job]), "{f}: matmul declined");
    let mut cpu = vec![0f32; t * n];
    cpu_matmul(&w, &x, t, &mut cpu);
    let e = rel_err(&y, &cpu);
    println!("{f:5} [{n:3}x{k:3}] t={t:2}{what}: vs CPU {e:.2e}");
    assert!(
        e < 2e-6,
        "{f} [{n}x{k}] t={t}{what}: error {e} vs the CPU matmul"
    );
}

#[test]
fn matmul_matches_cpu_twin() {
    let Some(b) = backend() else { return };
    let shapes: [(usize, usize, usize); 7] = [
        (64, 256, 1),
        (96, 512, 3),
        (130, 256, 9),
        (70, 512, 20),
        (50, 48, 5),
        (40, 576, 3),
        (24, 1536, 12),
    ];
    for f in FORMATS {
        for (si, &(n, k, t)) in shapes.iter().enumerate() {
            if !k.is_multiple_of(f.block_size()) || (f.is_quantized() && k % 32 != 0) {
                continue;
            }
            check_matmul(&b, f, (n, k, t), 7 + si as u64, "");
        }
    }
}

/// One activation row (a decode step), which takes the matvec kernel for the block formats it
/// decodes: output rows that do not fill its row groups, rows of one block and of many; with
/// the subgroup reduction where the adapter has subgroups, and with the workgroup-memory one.
#[test]
fn matvec_matches_cpu_twin() {
    let Some(b) = backend() else { return };
    let mut runs = vec![(b, "")];
    if runs[0].0.subgroups() {
        let plain = backend().expect("a second backend").without_subgroups();
        runs.push((plain, " (no subgroups)"));
    }
    for (b, what) in &runs {
        matvec_formats(b, what);
    }
}

fn matvec_formats(b: &WgpuBackend, what: &str) {
    for f in FORMATS {
        for (si, &(n, k)) in [
            (70usize, 512usize),
            (5, 256),
            (131, 1536),
            (9, 4096),
            (300, 576),
        ]
        .iter()
        .enumerate()
        {
            if !k.is_multiple_of(f.block_size()) {
                continue;
            }
            check_matmul(b, f, (n, k, 1), 31 + si as u64, what);
        }
    }
}

/// A matrix larger than one storage binding (the limit lowered to 64 KiB) is uploaded in row
/// parts and multiplied one dispatch per part: the same result as the CPU twin.
#[test]
fn split_matrix_matches_cpu_twin() {
    let Some(b) = backend() else { return };
    let b = b.with_max_binding(64 << 10);
    for (f, n, k, t) in [
        (WeightFormat::Q8_0, 700, 640, 1),
        (WeightFormat::Q4K, 1100, 512, 3),
        (WeightFormat::F32, 70, 512, 2),
    ] {
        let bytes = n * f.row_bytes(k).expect("whole blocks");
        assert!(bytes > 64 << 10, "{f}: the matrix must need several parts");
        check_matmul(&b, f, (n, k, t), 11, " in 64 KiB parts");
    }
}

#[test]
fn attention_matches_cpu_twin() {
    let Some(b) = backend() else { return };
    // (t, pos0, heads, kv heads, head dim, window, softcap)
    let cases = [
        (1, 0, 2, 1, 32, None, None),
        (7, 0, 4, 4, 64, None, None),
        (33, 5, 8, 2, 128, None, None),
        (20, 100, 6, 3, 64, Some(40), None),
        (17, 0, 4, 1, 256, Some(16), Some(50.0)),
        (1, 700, 4, 2, 64, None, Some(30.0)),
        (3, 300, 2, 2, 16, Some(70), None),
    ];
    for (ci, (t, pos0, h, kvh, hd, window, softcap)) in cases.into_iter().enumerate() {
        let seed = 3 * ci as u64;
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
        let q = randoms(t * h * hd, seed, 2.0);
        let k = randoms(nk * kvh * hd, seed + 1, 2.0);
        let v = randoms(nk * kvh * hd, seed + 2, 1.0);
        let mut out = vec![0f32; q.len()];
        assert!(b.attention(&q, &k, &v, &g, &mut out), "{g:?} declined");
        let cpu = oxinfer::nn::attention::attention_cpu(&q, &k, &v, &g);
        let e = rel_err(&out, &cpu);
        println!("attention {g:?}: {e:.2e}");
        assert!(e < 1e-5, "{g:?}: error {e}");
    }
}

#[test]
fn gated_mlp_matches_cpu_twin() {
    let Some(b) = backend() else { return };
    let cases = [
        (
            WeightFormat::Q4K,
            WeightFormat::Q6K,
            256,
            512,
            1,
            GateAct::Silu,
        ),
        (
            WeightFormat::Q4_1,
            WeightFormat::Q8_0,
            128,
            384,
            5,
            GateAct::GeluTanh,
        ),
        (
            WeightFormat::F16,
            WeightFormat::BF16,
            96,
            160,
            18,
            GateAct::Silu,
        ),
    ];
    for (fu, fd, dim, ffn, t, act) in cases {
        let (gd, _) = weights(fu, ffn, dim, 1);
        let (ud, _) = weights(fu, ffn, dim, 2);
        let (dd, _) = weights(fd, dim, ffn, 3);
        let gw = WeightMatrix::new(fu, &gd, ffn, dim).expect("gate");
        let uw = WeightMatrix::new(fu, &ud, ffn, dim).expect("up");
        let dw = WeightMatrix::new(fd, &dd, dim, ffn).expect("down");
        let devs = [&gw, &uw, &dw].map(|w| b.upload(w).expect("upload"));
        let x = randoms(t * dim, dim as u64, 1.0);
        let mut y = vec![0f32; t * dim];
        let ok = b.gated_mlp(
            &x,
            t,
            Weight {
                w: gw,
                dev: &devs[0],
            },
            Weight {
                w: uw,
                dev: &devs[1],
            },
            Weight {
                w: dw,
                dev: &devs[2],
            },
            act,
            &mut y,
        );
        assert!(ok, "{fu}/{fd}: gated MLP declined");
        let (mut g, mut u, mut cpu) = (
            vec![0f32; t * ffn],
            vec![0f32; t * ffn],
            vec![0f32; t * dim],
        );
        cpu_matmul(&gw, &x, t, &mut g);
        cpu_matmul(&uw, &x, t, &mut u);
        let h: Vec<f32> = g.iter().zip(&u).map(|(&g, &u)| act.apply(g) * u).collect();
        cpu_matmul(&dw, &h, t, &mut cpu);
        let e = rel_err(&y, &cpu);
        println!("gated MLP {fu}/{fd} {act:?} t={t}: {e:.2e}");
        assert!(e < 1e-5, "{fu}/{fd}: error {e}");
    }
}

#[test]
fn norm_rope_and_activations_match_cpu_twins() {
    let Some(b) = backend() else { return };
    for (rows, w) in [(3, 64), (5, 576), (1, 2048)] {
        let x = randoms(rows * w, w as u64, 3.0);
        let gain: Vec<f32> = randoms(w, 1, 1.0).iter().map(|g| 1.0 + g).collect();
        let got = b.rms_norm(&x, &gain, 1e-6).expect("rms_norm");
        let mut cpu = x.clone();
        for r in cpu.chunks_exact_mut(w) {
            oxinfer::nn::norm::rms_norm_row(r, &gain, 1e-6);
        }
        let e = rel_err(&got, &cpu);
        println!("rms_norm [{rows}x{w}]: {e:.2e}");
        assert!(e < 1e-5, "rms_norm [{rows}x{w}]: {e}");
    }
    for (t, heads, hd, rot, interleaved) in [
        (4, 3, 64, 64, false),
        (2, 2, 32, 16, true),
        (5, 1, 128, 64, false),
    ] {
        let half = rot / 2;
        let x = randoms(t * heads * hd, hd as u64, 1.0);
        let ang: Vec<f32> = (0..t * half).map(|i| 0.37 * i as f32).collect();
        let (cos, sin): (Vec<f32>, Vec<f32>) = ang.iter().map(|a| (a.cos(), a.sin())).unzip();
        let got = b
            .rope(&x, (t, heads, hd), &cos, &sin, interleaved)
            .expect("rope");
        let mut cpu = x.clone();
        for (i, row) in cpu.chunks_exact_mut(heads * hd).enumerate() {
            for head in row.chunks_exact_mut(hd) {
                for j in 0..half {
                    let (a, bi) = if interleaved {
                        (2 * j, 2 * j + 1)
                    } else {
                        (j, j + half)
                    };
                    let (c, s) = (cos[i * half + j], sin[i * half + j]);
                    let (x0, x1) = (head[a], head[bi]);
                    head[a] = x0 * c - x1 * s;
                    head[bi] = x0 * s + x1 * c;
                }
            }
        }
        let e = rel_err(&got, &cpu);
        println!("rope t={t} heads={heads} hd={hd} rot={rot} interleaved={interleaved}: {e:.2e}");
        assert!(e < 1e-6, "rope: {e}");
    }
    let (g, u) = (randoms(1000, 5, 12.0), randoms(1000, 6, 1.0));
    for act in [GateAct::Silu, GateAct::GeluTanh] {
        let got = b.gated_act(&g, &u, act).expect("gated_act");
        let cpu: Vec<f32> = g.iter().zip(&u).map(|(&g, &u)| act.apply(g) * u).collect();
        let e = rel_err(&got, &cpu);
        println!("gated {act:?}: {e:.2e}");
        assert!(e < 1e-5, "{act:?}: {e}");
    }
    let x = randoms(1000, 7, 200.0);
    let got = b.softcap(&x, 30.0).expect("softcap");
    let cpu: Vec<f32> = x.iter().map(|&v| 30.0 * (v / 30.0).tanh()).collect();
    let e = rel_err(&got, &cpu);
    println!("softcap: {e:.2e}");
    assert!(e < 1e-5, "softcap: {e}");
}
