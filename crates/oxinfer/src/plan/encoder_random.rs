//! Random encoder plans of a chosen geometry, for the backends' tests against [`run_cpu`] (every
//! device executor of an [`EncoderPlan`] is checked on the same cases) and for benchmarks.
//!
//! [`run_cpu`]: super::encoder::run_cpu

use super::encoder::{EncoderLayer, EncoderPlan, ExtraNorms, NormOrder, RopeOf};
use crate::config::{RopeConfig, RopeScaling, RopeStyle};
use crate::mapped::TensorView;
use crate::nn::encoder_act::EncoderAct;
use crate::nn::encoder_attention::EncoderHeads;
use crate::nn::encoder_linear::EncoderLinear;
use crate::nn::{LayerNorm, Linear, RmsNorm, Rope, RopeRows};
use half::f16;
use oxinfer_kernels::WeightFormat;
use std::path::Path;

/// `take(n, scale)`: `n` random values in `[-scale, scale]` (the caller's deterministic source).
pub type Take<'t> = &'t mut dyn FnMut(usize, f32) -> Vec<f32>;

/// How the random weights are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    F32,
    F16,
}

/// A random encoder's geometry: hidden width, heads (of `dim / heads`), MLP width, blocks,
/// whether every projection has a bias, whether the MLP is gated, its activation, the weights'
/// storage.
#[derive(Clone, Copy, Debug)]
pub struct RandomCase {
    pub dim: usize,
    pub heads: usize,
    pub ffn: usize,
    pub layers: usize,
    pub bias: bool,
    pub gated: bool,
    pub act: EncoderAct,
    pub stored: Stored,
}

/// One block's owned weights (what [`EncoderLayer`] borrows).
pub struct RandomLayer {
    pub q: EncoderLinear,
    pub k: EncoderLinear,
    pub v: EncoderLinear,
    pub o: EncoderLinear,
    pub attn_norm: LayerNorm,
    pub gate: Option<EncoderLinear>,
    pub up: EncoderLinear,
    pub down: EncoderLinear,
    pub ffn_norm: LayerNorm,
}

/// A random `[n_out, n_in]` projection (weights in `±1.7/√n_in`), with a bias in `±0.1` when
/// `bias`, stored as `stored`.
pub fn linear(take: Take, n_out: usize, n_in: usize, bias: bool, stored: Stored) -> EncoderLinear {
    let w = take(n_out * n_in, 1.7 / (n_in as f32).sqrt());
    let view = match stored {
        Stored::F32 => TensorView::from_f32(Path::new("random"), "w", vec![n_out, n_in], &w),
        Stored::F16 => {
            let bytes = w
                .iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                .collect();
            TensorView::from_owned(
                Path::new("random"),
                "w",
                WeightFormat::F16,
                vec![n_out, n_in],
                bytes,
                Vec::new(),
            )
        }
    };
    let b = bias.then(|| take(n_out, 0.1));
    EncoderLinear::from_linear(Linear::from_view(view, b).expect("a valid random matrix"))
}

/// A random LayerNorm of `dim` (gains in `1 ± 0.2`, biases in `±0.1`).
pub fn norm(take: Take, dim: usize) -> LayerNorm {
    LayerNorm {
        weight: take(dim, 0.2).iter().map(|g| 1.0 + g).collect(),
        bias: take(dim, 0.1),
        eps: 1e-12,
    }
}

/// The blocks of case `c`.
pub fn build(c: &RandomCase, take: Take) -> Vec<RandomLayer> {
    let (d, f, b, st) = (c.dim, c.ffn, c.bias, c.stored);
    (0..c.layers)
        .map(|_| RandomLayer {
            q: linear(take, d, d, b, st),
            k: linear(take, d, d, b, st),
            v: linear(take, d, d, b, st),
            o: linear(take, d, d, b, st),
            attn_norm: norm(take, d),
            gate: c.gated.then(|| linear(take, f, d, b, st)),
            up: linear(take, f, d, b, st),
            down: linear(take, d, f, b, st),
            ffn_norm: norm(take, d),
        })
        .collect()
}

