//! Whole encoder passes on the wgpu backend ([`Backend::run_encoder`]) against the CPU executor of
//! the same plan ([`oxinfer::plan::encoder::run_cpu`]), in the manner of the CUDA crate's
//! `backend_ops/encoder.rs`: random BERT-style encoders of several widths and head sizes (8 to
//! 256), with and without biases, plain and gated MLPs, f32 / f16 weights, rotary positions (half
//! and interleaved pairs, partial, a base per sequence length), pre-norm blocks with local windows
//! and a rotation per layer type (ModernBERT's), pre-norm blocks with each sequence's own 2-D grid
//! rotation rows (Qwen 3.5's vision tower), Gemma 4's vision tower's blocks (RMS sandwich norms,
//! per-head query / key / value norms, grouped-query heads, clamped projections, axial halves
//! rotation), a batch of sequences of different lengths (one of a single token), batches split
//! over several passes; the activations against
//! [`EncoderAct::apply`]; and the plans the device declines. Runs on the first wgpu adapter
//! (lavapipe in CI); without one it prints a `skipped:` line, and under `CI=true` it fails.

mod device;

use device::{backend, randoms, rel_err};
use oxinfer::backend::Backend;
use oxinfer::config::RopeStyle;
use oxinfer::nn::encoder_act::EncoderAct;
use oxinfer::plan::encoder::{run_cpu, EncoderPlan, NormOrder, RopeOf};
use oxinfer::plan::encoder_random::{
    build, build_sandwich, grid_rows, make_grid_pre_norm, make_pre_norm, norm, plan,
    pre_norm_ropes, rms_norm, rope, sandwich_plan, sandwich_rows, RandomCase as Case, Stored,
    GRID_CASES, PRE_NORM_CASES, SANDWICH_CASES,
};
use oxinfer_wgpu::WgpuBackend;

/// The batch of every case: sequences of 5, 1, 37, 130 and 64 tokens.
const LENS: [usize; 5] = [5, 1, 37, 130, 64];

/// Largest relative error (max |device − CPU| / max |CPU|) allowed for a whole pass.
const BOUND: f64 = 2e-5;

/// Deterministic values: each call a new seed for [`randoms`].
struct Seeds(u64);

impl Seeds {
    fn take(&mut self, n: usize, scale: f32) -> Vec<f32> {
        self.0 += 1;
        randoms(n, self.0, scale)
    }

    /// [`encoder_random`]'s source of random values.
    fn source(&mut self) -> impl FnMut(usize, f32) -> Vec<f32> + '_ {
        |n, scale| self.take(n, scale)
    }
}

/// `p` over random rows of `lens` on the device against the CPU: asserts it ran and is within
/// [`BOUND`], prints and returns the error.
fn check(b: &WgpuBackend, p: &EncoderPlan, lens: &[usize], s: &mut Seeds, what: &str) -> f64 {
    let t: usize = lens.iter().sum();
    let x = s.take(t * p.dim, 1.0);
    let cpu = run_cpu(p, x.clone(), lens);
    let mut dev = vec![f32::NAN; x.len()];
    assert!(
        b.run_encoder(p, &x, lens, &mut dev),
        "the device declined {what}"
    );
    let e = rel_err(&dev, &cpu);
    println!("{what}: rel err {e:.2e}");
    assert!(e <= BOUND, "{what}: differs from the CPU by {e}");
    e
}

