//! One description of a decoder, executed by every device ([`encoder`]: the same for the
//! bidirectional encoders).
//!
//! Each architecture describes its model once as a [`Plan`]: the embedding, then per layer a
//! token mixer (attention of some kind, or a recurrent mixer) between optional norms, a
//! feed-forward block (gated MLP or routed experts, optionally both), optional per-layer
//! embeddings and a layer scalar; then the final norm, the output head and an optional
//! soft-cap. The blocks are the nn blocks, seen through the traits of [`ops`].
//!
//! The CPU runs every plan ([`cpu`]); a backend runs the plans whose ops it implements
//! ([`crate::backend::Backend::run_plan`]) and declines the others, which then run on the CPU.
//! State lives in [`KvCache`] (keys/values per layer in its [`KvTypes`], recurrent state; a backend may keep the
//! keys/values in a device mirror, [`DeviceKv`]) and sequences of a batch in [`SeqRows`].

pub mod batch;
pub mod cpu;
pub mod encoder;
pub mod encoder_random;
pub mod encoder_tables;
pub mod kv_cache;
pub mod kv_mirror;
pub mod kv_rows;
pub mod media;
pub mod ops;
pub mod positions;

pub use batch::{SeqBatch, SeqRows};
pub use kv_cache::{KvCache, LayerCache, Past, PastViews, RecurrentState};
pub use kv_mirror::{DeviceKv, MirrorRows};
pub use kv_rows::{KvRows, KvType, KvTypes};
pub use ops::{
    AttentionOp, AttentionParts, AttnSpec, DeviceWeight, EmbedOp, MlpOp, MlpParts, NormOp,
    PleInputsOp, PleOp, ProjOp, RecurrentOp, RopeOp, RowsOp,
};
pub use positions::RowPositions;

/// A whole decoder-only model.
pub struct Plan<'a> {
    pub embed: &'a dyn EmbedOp,
    /// Per-layer embedding inputs (Gemma 4), made from the tokens and their embeddings.
    pub ple: Option<&'a dyn PleInputsOp>,
    pub layers: Vec<Layer<'a>>,
    /// Norm before the head, `[dim]`.
    pub final_norm: &'a dyn NormOp,
    /// Output head `[vocab, dim]`.
    pub head: &'a dyn ProjOp,
    /// Logits become `cap · tanh(logits / cap)`.
    pub final_softcap: Option<f32>,
    /// The RoPE tables attention layers name ([`AttnSpec::rope`]).
    pub ropes: Vec<&'a dyn RopeOp>,
    /// The layers from here on store no keys (they read earlier layers'): when no sequence
    /// wants every position's logits, they run on each sequence's last row only.
    pub last_rows_from: Option<usize>,
    /// Width of the hidden state.
    pub dim: usize,
    /// The attention layers run without the causal mask (encoders made from a decoder:
    /// EmbeddingGemma), through [`AttentionOp::forward_bidirectional`], on the CPU only.
    pub bidirectional: bool,
}

impl<'a> Plan<'a> {
    /// A plan of `layers` between the embedding and the final norm and head, with neither
    /// per-layer embeddings nor a final soft-cap; the width is the head's input width.
    pub fn new(
        embed: &'a dyn EmbedOp,
        layers: Vec<Layer<'a>>,
        final_norm: &'a dyn NormOp,
        head: &'a dyn ProjOp,
        ropes: Vec<&'a dyn RopeOp>,
    ) -> Self {
        Plan {
            embed,
            ple: None,
            layers,
            final_norm,
            dim: head.matrix().cols,
            head,
            final_softcap: None,
            ropes,
            last_rows_from: None,
            bidirectional: false,
        }
    }
}

/// One decoder layer: `x += post(mixer(norm(x)))`, `x += ffn(x)`, `x += ple(x)`, `x *= scalar`.
pub struct Layer<'a> {
    pub mixer_norm: &'a dyn NormOp,
    pub mixer: Mixer<'a>,
    /// Norm of the mixer's output before the residual add (Gemma).
    pub mixer_post_norm: Option<&'a dyn NormOp>,
    pub ffn: Ffn<'a>,
    pub ple: Option<&'a dyn PleOp>,
    /// Factor on the layer's output hidden state (Gemma 4's `layer_scalar`).
    pub scalar: Option<f32>,
}

