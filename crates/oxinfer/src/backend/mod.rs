//! Accelerator backends: the one trait that linear layers, convolutions and attention dispatch
//! through, and the process-wide registry that installs one backend at start-up from platform
//! detection.
//!
//! Every backend is optional at run time. The CPU kernels stay the reference and the fallback:
//! each optional op has a default that answers "not handled" (`false` / `None`), and the caller
//! then runs its CPU path. Architectures never call a backend directly: they describe a
//! [`Plan`], which [`plan_run::run`] offers to the backend whole, and the nn blocks
//! ([`crate::nn::Linear`], [`crate::nn::attention`], ...) offer single ops while the CPU runs
//! the plan. Backends see only the kernels' types and the plan's: they implement ops, never a
//! model family.
//!
//! This is the project's version of `shared/seed/backend-spec.rs.txt`. Departures, each
//! explained where it is made:
//! - weights are described by the project's one weight-format type
//!   ([`oxinfer_kernels::WeightMatrix`]: format + packed bytes) instead of a per-format enum, so
//!   every GGUF block type and our own Q8/Q4 reach a backend without a new variant each
//!   ([`Job`]);
//! - attention takes the KV-cache geometry the model code has (grouped-query heads, a first
//!   query position, sliding window, logit soft-cap) instead of equal q/k/v head counts
//!   ([`AttentionGeom`]);
//! - the registry does not name concrete backends: front ends register [`Provider`]s (the CUDA
//!   crate depends on this one, not the reverse), and an explicit device that is not available
//!   is an error instead of a silent CPU fallback ([`registry`]);
//! - a checking wrapper ([`check`]) recomputes every device op on the CPU when
//!   `OXINFER_GPU_CHECK=1`;
//! - a whole model [`Plan`] may run as one call with the hidden state resident on the device
//!   ([`plan_run`], [`Backend::run_plan`]), since per-op offload moves the activations over the
//!   bus for every op.

pub mod check;
pub mod cpu_ref;
pub mod plan_run;
pub mod registry;

pub use crate::plan::DeviceWeight;
pub use oxinfer_kernels::act::GateAct;
pub use oxinfer_kernels::attention::AttnShape;
pub use registry::{
    active, check_report, cpu_only, cpu_only_here, init, install, BackendError, DeviceChoice,
    DeviceKind, DevicePref, GpuInfo, Provider,
};

use crate::plan::encoder::EncoderPlan;
use crate::plan::{KvTypes, Plan, PlanInput, ProjOp, RowScore, SeqRows};
use oxinfer_kernels::WeightMatrix;

/// One matmul of a batch that shares its input `x`: `y[t][n_out] = x[t][n_in] · Wᵀ`.
///
/// Departure from the spec: `w` is a [`WeightMatrix`] (format, packed bytes, rows = `n_out`,
/// cols = `n_in`) so `n_out` is not repeated here and any format the CPU kernels read can be
/// offered to a backend, which declines the ones it does not handle.
pub struct Job<'a> {
    /// The weight `[n_out, n_in]` as the CPU kernels see it (the CPU twin reads it).
    pub w: WeightMatrix<'a>,
    /// What [`Backend::upload`] returned for `w`.
    pub dev: &'a DeviceWeight,
    /// Output `[t, n_out]`, overwritten.
    pub y: &'a mut [f32],
}

/// A weight as a backend sees it: the CPU view and the device state made by
/// [`Backend::upload`].
#[derive(Clone, Copy)]
pub struct Weight<'a> {
    pub w: WeightMatrix<'a>,
    pub dev: &'a DeviceWeight,
}

/// A number no earlier call in this process returned (starting at 1): a backend gives one to
/// each weight it uploads, so that state it keeps between passes (packed constants) can tell
/// one loaded model from a later one that happens to reuse the same host addresses.
pub fn next_upload_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The identity of host values a backend packed for a pass and keeps on the device between
/// passes: `id` (an upload id of the model's, [`next_upload_id`]), then the address and length
/// of each slice in packing order (0, 0 where absent). The slices belong to that loaded model,
/// whose values do not change while its weights are uploaded, so an equal key means equal
/// values.
pub fn constants_key<'a>(
    id: u64,
    slices: impl IntoIterator<Item = Option<&'a [f32]>>,
) -> Vec<usize> {
    let mut key = vec![id as usize];
    for v in slices {
        key.extend(v.map_or([0, 0], |v| [v.as_ptr() as usize, v.len()]));
    }
    key
}