/// The post-norm plan of `layers` (case `c`; no rotation, no window).
pub fn plan<'a>(c: &RandomCase, layers: &'a [RandomLayer]) -> EncoderPlan<'a> {
    EncoderPlan {
        layers: layers
            .iter()
            .map(|l| EncoderLayer {
                q: &l.q,
                k: &l.k,
                v: &l.v,
                o: &l.o,
                attn_norm: Some((&l.attn_norm).into()),
                window: None,
                rope_of: None,
                gate: l.gate.as_ref(),
                up: &l.up,
                down: &l.down,
                ffn_norm: (&l.ffn_norm).into(),
                extra_norms: ExtraNorms::default(),
            })
            .collect(),
        order: NormOrder::Post,
        heads: EncoderHeads {
            n_heads: c.heads,
            n_kv_heads: c.heads,
            head_dim: c.dim / c.heads,
            scale: 1.0 / ((c.dim / c.heads) as f32).sqrt(),
            window: None,
        },
        act: c.act,
        dim: c.dim,
    }
}

/// `p` made ModernBERT-like: pre-norm with `final_norm`, the first block without an attention
/// norm, every third layer from the first global (rotated by `global`), the others local
/// (`window`, rotated by `local`).
pub fn make_pre_norm<'a>(
    p: &mut EncoderPlan<'a>,
    final_norm: &'a LayerNorm,
    window: usize,
    global: RopeOf<'a>,
    local: RopeOf<'a>,
) {
    p.order = NormOrder::Pre {
        final_norm: Some(final_norm.into()),
    };
    for (i, l) in p.layers.iter_mut().enumerate() {
        let is_global = i % 3 == 0;
        l.window = (!is_global).then_some(window);
        l.rope_of = Some(if is_global { global } else { local });
    }
    if let Some(first) = p.layers.first_mut() {
        first.attn_norm = None;
    }
}

/// A rotation of `dim` of a head's dimensions with base `theta`.
pub fn rope(theta: f32, dim: usize, style: RopeStyle) -> Rope {
    let cfg = RopeConfig {
        theta,
        dim,
        style,
        scaling: RopeScaling::None,
    };
    Rope::new(&cfg, None)
}

/// ModernBERT-like cases for [`make_pre_norm`], as (case, window): GeGLU (GELU erf) without
/// biases; heads of 64 (modernbert-base's) with windows of 32, and the tiny checkpoints' heads of
/// 8 with windows of 4 and f16 weights. Each layer type rotates the whole head
/// ([`pre_norm_ropes`]).
pub const PRE_NORM_CASES: [(RandomCase, usize); 2] = [
    (
        RandomCase {
            dim: 256,
            heads: 4,
            ffn: 384,
            layers: 4,
            bias: false,
            gated: true,
            act: EncoderAct::GeluErf,
            stored: Stored::F32,
        },
        32,
    ),
    (
        RandomCase {
            dim: 32,
            heads: 4,
            ffn: 48,
            layers: 3,
            bias: false,
            gated: true,
            act: EncoderAct::GeluErf,
            stored: Stored::F16,
        },
        4,
    ),
];

/// The global (θ 160,000) and local (θ 10,000) rotations of the heads of case `c`, as
/// ModernBERT's layer types have them.
pub fn pre_norm_ropes(c: &RandomCase) -> (Rope, Rope) {
    let hd = c.dim / c.heads;
    (
        rope(160_000.0, hd, RopeStyle::Half),
        rope(10_000.0, hd, RopeStyle::Half),
    )
}

/// `p` made like Qwen 3.5's vision tower: pre-norm with `final_norm` (its merger's norm), every
/// block with its attention norm, every layer's queries and keys rotated by the rows of
/// their sequence, `rows[i]` for sequence `i` ([`grid_rows`]).
pub fn make_grid_pre_norm<'a>(
    p: &mut EncoderPlan<'a>,
    final_norm: &'a LayerNorm,
    rows: &'a [RopeRows],
) {
    p.order = NormOrder::Pre {
        final_norm: Some(final_norm.into()),
    };
    for l in &mut p.layers {
        l.rope_of = Some(RopeOf::Rows(rows));
    }
}