impl<'a> Layer<'a> {
    /// A pre-norm layer: `x += mixer(mixer_norm(x))`, `x += ffn(x)`, nothing else.
    pub fn new(mixer_norm: &'a dyn NormOp, mixer: Mixer<'a>, ffn: Ffn<'a>) -> Self {
        Layer {
            mixer_norm,
            mixer,
            mixer_post_norm: None,
            ffn,
            ple: None,
            scalar: None,
        }
    }
}

/// A layer's token mixer.
#[derive(Clone, Copy)]
pub enum Mixer<'a> {
    Attention {
        op: &'a dyn AttentionOp,
        spec: AttnSpec,
    },
    Recurrent(&'a dyn RecurrentOp),
}

/// A feed-forward block: `m = body(norm(x))`; with side experts `m = side_norm(m) + experts(x)`;
/// then `post_norm(m)` where given.
pub struct Ffn<'a> {
    pub norm: &'a dyn NormOp,
    pub body: FfnBody<'a>,
    /// Routed experts beside the dense MLP (Gemma 4): the norm of the MLP's output, and the
    /// experts, which read the residual stream and norm it themselves.
    pub side_experts: Option<(&'a dyn NormOp, &'a dyn RowsOp)>,
    pub post_norm: Option<&'a dyn NormOp>,
}

impl<'a> Ffn<'a> {
    /// `body(norm(x))` with nothing beside or after it.
    pub fn new(norm: &'a dyn NormOp, body: FfnBody<'a>) -> Self {
        Ffn {
            norm,
            body,
            side_experts: None,
            post_norm: None,
        }
    }

    /// `mlp(norm(x))`.
    pub fn mlp(norm: &'a dyn NormOp, mlp: &'a dyn MlpOp) -> Self {
        Self::new(norm, FfnBody::Mlp(mlp))
    }
}

/// The body of a feed-forward block.
#[derive(Clone, Copy)]
pub enum FfnBody<'a> {
    Mlp(&'a dyn MlpOp),
    /// Routed experts (with a shared expert or not) on the normed input.
    Experts(&'a dyn RowsOp),
}

/// Inputs of one plan run on a backend.
pub struct PlanInput<'a> {
    /// Token ids of every sequence, stacked.
    pub ids: &'a [u32],
    /// Embedded tokens `[t, dim]`.
    pub x: &'a [f32],
    /// Per RoPE of [`Plan::ropes`], the cosines and sines of every row's position,
    /// `[t, dim / 2]` each.
    pub rope_tables: &'a [RopeTable],
    /// Rows (into the stacked input) whose logits are wanted, in output order.
    pub logit_rows: &'a [usize],
}

impl PlanInput<'_> {
    /// Rows in the pass.
    pub fn t(&self) -> usize {
        self.ids.len()
    }
}

/// One logit row scored against a target token: what perplexity needs of a row, so a backend
/// can reduce the row where it was computed instead of returning `vocab` values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowScore {
    /// ln softmax(row)[target], in f64: `(row[target] − max)` − ln Σ exp(row − max), each
    /// `row − max` taken in f32 and widened, the sum in f64; −∞ for a target past the
    /// vocabulary (an argmax-only pass passes `u32::MAX`, and a device may skip the sum).
    pub logp: f64,
    /// The most likely token: the first index of the row's maximum.
    pub argmax: u32,
}

impl RowScore {
    /// The score of `row` against `target` on the host (the reference every backend's
    /// reduction follows).
    pub fn from_logits(row: &[f32], target: u32) -> Self {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = row.iter().map(|&l| f64::from(l - max).exp()).sum();
        let target = row
            .get(target as usize)
            .copied()
            .unwrap_or(f32::NEG_INFINITY);
        RowScore {
            logp: f64::from(target - max) - sum.ln(),
            argmax: crate::engine::sampler::argmax(row),
        }
    }

    /// The scores of stacked rows `logits` (`[n, vocab]`) against `targets` (one per row).
    pub fn from_rows(logits: &[f32], vocab: usize, targets: &[u32]) -> Vec<Self> {
        logits
            .chunks_exact(vocab)
            .zip(targets)
            .map(|(row, &t)| Self::from_logits(row, t))
            .collect()
    }
}

/// Cosines and sines of one RoPE at every row's position, `[t, dim / 2]` each.
#[derive(Clone, Debug, Default)]
pub struct RopeTable {
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
}