/// Projection `p`'s weight with its device state on `b`, uploaded on first use; `None` when `b`
/// declined it.
pub fn device_weight<'a>(b: &dyn Backend, p: &'a dyn ProjOp) -> Option<Weight<'a>> {
    let dev = p
        .device_slot()
        .get_or_init(|| b.upload(&p.matrix()))
        .as_ref()?;
    Some(Weight { w: p.matrix(), dev })
}

/// Geometry of a `k × k` convolution with padding `k / 2` over channels-last input
/// `[h * w, cin]`, producing `[oh * ow, n_out]`; weights in the unfolded
/// `[n_out][ky][kx][cin]` layout.
#[derive(Clone, Copy, Debug)]
pub struct ConvGeom {
    pub h: usize,
    pub w: usize,
    pub cin: usize,
    pub k: usize,
    pub stride: usize,
    pub oh: usize,
    pub ow: usize,
}

/// Normalization applied to a convolution's input as it is loaded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NormKind {
    /// GroupNorm with this many groups, over the channels of all pixels.
    Group(usize),
    /// LayerNorm over each pixel's channels.
    Layer,
}

/// A normalization fused into a convolution's input load: normalize, then `* gamma + beta`,
/// then SiLU if `silu`.
#[derive(Clone, Copy, Debug)]
pub struct NormSpec<'a> {
    pub kind: NormKind,
    pub eps: f32,
    /// `[cin]`.
    pub gamma: &'a [f32],
    /// `[cin]`.
    pub beta: &'a [f32],
    pub silu: bool,
}

/// One attention call over a KV cache: the head layout and options ([`AttnShape`], the one
/// attention shape the kernels, nn and every backend share) applied to `t` new queries.
///
/// Departure from the spec (`q`, `k`, `v` with one head count and `causal: bool`): the model
/// code holds fewer key/value heads than query heads (GQA), appends new queries after cached
/// positions, and some families use a sliding window and a logit soft-cap, so the geometry says
/// all of that. Queries are at positions `pos0 .. pos0 + t`; query `i` sees keys
/// `j <= pos0 + i` (causal) with `pos0 + i - j < window`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionGeom {
    /// New queries (rows of `q`).
    pub t: usize,
    /// Position of the first query; keys are positions `0 .. pos0 + t`.
    pub pos0: usize,
    /// Heads, head width, scale, sliding window and soft-cap.
    pub shape: AttnShape,
}

impl AttentionGeom {
    /// Number of keys (`pos0 + t`).
    pub fn n_keys(&self) -> usize {
        self.pos0 + self.t
    }
}

/// An accelerator. Implementations must be usable from any thread.
pub trait Backend: Send + Sync {
    /// Short name for messages (`"cuda:0"`).
    fn name(&self) -> &str;

    /// Whether this backend should run a matmul of these dimensions (`t` input rows). Dispatch
    /// and transfers have a fixed cost, so small ops and single-token decode stay on the CPU.
    fn wants(&self, n_out: usize, n_in: usize, t: usize) -> bool;

    /// Prepares device-side state for a weight matrix, once; `None` when the backend does not
    /// handle this format or shape (the layer then always runs on the CPU).
    fn upload(&self, w: &WeightMatrix) -> Option<DeviceWeight>;

    /// Runs a batch of matmuls over one shared input `x` (`[t, n_in]`). Returns false if nothing
    /// was computed (the caller then runs the whole batch on the CPU).
    fn matmul(&self, x: &[f32], t: usize, n_in: usize, jobs: &mut [Job]) -> bool;

    /// Runs a convolution on the device, gathering the `k × k` neighbourhoods itself and
    /// optionally normalizing its input on the way in. `job.y` is `[oh * ow, n_out]`. Returns
    /// false when not handled (the caller normalizes and unfolds on the CPU).
    fn conv2d(&self, _x: &[f32], _g: &ConvGeom, _norm: Option<&NormSpec>, _job: &mut Job) -> bool {
        false
    }

