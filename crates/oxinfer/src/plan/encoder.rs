//! One description of a bidirectional encoder (post-norm: BERT, XLM-RoBERTa, NomicBERT;
//! pre-norm: ModernBERT), executed by every device.
//!
//! The architecture ([`crate::arch::bert::Bert`], [`crate::arch::modernbert::ModernBert`])
//! embeds and normalizes the tokens on the host, then describes its blocks once as an
//! [`EncoderPlan`]; [`run`] offers the plan whole to the
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

/// One block. Post-norm ([`NormOrder::Post`]): `x = attn_norm(x + o(attention(q(x), k(x),
/// v(x))))`, then `x = ffn_norm(x + mlp(x))`. Pre-norm ([`NormOrder::Pre`]): `x += o(attention(
/// q(h), k(h), v(h)))` with `h = attn_norm(x)`, then `x += mlp(ffn_norm(x))`. The MLP is
/// `down(act(up(·)))`, or with a gate `down(act(gate(·)) · up(·))`. Every projection carries its
/// own bias (or none).
pub struct EncoderLayer<'a> {
    /// Query, key, value projections, `[dim, dim]` each.
    pub q: &'a EncoderLinear,
    pub k: &'a EncoderLinear,
    pub v: &'a EncoderLinear,
    /// Attention output projection `[dim, dim]`.
    pub o: &'a EncoderLinear,
    /// Post-norm: the LayerNorm after the attention's residual add (required). Pre-norm: the
    /// LayerNorm of the attention's input (`None`: none, ModernBERT's first block).
    pub attn_norm: Option<&'a LayerNorm>,
    /// Local attention: a query sees only the keys of its sequence at distance `≤ window`;
    /// `None`: all of them.
    pub window: Option<usize>,
    /// Rotary positions of this layer's queries and keys (NomicBERT, ModernBERT): the rotation
    /// of a sequence of `n` tokens, positions from 0 (dynamic NTK scaling gives long sequences
    /// their own base). `None`: positions are part of the embedding.
    pub rope_of: Option<RopeOf<'a>>,
    /// The gate of a gated MLP `[ffn, dim]` (NomicBERT's SwiGLU); `None`: `act(up(x))`.
    pub gate: Option<&'a EncoderLinear>,
    /// `[ffn, dim]`.
    pub up: &'a EncoderLinear,
    /// `[dim, ffn]`.
    pub down: &'a EncoderLinear,
    /// LayerNorm after the MLP's residual add (post-norm), or of the MLP's input (pre-norm).
    pub ffn_norm: &'a LayerNorm,
}

/// The rotation of a sequence of `n` tokens (an argument of [`EncoderLayer::rope_of`]).
pub type RopeOf<'a> = &'a dyn Fn(usize) -> &'a Rope;

/// Where a block's LayerNorms sit.
#[derive(Clone, Copy)]
pub enum NormOrder<'a> {
    /// After each residual add (BERT); the plan's output is the last block's.
    Post,
    /// On each sublayer's input, the residual stream itself never normalized until
    /// `final_norm` after the last block (ModernBERT).
    Pre { final_norm: &'a LayerNorm },
}

/// A whole encoder after its embeddings: the blocks, their attention heads and activation.
pub struct EncoderPlan<'a> {
    pub layers: Vec<EncoderLayer<'a>>,
    /// Where the LayerNorms sit.
    pub order: NormOrder<'a>,
    /// Heads of every layer's attention (the same for all layers; their `window` is ignored:
    /// each layer has its own, [`EncoderLayer::window`]).
    pub heads: EncoderHeads,
    /// The MLP's activation.
    pub act: EncoderAct,
    /// Width of the hidden state.
    pub dim: usize,
}

