//! The blocks a plan is made of, as executors see them: each trait gives a backend the data it
//! needs (weights, gains, shapes) and the CPU executor the block's own CPU forward pass. The nn
//! blocks implement them; a plan only holds references to these traits, so backends depend on
//! the plan and the kernels' types, never on nn or arch.

use super::batch::SeqRows;
use super::positions::RowPositions;
use crate::error::Result;
use oxinfer_kernels::act::GateAct;
use oxinfer_kernels::WeightMatrix;
use std::any::Any;
use std::sync::OnceLock;

/// Device-side state for one weight matrix (buffers, handles), made by a backend's `upload`
/// once and owned by the layer that holds the weight.
pub type DeviceWeight = Box<dyn Any + Send + Sync>;

/// A linear projection `y = x · Wᵀ (+ b)`.
pub trait ProjOp: Sync {
    /// The weight `[n_out, n_in]` as the CPU kernels see it.
    fn matrix(&self) -> WeightMatrix<'_>;
    /// The bias `[n_out]`, if any.
    fn bias(&self) -> Option<&[f32]>;
    /// Where the weight's device state lives once a backend uploaded it (`None` inside: the
    /// backend declined it).
    fn device_slot(&self) -> &OnceLock<Option<DeviceWeight>>;
    /// `x` `[t, n_in]` → `[t, n_out]` (the layer's own path: packed CPU kernels or a backend).
    fn forward(&self, x: &[f32], t: usize) -> Vec<f32>;
}

/// An RMSNorm over rows of its gain's length: `x / rms(x) · gain`.
pub trait NormOp: Sync {
    /// The gain `[dim]` (the `1 +` of zero-centred norms already folded in).
    fn gain(&self) -> &[f32];
    /// Added to the mean square.
    fn eps(&self) -> f32;
    /// Normalizes every row of `x` (`[t, dim]`) in place.
    fn forward_inplace(&self, x: &mut [f32]);
    /// Normalizes every row of `x` into a new buffer.
    fn forward(&self, x: &[f32]) -> Vec<f32> {
        let mut y = x.to_vec();
        self.forward_inplace(&mut y);
        y
    }
}

/// A rotary position embedding.
pub trait RopeOp: Sync {
    /// Rotated dimensions per head (the first `dim` of each head).
    fn dim(&self) -> usize;
    /// Pairs `(2j, 2j + 1)` (else `(j, j + dim / 2)`).
    fn interleaved(&self) -> bool;
    /// Cosines and sines of positions `pos0 .. pos0 + t`, `[t, dim / 2]` each.
    fn tables(&self, pos0: usize, t: usize, cos: &mut [f32], sin: &mut [f32]);
    /// Rotates `x` (`[t, heads, head_dim]`) in place; row `i` is at position `pos0 + i`.
    fn apply(&self, x: &mut [f32], t: usize, heads: usize, head_dim: usize, pos0: usize);
    /// Rotates the rows of one sequence at `pos` ([`RowPositions`]); a plain RoPE reads only
    /// the sequence index, a multimodal one (M-RoPE) the three axes.
    fn apply_rows(
        &self,
        x: &mut [f32],
        t: usize,
        heads: usize,
        head_dim: usize,
        pos: RowPositions<'_>,
    ) {
        self.apply(x, t, heads, head_dim, pos.pos0);
    }
    /// Cosines and sines of the rows of one sequence at `pos`, `[t, dim / 2]` each.
    fn tables_rows(&self, pos: RowPositions<'_>, t: usize, cos: &mut [f32], sin: &mut [f32]) {
        self.tables(pos.pos0, t, cos, sin);
    }
}

/// The token embedding.
pub trait EmbedOp: Sync {
    /// Rows of `ids`, `[ids.len(), dim]` (scaled as the family wants).
    fn forward(&self, ids: &[u32]) -> Result<Vec<f32>>;
}

/// How one attention layer attends: which RoPE table, score scale, window, soft-cap.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnSpec {
    /// Index into [`super::Plan::ropes`].
    pub rope: usize,
    /// Factor on q·k.
    pub scale: f32,
    /// A query at position q sees keys k with `q − k < window`.
    pub window: Option<usize>,
    /// Scores become `cap · tanh(score / cap)` before the softmax.
    pub softcap: Option<f32>,
}

