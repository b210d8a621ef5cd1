//! Attention without a mask at Stable Diffusion 1.5 shapes (`nn::full_attention::
//! attention_full_seqs`, two images): prints per shape the best and median wall time per call,
//! GFLOP/s (`4 · n_q · n_k · width` per image) and the largest difference from an f64
//! reference on the first 8 queries of each image. Run once as is (the fused kernel where the
//! CPU has AVX-512) and once with `OXINFER_FUSED_ATTENTION=0` (the packed-GEMM path) to
//! compare them.
//!
//! ```text
//! cargo run --release -p oxinfer --example full_attention [reps] [n_q,n_k,heads,head_dim ...]
//! ```
//!
//! Default: 5 repetitions of 4096×4096×8×40, 1024×1024×8×80, 256×256×8×160 (the UNet's
//! self-attention at 512 × 512), 4096×77×8×40 (its cross-attention), 4096×4096×1×512 (the VAE's).

use oxinfer::nn::full_attention::attention_full_seqs;
use oxinfer_kernels::attention::AttnShape;
use oxinfer_kernels::synthetic::random_values as values;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let reps: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(5);
    let shapes: Vec<[usize; 4]> = if args.len() > 1 {
        args[1..]
            .iter()
            .map(|a| {
                let v: Vec<usize> = a.split(',').map(|x| x.parse().expect("a number")).collect();
                [v[0], v[1], v[2], v[3]]
            })
            .collect()
    } else {
        vec![
            [4096, 4096, 8, 40],
            [1024, 1024, 8, 80],
            [256, 256, 8, 160],
            [4096, 77, 8, 40],
            [4096, 4096, 1, 512],
        ]
    };
    let images = 2;
    for [n_q, n_k, heads, d] in shapes {
        let w = heads * d;
        let p = AttnShape {
            n_heads: heads,
            n_kv_heads: heads,
            head_dim: d,
            scale: 1.0 / (d as f32).sqrt(),
            window: None,
            softcap: None,
        };
        let q = values(images * n_q * w, 1, 2.0);
        let k = values(images * n_k * w, 2, 2.0);
        let v = values(images * n_k * w, 3, 1.0);
        let seqs = vec![(n_q, n_k); images];
        let mut times = Vec::new();
        let mut out = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            out = attention_full_seqs(&q, &k, &v, &seqs, &p);
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let mut worst = 0f64;
        for img in 0..images {
            for i in 0..8.min(n_q) {
                let row = img * n_q + i;
                for h in 0..heads {
                    let s: Vec<f64> = (0..n_k)
                        .map(|j| {
                            let kr = (img * n_k + j) * w + h * d;
                            (0..d)
                                .map(|e| f64::from(q[row * w + h * d + e]) * f64::from(k[kr + e]))
                                .sum::<f64>()
                                * f64::from(p.scale)
                        })
                        .collect();
                    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                    for e in 0..d {
                        let want: f64 = (0..n_k)
                            .map(|j| {
                                (s[j] - m).exp() / z * f64::from(v[(img * n_k + j) * w + h * d + e])
                            })
                            .sum();
                        worst = worst.max((want - f64::from(out[row * w + h * d + e])).abs());
                    }
                }
            }
        }
        let flops = 4.0 * (images * n_q * n_k * w) as f64;
        println!(
            "{n_q}x{n_k} heads {heads} x {d}: best {:.1} ms, median {:.1} ms, {:.0} GFLOP/s; max |diff| {worst:.2e}",
            times[0] * 1e3,
            times[times.len() / 2] * 1e3,
            flops / times[0] / 1e9
        );
    }
}