#[test]
fn encoder_plan_matches_cpu() {
    let Some(b) = backend() else { return };
    let case = |dim, heads, ffn, layers, bias, gated, act, stored| Case {
        dim,
        heads,
        ffn,
        layers,
        bias,
        gated,
        act,
        stored,
    };
    use EncoderAct::*;
    let cases = [
        // all-MiniLM-L6-v2's geometry (two of its six layers).
        case(384, 12, 1536, 2, true, false, GeluErf, Stored::F32),
        case(128, 2, 320, 2, true, false, GeluTanh, Stored::F16),
        // NomicBERT's block without its rotary positions (below): no biases, SwiGLU.
        case(192, 3, 256, 2, false, true, Silu, Stored::F32),
        // The tiny test checkpoints' heads of 8.
        case(32, 4, 37, 2, true, false, GeluErf, Stored::F32),
        // Heads of 96, 128 and 256; a gated MLP with biases on the gate and up projections.
        case(192, 2, 200, 1, true, true, GeluTanh, Stored::F32),
        case(256, 2, 512, 1, true, false, Relu, Stored::F32),
        case(256, 1, 512, 1, true, false, Relu, Stored::F32),
    ];
    let mut s = Seeds(0x5eed);
    for c in &cases {
        let owned = build(c, &mut s.source());
        let p = plan(c, &owned);
        let what = format!(
            "encoder dim {} heads {}x{} ffn {} gated {} {:?} {:?}",
            c.dim,
            c.heads,
            c.dim / c.heads,
            c.ffn,
            c.gated,
            c.act,
            c.stored
        );
        check(&b, &p, &LENS, &mut s, &what);
        // A second pass of a smaller batch reuses the uploaded weights and scratch.
        check(&b, &p, &LENS[..1], &mut s, &format!("{what}, one sequence"));
    }
}

#[test]
fn encoder_plan_rotary_matches_cpu() {
    let Some(b) = backend() else { return };
    // NomicBERT's block (no biases, SwiGLU) with its rotary positions, heads of 64.
    let c = Case {
        dim: 192,
        heads: 3,
        ffn: 256,
        layers: 2,
        bias: false,
        gated: true,
        act: EncoderAct::Silu,
        stored: Stored::F32,
    };
    let mut s = Seeds(0x20ae);
    let owned = build(&c, &mut s.source());
    // Every pair rotated (transformers' rotate_half), a longer sequence with a base of its own
    // as dynamic NTK scaling gives one; then half the pairs, interleaved.
    let (short, long) = (
        rope(10_000.0, 64, RopeStyle::Half),
        rope(37_000.0, 64, RopeStyle::Half),
    );
    let partial = rope(10_000.0, 32, RopeStyle::Interleaved);
    let scaled = |n: usize| if n > 64 { &long } else { &short };
    let one = |_: usize| &partial;
    let cases = [
        (RopeOf::Positions(&scaled), "half, two bases by length"),
        (RopeOf::Positions(&one), "interleaved, 32 of 64"),
    ];
    for (rope_of, name) in cases {
        let mut p = plan(&c, &owned);
        p.layers.iter_mut().for_each(|l| l.rope_of = Some(rope_of));
        check(&b, &p, &LENS, &mut s, &format!("rotary encoder ({name})"));
    }
}

#[test]
fn encoder_plan_pre_norm_matches_cpu() {
    let Some(b) = backend() else { return };
    let mut s = Seeds(0x70de);
    // ModernBERT's blocks: pre-norm, a global layer then local ones, a rotation per layer type.
    for (c, window) in PRE_NORM_CASES {
        let (g_rope, l_rope) = pre_norm_ropes(&c);
        let owned = build(&c, &mut s.source());
        let final_norm = norm(&mut s.source(), c.dim);
        let (g_of, l_of) = (|_: usize| &g_rope, |_: usize| &l_rope);
        let mut p = plan(&c, &owned);
        let (g_of, l_of) = (RopeOf::Positions(&g_of), RopeOf::Positions(&l_of));
        make_pre_norm(&mut p, &final_norm, window, g_of, l_of);
        let what = format!(
            "pre-norm encoder dim {} heads {} window {window} {:?}",
            c.dim, c.heads, c.stored
        );
        check(&b, &p, &LENS, &mut s, &what);
    }
}

/// Qwen 3.5's vision tower's blocks: pre-norm with a final norm (its merger's), biases, a GELU
/// (tanh) MLP, each sequence's queries and keys rotated by its own 2-D grid rows.
#[test]
fn encoder_plan_grid_rotation_matches_cpu() {
    let Some(b) = backend() else { return };
    let mut s = Seeds(0x6121);
    for c in GRID_CASES {
        let owned = build(&c, &mut s.source());
        let final_norm = norm(&mut s.source(), c.dim);
        let rows = grid_rows(&c, &LENS);
        let mut p = plan(&c, &owned);
        make_grid_pre_norm(&mut p, &final_norm, &rows);
        let what = format!(
            "grid-rotated pre-norm encoder dim {} heads {}x{} {:?}",
            c.dim,
            c.heads,
            c.dim / c.heads,
            c.stored
        );
        check(&b, &p, &LENS, &mut s, &what);
        // Rows that do not fit the batch: declined, nothing written.
        let x = vec![0.5f32; 5 * c.dim];
        let mut out = vec![0f32; x.len()];
        assert!(!b.run_encoder(&p, &x, &[3, 2], &mut out));
        assert!(out.iter().all(|&v| v == 0.0), "a declined pass wrote");
    }
}