impl EncoderPlan<'_> {
    /// Whether a block lacks the attention norm its order needs: any post-norm block, or a
    /// pre-norm block past the first (only the first may have none).
    pub fn lacks_attention_norm(&self) -> bool {
        let skip = match self.order {
            NormOrder::Post => 0,
            NormOrder::Pre { .. } => 1,
        };
        self.layers.iter().skip(skip).any(|l| l.attn_norm.is_none())
    }

    /// The heads of layer `l`'s attention (with its window).
    pub fn heads_of(&self, l: &EncoderLayer) -> EncoderHeads {
        EncoderHeads {
            window: l.window,
            ..self.heads
        }
    }
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
///
/// # Panics
/// If a post-norm layer has no `attn_norm`.
pub fn run_cpu(plan: &EncoderPlan, mut x: Vec<f32>, lens: &[usize]) -> Vec<f32> {
    let total: usize = lens.iter().sum();
    for b in &plan.layers {
        let heads = plan.heads_of(b);
        let input = match plan.order {
            NormOrder::Post => None,
            NormOrder::Pre { .. } => b.attn_norm.map(|n| normed(&x, n)),
        };
        let h = input.as_deref().unwrap_or(&x);
        let mut qkv = EncoderLinear::forward_shared(&[b.q, b.k, b.v], h, total);
        if let Some(rope_of) = b.rope_of {
            for m in &mut qkv[..2] {
                rotate_each_sequence(rope_of, m, lens, &heads);
            }
        }
        let mixed = encoder_attention(&qkv[0], &qkv[1], &qkv[2], lens, &heads);
        let y = b.o.forward(&mixed, total);
        match plan.order {
            NormOrder::Post => {
                let norm = b
                    .attn_norm
                    .expect("a post-norm block has an attention norm");
                residual_norm(&mut x, &y, norm);
            }
            NormOrder::Pre { .. } => add(&mut x, &y),
        }
        let input = match plan.order {
            NormOrder::Post => None,
            NormOrder::Pre { .. } => Some(normed(&x, b.ffn_norm)),
        };
        let h = input.as_deref().unwrap_or(&x);
        let act = match b.gate {
            None => {
                let act = plan.act;
                b.up.forward_then(h, total, &|v| act.apply_slice(v))
            }
            Some(gate) => {
                let gu = EncoderLinear::forward_shared(&[gate, b.up], h, total);
                let [mut g, u]: [Vec<f32>; 2] = gu.try_into().expect("two projections");
                plan.act.apply_all(&mut g, Some(&u[..]));
                g
            }
        };
        let y = b.down.forward(&act, total);
        match plan.order {
            NormOrder::Post => residual_norm(&mut x, &y, b.ffn_norm),
            NormOrder::Pre { .. } => add(&mut x, &y),
        }
    }
    if let NormOrder::Pre { final_norm } = plan.order {
        norm_rows(&mut x, final_norm);
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

/// Rows per parallel part of the residual and norm loops.
const ROWS_PER_PART: usize = 32;

/// `x ← norm(x + y)` (post-norm residual), parts of rows in parallel, each row with
/// [`layer_norm_lanes`].
fn residual_norm(x: &mut [f32], y: &[f32], norm: &LayerNorm) {
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

/// `x ← x + y`, parts in parallel.
fn add(x: &mut [f32], y: &[f32]) {
    const PART: usize = 1 << 14;
    let mut parts: Vec<&mut [f32]> = x.chunks_mut(PART).collect();
    oxinfer_kernels::pool::for_each_mut(&mut parts, |i, xs| {
        xs.iter_mut().zip(&y[i * PART..]).for_each(|(a, b)| *a += b);
    });
}

/// Every row of `x` (rows of `norm`'s width) normalized in place, parts of rows in parallel.
fn norm_rows(x: &mut [f32], norm: &LayerNorm) {
    let dim = norm.weight.len().max(1);
    let part = ROWS_PER_PART * dim;
    let mut parts: Vec<&mut [f32]> = x.chunks_mut(part).collect();
    oxinfer_kernels::pool::for_each_mut(&mut parts, |_, xs| {
        for row in xs.chunks_exact_mut(dim) {
            layer_norm_lanes(row, &norm.weight, &norm.bias, norm.eps);
        }
    });
}

/// `norm(x)` as a new buffer.
fn normed(x: &[f32], norm: &LayerNorm) -> Vec<f32> {
    let mut h = x.to_vec();
    norm_rows(&mut h, norm);
    h
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
