//! The local self-attention of Gemma 4's audio conformer (transformers `Gemma4AudioAttention`,
//! Transformer-XL-style relative positions).
//!
//! Queries are scaled by `head_dim^-½ / ln 2 · softplus(per_dim_scale)`, keys by
//! `ln(1 + e) / ln 2`. Position `t` attends to positions `s` with `0 ≤ t − s < context_left − 1`
//! (and `0 < s − t < context_right` ahead); the logit is `q_t · k_s + q_t · r_(t−s)`, where
//! `r_d` is `relative_k_proj` of a sinusoidal embedding (`[sin, cos]` of 10 000-based
//! timescales) of position `context_size / 2 − (context_left − 1) + d`, zero outside the
//! table; logits are soft-capped (`cap · tanh(x / cap)`), masked ones set to
//! `attention_invalid_logits_value`. transformers computes this over blocks of `chunk`
//! queries with `_rel_shift`; the result is the same per position, which is how it is
//! computed here.

use super::clipped::ClippedLinear;
use crate::error::LoadError;
use crate::loader::TensorStore;
use crate::nn::Linear;

/// Shape and window of the attention.
#[derive(Clone, Debug, PartialEq)]
pub struct LocalAttentionConfig {
    pub heads: usize,
    pub head_dim: usize,
    /// Queries per block (`attention_chunk_size`).
    pub chunk: usize,
    /// `attention_context_left` (the position itself included, plus one).
    pub context_left: usize,
    /// `attention_context_right`.
    pub context_right: usize,
    /// Soft cap of the logits (`attention_logit_cap`).
    pub logit_cap: f32,
    /// Logit of masked positions (`attention_invalid_logits_value`).
    pub invalid_logit: f32,
}

impl LocalAttentionConfig {
    /// Positions a block of queries sees: `chunk + context_left − 1 + context_right`.
    fn context_size(&self) -> usize {
        self.chunk + self.context_left - 1 + self.context_right
    }

    /// Whether a query attends to a key `d = t − s` positions back (negative: ahead).
    fn allowed(&self, d: isize) -> bool {
        let left = self.context_left as isize - 1;
        (0..left).contains(&d) || (d < 0 && -d < self.context_right as isize)
    }
}

/// One layer's attention weights.
pub struct LocalAttention {
    cfg: LocalAttentionConfig,
    q: ClippedLinear,
    k: ClippedLinear,
    v: ClippedLinear,
    post: ClippedLinear,
    /// `relative_k_proj` of the position table: `[positions, heads · head_dim]`, row `r` for
    /// relative position `context_size / 2 − r`.
    rel_k: Vec<f32>,
    /// Per head dimension: `head_dim^-½ / ln 2 · softplus(per_dim_scale)`.
    q_scale: Vec<f32>,
}

/// `[n, dim]`: `[sin(p · τ_i), cos(p · τ_i)]` for positions `p = n − 1, …, 0`, `dim / 2`
/// timescales from 1 to 10 000 (transformers `Gemma4AudioRelPositionalEncoding`).
fn position_table(n: usize, dim: usize) -> Vec<f32> {
    let half = dim / 2;
    let step = (10_000f32).ln() / (half.max(2) - 1) as f32;
    let inv: Vec<f32> = (0..half).map(|i| (i as f32 * -step).exp()).collect();
    let mut out = Vec::with_capacity(n * dim);
    for r in 0..n {
        let p = (n - 1 - r) as f32;
        out.extend(inv.iter().map(|t| (p * t).sin()));
        out.extend(inv.iter().map(|t| (p * t).cos()));
    }
    out
}

