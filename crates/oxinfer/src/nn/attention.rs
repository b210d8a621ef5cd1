//! Causal multi-head attention over a KV cache (GQA, optional sliding window and logit
//! soft-capping). Offered to the installed [`crate::backend`] first; on the CPU the default
//! kernel set runs the fused, tiled kernel ([`oxinfer_kernels::attention`]: query blocks × key
//! tiles with an online softmax); `OXINFER_KERNELS=scalar` runs the plain reference here: one
//! softmax per query row, heads in parallel.

pub use crate::backend::cpu_ref::attention::attention_cpu;
use crate::backend::{self, AttentionGeom};
use oxinfer_kernels::attention::AttnShape;

/// `q` is `[t, n_heads * head_dim]` for positions `pos0 .. pos0 + t`; `k`, `v` are
/// `[pos0 + t, n_kv_heads * head_dim]` (every cached position, the new ones included).
/// Returns `[t, n_heads * head_dim]`.
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    t: usize,
    pos0: usize,
    p: &AttnShape,
) -> Vec<f32> {
    let g = AttentionGeom { t, pos0, shape: *p };
    if let Some(b) = backend::active() {
        let mut out = vec![0f32; t * p.n_heads * p.head_dim];
        if b.attention(q, k, v, &g, &mut out) {
            return out;
        }
    }
    attention_cpu(q, k, v, &g)
}

/// [`attention`] over one layer's cached keys and values as [`crate::nn::KvCache`] stores them:
/// `k`/`v` rows in position order (`ring = 0`) or a sliding layer's ring of `ring` rows
/// (position `p` in row `p % ring`). The default CPU kernels read the ring in place; the
/// scalar reference and an installed backend get the visible positions copied out in order.
#[allow(clippy::too_many_arguments)]
pub fn attention_cached(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    ring: usize,
    t: usize,
    pos0: usize,
    p: &AttnShape,
) -> Vec<f32> {
    if ring == 0 || pos0 + t <= ring {
        return attention(q, k, v, t, pos0, p);
    }
    if backend::active().is_none()
        && oxinfer_kernels::kernel_set() != oxinfer_kernels::KernelSet::Scalar
    {
        let shape = *p;
        let kv_row = p.n_kv_heads * p.head_dim;
        let _prof = oxinfer_kernels::profile::scope(
            || "attention".to_string(),
            (2 * ring * kv_row * 4) as u64,
            (4 * t * ring * p.n_heads * p.head_dim) as u64,
        );
        let mut out = vec![0f32; t * p.n_heads * p.head_dim];
        oxinfer_kernels::attention::attention_ring(q, k, v, t, pos0, ring, &shape, &mut out);
        return out;
    }
    // The oldest position the first query sees, then every position up to the last new one,
    // copied out in order; the mask only depends on position differences.
    let first = match p.window {
        Some(w) => (pos0 + 1).saturating_sub(w),
        None => 0,
    };
    assert!(
        pos0 + t - first <= ring,
        "a ring of {ring} rows cannot hold positions {first}..{}",
        pos0 + t
    );
    let kv_row = p.n_kv_heads * p.head_dim;
    let n = pos0 + t - first;
    let (mut lk, mut lv) = (
        Vec::with_capacity(n * kv_row),
        Vec::with_capacity(n * kv_row),
    );
    for pos in first..pos0 + t {
        let r = (pos % ring) * kv_row;
        lk.extend_from_slice(&k[r..r + kv_row]);
        lv.extend_from_slice(&v[r..r + kv_row]);
    }
    attention(q, &lk, &lv, t, pos0 - first, p)
}

/// Bidirectional (encoder) attention, the non-causal mode: each of the `t` queries of one
/// sequence sees all `t` keys (no mask; `p.window` and `p.softcap` apply as in [`attention`],
/// the window on both sides). `q`, `k`, `v` are `[t, heads * head_dim]`; returns
/// `[t, n_heads * head_dim]`. Runs on the CPU, heads in parallel: the backends' attention op
/// is causal only.
pub fn attention_bidirectional(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    t: usize,
    p: &AttnShape,
) -> Vec<f32> {
    let hd = p.head_dim;
    let (q_row, kv_row) = (p.n_heads * hd, p.n_kv_heads * hd);
    assert!(q.len() >= t * q_row && k.len() >= t * kv_row && v.len() >= t * kv_row);
    let group = p.n_heads / p.n_kv_heads.max(1);
    let mut per_head: Vec<Vec<f32>> = vec![Vec::new(); p.n_heads];
    oxinfer_kernels::pool::for_each_mut(&mut per_head, |h, out| {
        out.resize(t * hd, 0.0);
        let kvh = h / group;
        let mut scores = vec![0f32; t];
        for i in 0..t {
            let (first, last) = match p.window {
                Some(w) => ((i + 1).saturating_sub(w), (i + w).min(t)),
                None => (0, t),
            };
            let qi = &q[i * q_row + h * hd..][..hd];
            let mut max = f32::NEG_INFINITY;
            for j in first..last {
                let kj = &k[j * kv_row + kvh * hd..][..hd];
                let mut s = qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>() * p.scale;
                if let Some(cap) = p.softcap {
                    s = cap * (s / cap).tanh();
                }
                scores[j] = s;
                max = max.max(s);
            }
            let mut sum = 0f32;
            for s in &mut scores[first..last] {
                *s = (*s - max).exp();
                sum += *s;
            }
            let oi = &mut out[i * hd..(i + 1) * hd];
            oi.fill(0.0);
            for j in first..last {
                let w = scores[j] / sum;
                let vj = &v[j * kv_row + kvh * hd..][..hd];
                oi.iter_mut().zip(vj).for_each(|(o, &x)| *o += w * x);
            }
        }
    });
    let mut out = vec![0f32; t * q_row];
    for (h, buf) in per_head.iter().enumerate() {
        for (i, row) in buf.chunks_exact(hd).enumerate() {
            out[i * q_row + h * hd..][..hd].copy_from_slice(row);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One query attending to one key returns that key's value.
    #[test]
    fn single_key_returns_value() {
        let p = AttnShape {
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: 2,
            scale: 1.0,
            window: None,
            softcap: None,
        };
        let out = attention(&[1.0, 0.0, 0.0, 1.0], &[0.5, 0.5], &[3.0, -2.0], 1, 0, &p);
        assert_eq!(out, vec![3.0, -2.0, 3.0, -2.0]);
    }

    /// Causal mask: the first query ignores the second key; the window hides old keys.
    #[test]
    fn causal_and_window() {
        let mut p = AttnShape {
            n_heads: 1,
            n_kv_heads: 1,
            head_dim: 1,
            scale: 1.0,
            window: None,
            softcap: None,
        };
        let q = [0.0, 0.0];
        let k = [0.0, 0.0];
        let v = [2.0, 4.0];
        assert_eq!(attention(&q, &k, &v, 2, 0, &p), vec![2.0, 3.0]);
        p.window = Some(1);
        assert_eq!(attention(&q, &k, &v, 2, 0, &p), vec![2.0, 4.0]);
    }

    /// Without the causal mask the first query averages both values too.
    #[test]
    fn bidirectional_sees_later_keys() {
        let p = AttnShape {
            n_heads: 1,
            n_kv_heads: 1,
            head_dim: 1,
            scale: 1.0,
            window: None,
            softcap: None,
        };
        let out = attention_bidirectional(&[0.0, 0.0], &[0.0, 0.0], &[2.0, 4.0], 2, &p);
        assert_eq!(out, vec![3.0, 3.0]);
    }
}
