//! Bidirectional multi-head attention of the encoders (BERT-style text encoders, vision
//! towers) over a batch of sequences concatenated without padding: the shared non-causal
//! attention ([`attention_full_seqs`]) with the encoders' window convention.

use crate::nn::full_attention::attention_full_seqs;
use oxinfer_kernels::attention::AttnShape;
/// The heads of one attention layer.
#[derive(Clone, Copy, Debug)]
pub struct EncoderHeads {
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (`n_heads` a multiple of them: grouped-query attention; usually
    /// `n_heads`).
    pub n_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Score scale (usually `1 / √head_dim`).
    pub scale: f32,
    /// Local attention: a query sees only the keys at distance `≤ window` from it (ModernBERT's
    /// local layers, `local_attention / 2`); `None`: every key of its sequence.
    pub window: Option<usize>,
}

/// Softmax-attention of every sequence with itself: `q` is `[Σ lens, n_heads · head_dim]`, `k`
/// and `v` `[Σ lens, n_kv_heads · head_dim]` (sequence `i`'s rows after those of `0 .. i`);
/// returns the mixed values in `q`'s layout.
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
    let _p = oxinfer_kernels::profile::scope(
        || "encoder attention".to_string(),
        0,
        lens.iter()
            .map(|&n| 4 * (n * n * h.n_heads * h.head_dim) as u64)
            .sum(),
    );
    let shape = AttnShape {
        n_heads: h.n_heads,
        n_kv_heads: h.n_kv_heads,
        head_dim: h.head_dim,
        scale: h.scale,
        // Keys at distance ≤ window: the shared attention's window counts `< window`.
        window: h.window.map(|w| w + 1),
        softcap: None,
    };
    let seqs: Vec<(usize, usize)> = lens.iter().map(|&n| (n, n)).collect();
    attention_full_seqs(q, k, v, &seqs, &shape)
}