    /// Attention: `q` `[t, n_heads * head_dim]`, `k` and `v` `[n_keys, n_kv_heads * head_dim]`
    /// (rows past `n_keys` are ignored) into `out` `[t, n_heads * head_dim]`. Returns false when
    /// not handled.
    fn attention(
        &self,
        _q: &[f32],
        _k: &[f32],
        _v: &[f32],
        _g: &AttentionGeom,
        _out: &mut [f32],
    ) -> bool {
        false
    }

    /// A whole gated MLP, `y = down(act(gate(x)) ⊙ up(x))`, with `x` `[t, dim]` and `y`
    /// `[t, dim]`, so that the `[t, ffn]` intermediates never leave the device. Returns false
    /// when not handled (the caller runs the three matmuls one by one).
    ///
    /// Not in the spec: added because the intermediates are the largest transfers of a prefill
    /// (measured on an H200: 3 of the 5 `[t, ffn]`-sized copies of each layer).
    #[allow(clippy::too_many_arguments)]
    fn gated_mlp(
        &self,
        _x: &[f32],
        _t: usize,
        _gate: Weight,
        _up: Weight,
        _down: Weight,
        _act: GateAct,
        _y: &mut [f32],
    ) -> bool {
        false
    }

    /// Whether this backend's device mirror of a KV cache can hold keys and values of `types`
    /// (the host cache's storage types, kept as they are on the device). A cache of other
    /// types is never given to [`run_plan`](Self::run_plan): the CPU runs those passes.
    fn holds_kv(&self, types: KvTypes) -> bool {
        types.is_f32()
    }

    /// A whole model pass with the hidden state resident on the device: `input.x` (the
    /// embedded rows of every sequence of `seqs`) goes up; every layer's new keys/values are
    /// stored for each sequence, either appended to its host cache in layer order
    /// ([`crate::plan::KvCache::append`]) or kept in the cache's device mirror (whose length
    /// then counts them), never advanced; the logits of `input.logit_rows` come down into
    /// `logits` (`[logit_rows.len(), vocab]`). Returns false when not handled: a backend
    /// declines any plan with an op it does not implement, before changing anything (the CPU
    /// then runs the plan). See [`plan_run`] for the ownership rule and for why this departs
    /// from the spec's per-op interface.
    fn run_plan(
        &self,
        _plan: &Plan,
        _input: &PlanInput,
        _seqs: &mut [SeqRows<'_>],
        _logits: &mut [f32],
    ) -> bool {
        false
    }

    /// [`run_plan`](Self::run_plan), but each logit row is scored on the device against
    /// `targets[i]` (one per row of `input.logit_rows`) into `scores[i]` ([`RowScore`]) instead
    /// of coming back whole: for perplexity, where the rows are `vocab` wide and only two
    /// numbers of each are used. False when not handled, before changing anything (the caller
    /// then scores [`run_plan`](Self::run_plan)'s logits on the host).
    fn run_plan_scored(
        &self,
        _plan: &Plan,
        _input: &PlanInput,
        _seqs: &mut [SeqRows<'_>],
        _targets: &[u32],
        _scores: &mut [RowScore],
    ) -> bool {
        false
    }

    /// A whole bidirectional encoder pass ([`EncoderPlan`]) with the hidden state resident on
    /// the device: `x` (`[Σ lens, plan.dim]`, the embedded and normalized rows of every
    /// sequence, concatenated) goes up, the last hidden states come down into `out` (same
    /// shape); attention runs within each sequence of `lens`. Returns false when not handled,
    /// before writing anything (the CPU then runs the plan, [`crate::plan::encoder::run_cpu`]).
    ///
    /// Not in the spec: an encoder reached op by op moves every activation over the bus (on an
    /// H200 that made `oxinfer embed` 6–17× slower than the host's own cores).
    fn run_encoder(
        &self,
        _plan: &EncoderPlan,
        _x: &[f32],
        _lens: &[usize],
        _out: &mut [f32],
    ) -> bool {
        false
    }

    /// Cumulative summary (time per op kind, bytes moved) for `--profile`.
    fn stats(&self) -> Option<String> {
        None
    }
}