/// Gemma 4's vision tower's blocks: pre-norm RMS sandwich blocks without a final norm, per-head
/// RMS norms of the queries, keys and values, grouped-query heads (an attention wider than the
/// hidden state), scale 1, a gated GELU (tanh) MLP, clamped projections, each sequence rotated
/// by its own axial halves; the first case also post-norm and with a final RMSNorm.
#[test]
fn encoder_plan_sandwich_matches_cpu() {
    let Some(b) = backend() else { return };
    let mut s = Seeds(0x6e44);
    for (i, c) in SANDWICH_CASES.iter().enumerate() {
        let owned = build_sandwich(c, &mut s.source());
        let rows = sandwich_rows(c, &LENS);
        let mut p = sandwich_plan(c, &owned, &rows);
        let what = format!(
            "sandwich encoder dim {} heads {} over {} of {} clip {} {:?}",
            c.dim, c.heads, c.kv_heads, c.head_dim, c.clip, c.stored
        );
        check(&b, &p, &LENS, &mut s, &what);
        if i == 0 {
            let final_norm = rms_norm(&mut s.source(), c.dim);
            p.order = NormOrder::Pre {
                final_norm: Some((&final_norm).into()),
            };
            check(&b, &p, &LENS, &mut s, &format!("{what}, final RMSNorm"));
            p.order = NormOrder::Post;
            check(&b, &p, &LENS, &mut s, &format!("{what}, post-norm"));
            // Key/value heads that do not match their projections: declined, nothing written
            // (and an error, not a panic, from `encoder::run`).
            p.heads.n_kv_heads = c.heads;
            let x = vec![0.5f32; 5 * c.dim];
            let mut out = vec![0f32; x.len()];
            assert!(!b.run_encoder(&p, &x, &[3, 2], &mut out));
            assert!(out.iter().all(|&v| v == 0.0), "a declined pass wrote");
            assert!(p.check(&x, &[3, 2]).is_err());
        }
    }
}

/// A batch larger than one storage binding runs as several passes of whole sequences (the
/// binding limit lowered to 128 KiB: about 140 rows of this plan), each pass with its
/// sequences' own rotary rows; one sequence longer than a binding is declined.
#[test]
fn encoder_plan_splits_large_batches() {
    let Some(b) = backend() else { return };
    let b = b.with_max_binding(128 << 10);
    let c = Case {
        dim: 32,
        heads: 4,
        ffn: 37,
        layers: 2,
        bias: true,
        gated: false,
        act: EncoderAct::GeluErf,
        stored: Stored::F32,
    };
    let mut s = Seeds(0x5b11);
    let owned = build(&c, &mut s.source());
    let p = plan(&c, &owned);
    check(&b, &p, &LENS, &mut s, "encoder in three passes");
    // Pre-norm keeps one more row buffer (about 120 rows a pass): 43, 100 and 64 rows.
    let lens = [5usize, 1, 37, 100, 64];
    let final_norm = norm(&mut s.source(), c.dim);
    let rows = grid_rows(&c, &lens);
    let mut grid = plan(&c, &owned);
    make_grid_pre_norm(&mut grid, &final_norm, &rows);
    check(
        &b,
        &grid,
        &lens,
        &mut s,
        "grid-rotated encoder in three passes",
    );
    let long = [600usize];
    let x = vec![0.5f32; long[0] * c.dim];
    let mut out = vec![0f32; x.len()];
    assert!(!b.run_encoder(&p, &x, &long, &mut out));
    assert!(out.iter().all(|&v| v == 0.0), "a declined pass wrote");
}

