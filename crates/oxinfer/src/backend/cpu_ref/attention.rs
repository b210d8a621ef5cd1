//! The CPU reference of [`Backend::attention`](crate::backend::Backend::attention): causal
//! multi-head attention (GQA, optional sliding window and logit soft-capping). The default
//! kernel set runs the fused, tiled kernel ([`oxinfer_kernels::attention`]);
//! `OXINFER_KERNELS=scalar` runs the plain reference here: one softmax per query row, heads in
//! parallel.

use crate::backend::AttentionGeom;

/// The CPU reference of [`crate::nn::attention`] (also the twin `OXINFER_GPU_CHECK` compares against):
/// `q` `[t, n_heads * head_dim]`, `k`/`v` at least `[pos0 + t, n_kv_heads * head_dim]`.
pub fn attention_cpu(q: &[f32], k: &[f32], v: &[f32], p: &AttentionGeom) -> Vec<f32> {
    let (t, pos0) = (p.t, p.pos0);
    let hd = p.shape.head_dim;
    let kv_row = p.shape.n_kv_heads * hd;
    let q_row = p.shape.n_heads * hd;
    let n_keys = pos0 + t;
    debug_assert_eq!(q.len(), t * q_row);
    debug_assert!(k.len() >= n_keys * kv_row && v.len() >= n_keys * kv_row);
    let group = p.shape.n_heads / p.shape.n_kv_heads;
    let _prof = oxinfer_kernels::profile::scope(
        || "attention".to_string(),
        (2 * n_keys * kv_row * 4) as u64,
        (4 * t * n_keys * q_row) as u64,
    );
    if oxinfer_kernels::kernel_set() != oxinfer_kernels::KernelSet::Scalar {
        let mut out = vec![0f32; t * q_row];
        oxinfer_kernels::attention::attention(q, k, v, t, pos0, &p.shape, &mut out);
        return out;
    }

    let mut per_head: Vec<Vec<f32>> = vec![Vec::new(); p.shape.n_heads];
    oxinfer_kernels::pool::for_each_mut(&mut per_head, |h, out| {
        out.resize(t * hd, 0.0);
        let kvh = h / group;
        let mut scores = vec![0f32; n_keys];
        for i in 0..t {
            let pos = pos0 + i;
            let first = match p.shape.window {
                Some(w) => (pos + 1).saturating_sub(w),
                None => 0,
            };
            let qi = &q[i * q_row + h * hd..i * q_row + (h + 1) * hd];
            let mut max = f32::NEG_INFINITY;
            for j in first..=pos {
                let kj = &k[j * kv_row + kvh * hd..j * kv_row + (kvh + 1) * hd];
                let mut s = dot(qi, kj) * p.shape.scale;
                if let Some(cap) = p.shape.softcap {
                    s = cap * (s / cap).tanh();
                }
                scores[j] = s;
                max = max.max(s);
            }
            let mut sum = 0f32;
            for s in &mut scores[first..=pos] {
                *s = (*s - max).exp();
                sum += *s;
            }
            let inv = 1.0 / sum;
            let oi = &mut out[i * hd..(i + 1) * hd];
            oi.fill(0.0);
            for j in first..=pos {
                let w = scores[j] * inv;
                let vj = &v[j * kv_row + kvh * hd..j * kv_row + (kvh + 1) * hd];
                for (o, &x) in oi.iter_mut().zip(vj) {
                    *o += w * x;
                }
            }
        }
    });

    let mut out = vec![0f32; t * q_row];
    for (h, buf) in per_head.iter().enumerate() {
        for i in 0..t {
            out[i * q_row + h * hd..i * q_row + (h + 1) * hd]
                .copy_from_slice(&buf[i * hd..(i + 1) * hd]);
        }
    }
    out
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        for l in 0..8 {
            acc[l] += a[c * 8 + l] * b[c * 8 + l];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for i in chunks * 8..a.len() {
        s += a[i] * b[i];
    }
    s
}