/// The 2-D grid rotation ([`RopeRows::axial_2d`], θ 10,000) of each sequence of `lens` for the
/// heads of case `c`: token `i` at row `i / 6`, column `i % 6` (patches of an image 6 wide).
pub fn grid_rows(c: &RandomCase, lens: &[usize]) -> Vec<RopeRows> {
    let hd = c.dim / c.heads;
    lens.iter()
        .map(|&n| RopeRows::axial_2d(hd, 10_000.0, (0..n).map(|i| (i / 6, i % 6))))
        .collect()
}

/// Vision-tower-like cases for [`make_grid_pre_norm`]: biases on every projection, a plain
/// GELU (tanh) MLP; heads of 72 (Qwen 3.5's real tower: 1152 wide, 16 heads), and the tiny
/// fixture's geometry (width 32, heads of 8, MLP 48) with f16 weights.
pub const GRID_CASES: [RandomCase; 2] = [
    RandomCase {
        dim: 144,
        heads: 2,
        ffn: 288,
        layers: 2,
        bias: true,
        gated: false,
        act: EncoderAct::GeluTanh,
        stored: Stored::F32,
    },
    RandomCase {
        dim: 32,
        heads: 4,
        ffn: 48,
        layers: 2,
        bias: true,
        gated: false,
        act: EncoderAct::GeluTanh,
        stored: Stored::F16,
    },
];

/// A Gemma-4-vision-like random encoder ([`build_sandwich`], [`sandwich_plan`]): pre-norm RMS
/// sandwich blocks without a final norm, per-head RMS norms of the queries and keys (and an
/// unscaled one of the values) before each sequence's own axial rotation
/// ([`RopeRows::axial_halves`]), `heads` query heads over `kv_heads` key/value heads of
/// `head_dim` (`heads · head_dim` need not be `dim`), attention scale 1, a gated GELU (tanh)
/// MLP, no biases, every projection's input and output clamped when `clip`.
#[derive(Clone, Copy, Debug)]
pub struct SandwichCase {
    pub dim: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub layers: usize,
    pub clip: bool,
    pub stored: Stored,
}

/// One sandwich block's owned weights (what [`sandwich_plan`] borrows).
pub struct SandwichLayer {
    pub q: EncoderLinear,
    pub k: EncoderLinear,
    pub v: EncoderLinear,
    pub o: EncoderLinear,
    pub gate: EncoderLinear,
    pub up: EncoderLinear,
    pub down: EncoderLinear,
    pub input_norm: RmsNorm,
    pub post_attn_norm: RmsNorm,
    pub pre_ffn_norm: RmsNorm,
    pub post_ffn_norm: RmsNorm,
    pub q_norm: RmsNorm,
    pub k_norm: RmsNorm,
    /// Unscaled (gains of one).
    pub v_norm: RmsNorm,
}

/// A random RMSNorm of `dim` (gains in `1 ± 0.2`, epsilon 1e-6).
pub fn rms_norm(take: Take, dim: usize) -> RmsNorm {
    RmsNorm {
        weight: take(dim, 0.2).iter().map(|g| 1.0 + g).collect(),
        eps: 1e-6,
    }
}

/// A random per-head RMSNorm of the queries or keys, gains in `0.5 ± 0.1`: the attention's
/// logits (scale 1) then have a standard deviation of about 2 at heads of 64; with gains of
/// one, about 8, a softmax so sharp that the f32 rounding differences of two executors
/// (summation orders) grow to 2e-5 of the output.
fn head_norm(take: Take, dim: usize) -> RmsNorm {
    RmsNorm {
        weight: take(dim, 0.1).iter().map(|g| 0.5 + g).collect(),
        eps: 1e-6,
    }
}

/// A random bias-free `[n_out, n_in]` projection, with random clamps of its input and output
/// when `clip` (bounds about ±1.25, so that some values of the rows these cases see are cut).
fn clamped(take: Take, n_out: usize, n_in: usize, clip: bool, stored: Stored) -> EncoderLinear {
    let l = linear(take, n_out, n_in, false, stored);
    if !clip {
        return l;
    }
    let mut bounds = || {
        let r = take(2, 0.25);
        Some([-1.25 + r[0], 1.25 + r[1]])
    };
    let (input, output) = (bounds(), bounds());
    l.with_clamps(input, output)
}