#[test]
fn encoder_plan_declines_what_it_does_not_run() {
    let Some(b) = backend() else { return };
    let mut s = Seeds(7);
    let c = Case {
        dim: 288,
        heads: 1,
        ffn: 64,
        layers: 1,
        bias: true,
        gated: false,
        act: EncoderAct::GeluErf,
        stored: Stored::F32,
    };
    let owned = build(&c, &mut s.source());
    let x = vec![0.5f32; 3 * c.dim];
    let mut out = vec![0f32; x.len()];
    // Heads of 288: wider than the kernel's 256.
    assert!(!b.run_encoder(&plan(&c, &owned), &x, &[3], &mut out));
    let c = Case { dim: 64, ..c };
    let owned = build(&c, &mut s.source());
    let x = vec![0.5f32; 3 * c.dim];
    let mut out = vec![0f32; x.len()];
    // A post-norm block without its norm.
    let mut p = plan(&c, &owned);
    p.layers[0].attn_norm = None;
    assert!(!b.run_encoder(&p, &x, &[3], &mut out));
    // A pre-norm block past the first without its attention norm.
    let owned2 = build(&Case { layers: 2, ..c }, &mut s.source());
    let final_norm = norm(&mut s.source(), c.dim);
    let mut p = plan(&c, &owned2);
    p.order = NormOrder::Pre {
        final_norm: Some((&final_norm).into()),
    };
    p.layers[1].attn_norm = None;
    assert!(!b.run_encoder(&p, &x, &[3], &mut out));
    // Rotations of two widths in one batch: the CPU's.
    let (narrow, wide) = (
        rope(10_000.0, 16, RopeStyle::Half),
        rope(10_000.0, 32, RopeStyle::Half),
    );
    let mixed = |n: usize| if n > 2 { &wide } else { &narrow };
    let mut p = plan(&c, &owned);
    p.layers[0].rope_of = Some(RopeOf::Positions(&mixed));
    let x2 = vec![0.5f32; 5 * c.dim];
    let mut out2 = vec![0f32; x2.len()];
    assert!(!b.run_encoder(&p, &x2, &[3, 2], &mut out2));
    // On llvmpipe, attention past its 65,535 loop iterations per invocation (heads of 256 over
    // 1,800 keys): the kernel would stop early there.
    if b.adapter().contains("llvmpipe") {
        let c = Case {
            dim: 256,
            heads: 1,
            ..c
        };
        let owned = build(&c, &mut s.source());
        let x = vec![0.5f32; 1800 * c.dim];
        let mut long = vec![0f32; x.len()];
        assert!(!b.run_encoder(&plan(&c, &owned), &x, &[1800], &mut long));
        assert!(long.iter().all(|&v| v == 0.0), "a declined pass wrote");
    }
    assert!(
        out.iter().chain(&out2).all(|&v| v == 0.0),
        "a declined pass wrote"
    );
}

/// The activation kernel against [`EncoderAct::apply`] over [-10, 10] (GELU erf: the CPU's erf
/// approximation in WGSL): |device − CPU| ≤ 1e-6 · max(|CPU|, |x|). (Relative to |x|, not to
/// the value alone: where GELU's tails cancel, `1 + tanh` and `1 + erf` of f32 arguments keep
/// only the absolute precision of their f32 terms, on the CPU as on the device.)
#[test]
fn encoder_activations_match_cpu() {
    let Some(b) = backend() else { return };
    let x: Vec<f32> = (-100_000..=100_000).map(|i| i as f32 * 1e-4).collect();
    use EncoderAct::*;
    for act in [GeluErf, GeluTanh, Relu, Silu] {
        let dev = b.encoder_act(&x, act).expect("encoder_act");
        let (mut worst, mut at, mut abs) = (0f64, 0f32, 0f64);
        for (&v, &d) in x.iter().zip(&dev) {
            let cpu = f64::from(act.apply(v));
            abs = abs.max((f64::from(d) - cpu).abs());
            let e = (f64::from(d) - cpu).abs() / cpu.abs().max(f64::from(v.abs())).max(1e-30);
            if e > worst {
                (worst, at) = (e, v);
            }
        }
        println!("{act:?}: max err {worst:.2e} of max(|y|, |x|) (at x = {at}), max abs {abs:.2e}");
        assert!(worst <= 1e-6, "{act:?}: {worst} at x = {at}");
    }
}
