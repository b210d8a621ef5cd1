//! Bidirectional multi-head attention of the encoders over a batch of sequences concatenated
//! without padding: every (sequence, head) pair is one pool task, and both of its products
//! (`Q·Kᵀ` and `P·V`) run on the packed float GEMM
//! ([`oxinfer_kernels::packed::float`]) with the keys and the values packed per head.

use oxinfer_kernels::dispatch::detected_isa;
use oxinfer_kernels::packed::float::{matmul_float_packed_isa, PackedFloatMatrix};

/// The heads of one attention layer.
#[derive(Clone, Copy, Debug)]
pub struct EncoderHeads {
    /// Query (and key/value) heads.
    pub n_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Score scale (usually `1 / √head_dim`).
    pub scale: f32,
    /// Local attention: a query sees only the keys at distance `≤ window` from it (ModernBERT's
    /// local layers, `local_attention / 2`); `None`: every key of its sequence.
    pub window: Option<usize>,
}

/// Softmax-attention of every sequence with itself: `q`, `k`, `v` are `[Σ lens, n_heads *
/// head_dim]` (sequence `i`'s rows after those of `0 .. i`); returns the mixed values in the
/// same layout.
///
/// # Panics
/// If `q`, `k` or `v` do not hold `Σ lens` rows.
pub fn encoder_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    lens: &[usize],
    h: &EncoderHeads,
) -> Vec<f32> {
    let (d, width) = (h.head_dim, h.n_heads * h.head_dim);
    let total: usize = lens.iter().sum();
    assert!(
        q.len() == total * width && k.len() == q.len() && v.len() == q.len(),
        "q, k, v must be [{total}, {width}]"
    );
    let _p = oxinfer_kernels::profile::scope(
        || "encoder attention".to_string(),
        0,
        lens.iter().map(|&n| 4 * (n * n * width) as u64).sum(),
    );
    let mut starts = Vec::with_capacity(lens.len());
    let mut row = 0;
    for &n in lens {
        starts.push(row);
        row += n;
    }
    // One slot per (sequence, head): its `[n, head_dim]` output.
    let mut parts: Vec<Vec<f32>> = vec![Vec::new(); lens.len() * h.n_heads];
    oxinfer_kernels::pool::for_each_mut(&mut parts, |task, out| {
        let (s, head) = (task / h.n_heads, task % h.n_heads);
        let (r0, n) = (starts[s], lens[s]);
        let col = head * d;
        let at = |m: &[f32], r: usize, e: usize| m[(r0 + r) * width + col + e];
        *out = head_attention(
            n,
            d,
            h.scale,
            h.window,
            |r, e| at(q, r, e),
            |r, e| at(k, r, e),
            |r, e| at(v, r, e),
        );
    });
    let mut mixed = vec![0f32; total * width];
    for (task, out) in parts.iter().enumerate() {
        let (s, head) = (task / h.n_heads, task % h.n_heads);
        for (r, src) in out.chunks_exact(d).enumerate() {
            let dst = (starts[s] + r) * width + head * d;
            mixed[dst..dst + d].copy_from_slice(src);
        }
    }
    mixed
}

/// One head of one sequence of `n` tokens: `softmax(scale · Q Kᵀ) V`, `[n, d]`, with element
/// `(r, e)` of Q, K, V given by the closures; with a `window`, the scores of keys farther than it
/// from the query are left out of the softmax.
fn head_attention(
    n: usize,
    d: usize,
    scale: f32,
    window: Option<usize>,
    q: impl Fn(usize, usize) -> f32,
    k: impl Fn(usize, usize) -> f32,
    v: impl Fn(usize, usize) -> f32,
) -> Vec<f32> {
    let isa = detected_isa();
    let qh: Vec<f32> = (0..n * d).map(|i| q(i / d, i % d)).collect();
    let keys = PackedFloatMatrix::from_fn(n, d, k);
    let mut scores = vec![0f32; n * n];
    matmul_float_packed_isa(&keys, &qh, n, &mut scores, isa);
    for (r, row) in scores.chunks_exact_mut(n).enumerate() {
        if let Some(w) = window {
            let (lo, hi) = (r.saturating_sub(w), (r + w + 1).min(n));
            row[..lo].fill(f32::NEG_INFINITY);
            row[hi..].fill(f32::NEG_INFINITY);
        }
        let max = row.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
        let mut sum = 0f32;
        for s in row.iter_mut() {
            *s = ((*s - max) * scale).exp();
            sum += *s;
        }
        let inv = 1.0 / sum;
        row.iter_mut().for_each(|s| *s *= inv);
    }
    // Values transposed: row e of the packed matrix is feature e over the n tokens.
    let values = PackedFloatMatrix::from_fn(d, n, |e, r| v(r, e));
    let mut out = vec![0f32; n * d];
    matmul_float_packed_isa(&values, &scores, n, &mut out, isa);
    out
}