/// The blocks of sandwich case `c`.
pub fn build_sandwich(c: &SandwichCase, take: Take) -> Vec<SandwichLayer> {
    let (d, f, st, clip) = (c.dim, c.ffn, c.stored, c.clip);
    let (qw, kvw, hd) = (c.heads * c.head_dim, c.kv_heads * c.head_dim, c.head_dim);
    (0..c.layers)
        .map(|_| SandwichLayer {
            q: clamped(take, qw, d, clip, st),
            k: clamped(take, kvw, d, clip, st),
            v: clamped(take, kvw, d, clip, st),
            o: clamped(take, d, qw, clip, st),
            gate: clamped(take, f, d, clip, st),
            up: clamped(take, f, d, clip, st),
            down: clamped(take, d, f, clip, st),
            input_norm: rms_norm(take, d),
            post_attn_norm: rms_norm(take, d),
            pre_ffn_norm: rms_norm(take, d),
            post_ffn_norm: rms_norm(take, d),
            q_norm: head_norm(take, hd),
            k_norm: head_norm(take, hd),
            v_norm: RmsNorm {
                weight: vec![1.0; hd],
                eps: 1e-6,
            },
        })
        .collect()
}

/// The plan of sandwich blocks `layers` (case `c`), each sequence `i` rotated by `rows[i]`
/// ([`sandwich_rows`]).
pub fn sandwich_plan<'a>(
    c: &SandwichCase,
    layers: &'a [SandwichLayer],
    rows: &'a [RopeRows],
) -> EncoderPlan<'a> {
    EncoderPlan {
        layers: layers
            .iter()
            .map(|l| EncoderLayer {
                q: &l.q,
                k: &l.k,
                v: &l.v,
                o: &l.o,
                attn_norm: Some((&l.input_norm).into()),
                window: None,
                rope_of: Some(RopeOf::Rows(rows)),
                gate: Some(&l.gate),
                up: &l.up,
                down: &l.down,
                ffn_norm: (&l.pre_ffn_norm).into(),
                extra_norms: ExtraNorms {
                    q: Some(&l.q_norm),
                    k: Some(&l.k_norm),
                    v: Some(&l.v_norm),
                    post_attn: Some((&l.post_attn_norm).into()),
                    post_ffn: Some((&l.post_ffn_norm).into()),
                },
            })
            .collect(),
        order: NormOrder::Pre { final_norm: None },
        heads: EncoderHeads {
            n_heads: c.heads,
            n_kv_heads: c.kv_heads,
            head_dim: c.head_dim,
            scale: 1.0,
            window: None,
        },
        act: EncoderAct::GeluTanh,
        dim: c.dim,
    }
}

/// Gemma 4's axial rotation ([`RopeRows::axial_halves`], θ 100) of each sequence of `lens` for
/// the heads of case `c`: token `i` at row `i / 6`, column `i % 6`.
pub fn sandwich_rows(c: &SandwichCase, lens: &[usize]) -> Vec<RopeRows> {
    lens.iter()
        .map(|&n| RopeRows::axial_halves(c.head_dim, 100.0, (0..n).map(|i| (i / 6, i % 6))))
        .collect()
}

/// Gemma-4-vision-like cases for [`sandwich_plan`]: heads of 64 (the real tower's) with two
/// query heads per key/value head and an attention twice as wide as the hidden state, clamped;
/// the tiny fixture's geometry (width 24, 4 heads of 8 over 2, MLP 40) with f16 weights,
/// clamped; heads of 32 without grouping or clamps.
pub const SANDWICH_CASES: [SandwichCase; 3] = [
    SandwichCase {
        dim: 128,
        heads: 4,
        kv_heads: 2,
        head_dim: 64,
        ffn: 192,
        layers: 2,
        clip: true,
        stored: Stored::F32,
    },
    SandwichCase {
        dim: 24,
        heads: 4,
        kv_heads: 2,
        head_dim: 8,
        ffn: 40,
        layers: 2,
        clip: true,
        stored: Stored::F16,
    },
    SandwichCase {
        dim: 64,
        heads: 2,
        kv_heads: 2,
        head_dim: 32,
        ffn: 96,
        layers: 1,
        clip: false,
        stored: Stored::F32,
    },
];