impl LocalAttention {
    /// Loads `{stem}.q_proj` … `{stem}.post`, `relative_k_proj` and `per_dim_scale` for a
    /// model of width `hidden`.
    pub fn load(
        store: &dyn TensorStore,
        stem: &str,
        cfg: &LocalAttentionConfig,
        hidden: usize,
    ) -> Result<Self, LoadError> {
        let inner = cfg.heads * cfg.head_dim;
        let lin = |part: &str, o, n| ClippedLinear::load(store, &format!("{stem}.{part}"), o, n);
        let rel = Linear::load(
            store,
            &format!("{stem}.relative_k_proj.weight"),
            inner,
            hidden,
        )?;
        let positions = cfg.context_size() / 2 + 1;
        let rel_k = rel.forward(&position_table(positions, hidden), positions);
        let per_dim = store
            .require_shape(&format!("{stem}.per_dim_scale"), &[cfg.head_dim])?
            .to_f32()?;
        let base = (cfg.head_dim as f32).powf(-0.5) / std::f32::consts::LN_2;
        let q_scale = per_dim
            .iter()
            .map(|&w| {
                let softplus = if w > 20.0 { w } else { w.exp().ln_1p() };
                base * softplus
            })
            .collect();
        Ok(LocalAttention {
            cfg: cfg.clone(),
            q: lin("q_proj", inner, hidden)?,
            k: lin("k_proj", inner, hidden)?,
            v: lin("v_proj", inner, hidden)?,
            post: lin("post", hidden, inner)?,
            rel_k,
            q_scale,
        })
    }

    /// `x` `[n, hidden]` → `[n, hidden]`, every position valid.
    pub fn forward(&self, x: &[f32], n: usize) -> Vec<f32> {
        let c = &self.cfg;
        let (hd, inner) = (c.head_dim, c.heads * c.head_dim);
        let mut q = self.q.forward(x, n);
        let mut k = self.k.forward(x, n);
        let v = self.v.forward(x, n);
        for row in q.chunks_exact_mut(hd) {
            row.iter_mut().zip(&self.q_scale).for_each(|(v, s)| *v *= s);
        }
        let k_scale = (1.0 + std::f32::consts::E).ln() / std::f32::consts::LN_2;
        k.iter_mut().for_each(|v| *v *= k_scale);
        let positions = self.rel_k.len() / inner;
        let past = c.context_left as isize - 1;
        let ahead = c.context_right as isize;
        let mut out = vec![0f32; n * inner];
        let mut logits = Vec::new();
        for t in 0..n {
            let lo = (t as isize - past + 1).max(0) as usize;
            let hi = ((t as isize + ahead).max(0) as usize).min(n);
            for h in 0..c.heads {
                let qt = &q[t * inner + h * hd..t * inner + (h + 1) * hd];
                logits.clear();
                for s in lo..hi.max(t + 1) {
                    let d = t as isize - s as isize;
                    if !c.allowed(d) {
                        logits.push(c.invalid_logit);
                        continue;
                    }
                    let ks = &k[s * inner + h * hd..s * inner + (h + 1) * hd];
                    let mut l: f32 = qt.iter().zip(ks).map(|(a, b)| a * b).sum();
                    let r = past - d;
                    if (0..positions as isize).contains(&r) {
                        let rk = &self.rel_k[r as usize * inner + h * hd..][..hd];
                        l += qt.iter().zip(rk).map(|(a, b)| a * b).sum::<f32>();
                    }
                    logits.push(c.logit_cap * (l / c.logit_cap).tanh());
                }
                let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0f32;
                for l in logits.iter_mut() {
                    *l = (*l - max).exp();
                    sum += *l;
                }
                let o = &mut out[t * inner + h * hd..t * inner + (h + 1) * hd];
                for (i, s) in (lo..hi.max(t + 1)).enumerate() {
                    let w = logits[i] / sum;
                    let vs = &v[s * inner + h * hd..s * inner + (h + 1) * hd];
                    o.iter_mut().zip(vs).for_each(|(o, v)| *o += w * v);
                }
            }
        }
        self.post.forward(&out, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_and_positions_follow_the_config() {
        let c = LocalAttentionConfig {
            heads: 1,
            head_dim: 2,
            chunk: 12,
            context_left: 13,
            context_right: 0,
            logit_cap: 50.0,
            invalid_logit: -1e9,
        };
        assert_eq!(c.context_size(), 24);
        assert!(c.allowed(0) && c.allowed(11));
        assert!(!c.allowed(12) && !c.allowed(-1));
        // Row 0 is the farthest position (12), the last row position 0: sin 0, cos 1.
        let t = position_table(13, 4);
        assert_eq!(&t[12 * 4..], &[0.0, 0.0, 1.0, 1.0]);
        assert!((t[0] - 12f32.sin()).abs() < 1e-6);
    }
}