/// The parts of an attention block a backend reads.
pub struct AttentionParts<'a> {
    pub q: &'a dyn ProjOp,
    /// `None`: the layer reads the keys/values of layer `kv_source` (KV sharing).
    pub k: Option<&'a dyn ProjOp>,
    /// `None` with `k` given: values are the key projection (k = v).
    pub v: Option<&'a dyn ProjOp>,
    pub o: &'a dyn ProjOp,
    /// Per-head RMSNorm of queries / keys before RoPE, `[head_dim]` gains.
    pub q_norm: Option<&'a dyn NormOp>,
    pub k_norm: Option<&'a dyn NormOp>,
    /// Values go through an RMSNorm without gain (Gemma 4).
    pub v_norm: bool,
    /// The q projection yields per head `head_dim` queries then `head_dim` gate values; the
    /// output is multiplied by `sigmoid(gate)` before the output projection (Qwen 3.5).
    pub output_gate: bool,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// The cache layer whose keys/values this layer reads when it is not its own.
    pub kv_source: Option<usize>,
}

/// Self-attention over each sequence's KV cache.
pub trait AttentionOp: Sync {
    /// What a backend reads.
    fn parts(&self) -> AttentionParts<'_>;
    /// `h` is the normed input `[t, dim]` of every sequence stacked; appends each sequence's
    /// new keys/values to cache layer `layer` and returns the output `[t, dim]` before the
    /// residual add. `skipped[k]` (empty: none) is how many of sequence `k`'s new positions
    /// were left out before its rows (only KV-shared layers allow it).
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        h: &[f32],
        t: usize,
        layer: usize,
        seqs: &mut [SeqRows<'_>],
        skipped: &[usize],
        rope: &dyn RopeOp,
        spec: &AttnSpec,
    ) -> Vec<f32>;

    /// The same block without the causal mask ([`super::Plan::bidirectional`]): each
    /// sequence's new rows (positions from its cache's length) attend to each other, those at
    /// distance `< spec.window` when it is set; nothing is appended to the caches. `None`: the
    /// block has no bidirectional form.
    fn forward_bidirectional(
        &self,
        _h: &[f32],
        _t: usize,
        _seqs: &[SeqRows<'_>],
        _rope: &dyn RopeOp,
        _spec: &AttnSpec,
    ) -> Option<Vec<f32>> {
        None
    }
}

/// The parts of a gated MLP a backend reads.
pub struct MlpParts<'a> {
    pub gate: &'a dyn ProjOp,
    pub up: &'a dyn ProjOp,
    pub down: &'a dyn ProjOp,
    pub act: GateAct,
}

/// A gated MLP `down(act(gate(x)) ⊙ up(x))`.
pub trait MlpOp: Sync {
    /// What a backend reads.
    fn parts(&self) -> MlpParts<'_>;
    /// `x` `[t, dim]` → `[t, dim]`.
    fn forward(&self, x: &[f32], t: usize) -> Vec<f32>;
}

/// A block mapping `[t, dim]` rows to `[t, dim]` rows that no backend executes yet (routed
/// experts).
pub trait RowsOp: Sync {
    /// `x` `[t, dim]` → `[t, dim]`.
    fn forward(&self, x: &[f32], t: usize) -> Vec<f32>;
}

/// A recurrent token mixer with per-sequence state in the cache (Gated DeltaNet).
pub trait RecurrentOp: Sync {
    /// `h` is the normed input `[t, dim]`; updates each sequence's state of layer `layer` and
    /// returns `[t, dim]`.
    fn forward(&self, h: &[f32], t: usize, layer: usize, seqs: &mut [SeqRows<'_>]) -> Vec<f32>;
}

/// The model-level half of per-layer embeddings (Gemma 4): every layer's extra input per token.
pub trait PleInputsOp: Sync {
    /// Per-layer inputs `[t, layers · width]` of tokens `ids` whose embeddings are `x`.
    fn forward(&self, ids: &[u32], x: &[f32], t: usize) -> Result<Vec<f32>>;
    /// Layer `l`'s rows `[t, width]` out of [`PleInputsOp::forward`]'s result.
    fn layer(&self, all: &[f32], l: usize, t: usize) -> Vec<f32>;
}

/// A layer's per-layer-embedding block: `x`, `ple` → the residual update `[t, dim]`.
pub trait PleOp: Sync {
    /// `x` `[t, dim]`, `ple` this layer's inputs `[t, width]`.
    fn forward(&self, x: &[f32], ple: &[f32], t: usize) -> Vec<f32>;
}
