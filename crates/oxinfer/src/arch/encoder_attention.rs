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
pub fn encoder_attention<'a>(
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
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
        let row = |m: &'a [f32], r: usize| &m[(r0 + r) * width + col..][..d];
        *out = head_attention(
            n,
            d,
            h.scale,
            h.window,
            |r| row(q, r),
            |r| row(k, r),
            |r| row(v, r),
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

/// Queries per block of scores: a block's `[QUERY_BLOCK, n]` scores are one buffer reused for
/// every block of a head (a whole `[n, n]` matrix was a fresh allocation per head: 39 MB for
/// a 3,136-patch image, whose page faults took a sixth of the vision tower's CPU time).
const QUERY_BLOCK: usize = 128;

/// One head of one sequence of `n` tokens: `softmax(scale · Q Kᵀ) V`, `[n, d]`, with row `r`
/// (`d` floats) of Q, K, V given by the closures; with a `window`, the scores of keys farther
/// than it from the query are left out of the softmax. Queries run in blocks of
/// [`QUERY_BLOCK`].
fn head_attention<'a>(
    n: usize,
    d: usize,
    scale: f32,
    window: Option<usize>,
    q: impl Fn(usize) -> &'a [f32],
    k: impl Fn(usize) -> &'a [f32],
    v: impl Fn(usize) -> &'a [f32],
) -> Vec<f32> {
    let isa = detected_isa();
    let keys = PackedFloatMatrix::from_rows(n, d, k);
    // Values transposed: row e of the packed matrix is feature e over the n tokens.
    let values = PackedFloatMatrix::from_columns(d, n, v);
    let mut out = vec![0f32; n * d];
    let (mut qh, mut scores) = (Vec::new(), Vec::new());
    for r0 in (0..n).step_by(QUERY_BLOCK) {
        let rows = QUERY_BLOCK.min(n - r0);
        qh.clear();
        (r0..r0 + rows).for_each(|r| qh.extend_from_slice(q(r)));
        scores.resize(rows * n, 0.0);
        matmul_float_packed_isa(&keys, &qh, rows, &mut scores, isa);
        for (i, row) in scores.chunks_exact_mut(n).enumerate() {
            let r = r0 + i;
            let (lo, hi) = match window {
                Some(w) => (r.saturating_sub(w), (r + w + 1).min(n)),
                None => (0, n),
            };
            softmax_scaled(row, scale, lo, hi);
        }
        matmul_float_packed_isa(
            &values,
            &scores,
            rows,
            &mut out[r0 * d..(r0 + rows) * d],
            isa,
        );
    }
    out
}

/// The softmax of `row`'s keys `lo .. hi` scaled by `scale` (the shared SIMD softmax,
/// [`oxinfer_kernels::softmax`]), the others 0.
fn softmax_scaled(row: &mut [f32], scale: f32, lo: usize, hi: usize) {
    oxinfer_kernels::softmax::softmax_scaled(&mut row[lo..hi], scale);
    row[..lo].fill(0.0);
    row[hi..].fill(0.0);
}
