//! One description of a bidirectional post-norm encoder (BERT, XLM-RoBERTa, NomicBERT), executed
//! by every device.
//!
//! The architecture ([`crate::arch::bert::Bert`]) embeds and normalizes the tokens on the host,
//! then describes its blocks once as an [`EncoderPlan`]; [`run`] offers the plan whole to the
//! installed backend ([`crate::backend::Backend::run_encoder`]: the hidden state stays on the
//! device for every layer) and runs it on the CPU ([`run_cpu`]) when the backend declines it.
//!
//! A batch is several sequences concatenated without padding (`[Σ lens, dim]`, sequence `i`'s
//! rows after those of `0 .. i`): every projection runs once over all of them and attention runs
//! per sequence, so padded and unpadded batches give the same rows by construction.

use crate::backend;
use crate::error::Result;
use crate::nn::encoder_act::EncoderAct;
use crate::nn::encoder_attention::{encoder_attention, EncoderHeads};
use crate::nn::encoder_linear::EncoderLinear;
use crate::nn::{encoder_math, LayerNorm, Rope};

/// One post-norm block: `x = attn_norm(x + o(attention(q(x), k(x), v(x))))`, then
/// `x = ffn_norm(x + down(act(up(x))))`, or with a gate `down(act(gate(x)) · up(x))`.
/// Every projection carries its own bias (or none).
pub struct EncoderLayer<'a> {
    /// Query, key, value projections, `[dim, dim]` each.
    pub q: &'a EncoderLinear,
    pub k: &'a EncoderLinear,
    pub v: &'a EncoderLinear,
    /// Attention output projection `[dim, dim]`.
    pub o: &'a EncoderLinear,
    /// LayerNorm after the attention's residual add.
    pub attn_norm: &'a LayerNorm,
    /// The gate of a gated MLP `[ffn, dim]` (NomicBERT's SwiGLU); `None`: `act(up(x))`.
    pub gate: Option<&'a EncoderLinear>,
    /// `[ffn, dim]`.
    pub up: &'a EncoderLinear,
    /// `[dim, ffn]`.
    pub down: &'a EncoderLinear,
    /// LayerNorm after the MLP's residual add.
    pub ffn_norm: &'a LayerNorm,
}

/// A whole encoder after its embeddings: the blocks, their attention heads and activation.
pub struct EncoderPlan<'a> {
    pub layers: Vec<EncoderLayer<'a>>,
    /// Heads of every layer's attention (same for all layers; `window` is `None` here).
    pub heads: EncoderHeads,
    /// The MLP's activation.
    pub act: EncoderAct,
    /// Rotary positions of queries and keys (NomicBERT): the rotation of a sequence of `n`
    /// tokens, positions from 0 (dynamic NTK scaling gives long sequences their own base).
    /// `None`: positions are part of the embedding.
    pub rope_of: Option<&'a dyn Fn(usize) -> &'a Rope>,
    /// Width of the hidden state.
    pub dim: usize,
}

/// The last hidden states of the sequences of lengths `lens` whose embedded, normalized rows
/// are `x` (`[Σ lens, dim]`): on the installed backend when it runs the whole plan, else
/// whole on the CPU (op by op, each product's activations crossing the bus and attention on
/// the host, all-MiniLM-L6-v2 ran 6–17× slower on an H200 than on its host's cores:
/// docs/embeddings.md). Same layout out.
pub fn run(plan: &EncoderPlan, x: Vec<f32>, lens: &[usize]) -> Result<Vec<f32>> {
    if let Some(b) = backend::active() {
        let mut out = vec![0f32; x.len()];
        if b.run_encoder(plan, &x, lens, &mut out) {
            return Ok(out);
        }
        let _host = backend::cpu_only_here();
        return Ok(run_cpu(plan, x, lens));
    }
    Ok(run_cpu(plan, x, lens))
}

/// [`run`] on the CPU (single projections still go to an installed backend that wants them,
/// unless the caller holds [`backend::cpu_only_here`]).
pub fn run_cpu(plan: &EncoderPlan, mut x: Vec<f32>, lens: &[usize]) -> Vec<f32> {
    let total: usize = lens.iter().sum();
    for b in &plan.layers {
        let mut qkv = EncoderLinear::forward_shared(&[b.q, b.k, b.v], &x, total);
        if let Some(rope_of) = plan.rope_of {
            for m in &mut qkv[..2] {
                rotate_each_sequence(rope_of, m, lens, &plan.heads);
            }
        }
        let mixed = encoder_attention(&qkv[0], &qkv[1], &qkv[2], lens, &plan.heads);
        residual_norm(&mut x, &b.o.forward(&mixed, total), b.attn_norm);
        let h = match b.gate {
            None => {
                let act = plan.act;
                b.up.forward_then(&x, total, &|h| act.apply_slice(h))
            }
            Some(gate) => {
                let gu = EncoderLinear::forward_shared(&[gate, b.up], &x, total);
                let [mut g, u]: [Vec<f32>; 2] = gu.try_into().expect("two projections");
                plan.act.apply_all(&mut g, Some(&u[..]));
                g
            }
        };
        residual_norm(&mut x, &b.down.forward(&h, total), b.ffn_norm);
    }
    x
}

/// Rotates `m` (`[Σ lens, n_heads · head_dim]`, sequences concatenated) with each sequence's
/// positions starting at 0, a sequence of `n` tokens by `rope_of(n)`.
pub(crate) fn rotate_each_sequence<'r>(
    rope_of: &dyn Fn(usize) -> &'r Rope,
    m: &mut [f32],
    lens: &[usize],
    h: &EncoderHeads,
) {
    let width = h.n_heads * h.head_dim;
    let mut first = 0;
    for &n in lens {
        rope_of(n).apply(
            &mut m[first * width..(first + n) * width],
            n,
            h.n_heads,
            h.head_dim,
            0,
        );
        first += n;
    }
}

/// `x ← norm(x + y)` (post-norm residual), parts of rows in parallel, each row with
/// [`layer_norm_lanes`].
fn residual_norm(x: &mut [f32], y: &[f32], norm: &LayerNorm) {
    const ROWS_PER_PART: usize = 32;
    let dim = norm.weight.len().max(1);
    let part = ROWS_PER_PART * dim;
    let mut parts: Vec<&mut [f32]> = x.chunks_mut(part).collect();
    oxinfer_kernels::pool::for_each_mut(&mut parts, |i, xs| {
        xs.iter_mut().zip(&y[i * part..]).for_each(|(a, b)| *a += b);
        for row in xs.chunks_exact_mut(dim) {
            layer_norm_lanes(row, &norm.weight, &norm.bias, norm.eps);
        }
    });
}

/// LayerNorm of one row in place, `(v − mean) / √(var + eps) · w + b`, with the mean and the
/// (two-pass) variance summed in f32 over 8 lanes ([`encoder_math::lanes_fold`]), as torch's
/// f32 LayerNorm sums in f32, so the loops vectorize (the f64 sums of
/// `nn::layer_norm::layer_norm_row` run one value at a time: 4 % of an encoder's time).
fn layer_norm_lanes(row: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let n = row.len() as f32;
    let mean = encoder_math::lanes_fold(row, 0.0, |a, v| a + v) / n;
    row.iter_mut().for_each(|v| *v -= mean);
    let var = encoder_math::lanes_sum_of(row, |v| v * v) / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((v, &g), &bias) in row.iter_mut().zip(w).zip(b) {
        *v = *v * inv * g + bias;
    }
}
