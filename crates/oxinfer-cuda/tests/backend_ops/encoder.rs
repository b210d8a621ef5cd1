//! Whole encoder passes on the device ([`Backend::run_encoder`]) against the CPU executor of the
//! same plan ([`oxinfer::plan::encoder::run_cpu`]): random BERT-style encoders of several widths
//! and head sizes, with and without biases, plain and gated MLPs, f32 / f16 weights, rotary
//! positions (half and interleaved pairs, a base per sequence length), pre-norm blocks with
//! local windows and a rotation per layer type (ModernBERT's), pre-norm blocks with each
//! sequence's own 2-D grid rotation rows (Qwen 3.5's vision tower, heads of 72 and 8), Gemma 4's
//! vision tower's blocks (RMS sandwich norms, per-head query / key / value norms, grouped-query
//! heads, clamped projections, axial halves rotation), a batch of sequences of different lengths
//! (one of a single token).

use super::{gpu, rel_err, Rng};
use oxinfer::backend::Backend;
use oxinfer::nn::encoder_act::EncoderAct;
use oxinfer::plan::encoder::{run_cpu, NormOrder, RopeOf};
use oxinfer::plan::encoder_random::{
    build, build_sandwich, grid_rows, make_grid_pre_norm, make_pre_norm, norm, plan,
    pre_norm_ropes, rms_norm, rope, sandwich_plan, sandwich_rows, RandomCase as Case,
    RandomLayer as Owned, Stored, GRID_CASES, PRE_NORM_CASES, SANDWICH_CASES,
};
use oxinfer_cuda::QuantPath;

/// [`encoder_random`]'s source of random values, drawn from `rng`.
fn take(rng: &mut Rng) -> impl FnMut(usize, f32) -> Vec<f32> + '_ {
    |n, scale| (0..n).map(|_| rng.f() * scale).collect()
}

/// Random rows for sequences of lengths `lens` through plan `p` on the device and on the CPU:
/// the device must run it (`declined` says what it declined otherwise) and agree within 2e-5
/// (relative); prints `label` and the error.
fn assert_matches_cpu(
    b: &oxinfer_cuda::CudaBackend,
    p: &oxinfer::plan::encoder::EncoderPlan,
    lens: &[usize],
    rng: &mut Rng,
    declined: &str,
    label: &str,
) -> Vec<f32> {
    let t: usize = lens.iter().sum();
    let x: Vec<f32> = (0..t * p.dim).map(|_| rng.f()).collect();
    let cpu = run_cpu(p, x.clone(), lens);
    let mut dev = vec![f32::NAN; x.len()];
    assert!(
        b.run_encoder(p, &x, lens, &mut dev),
        "the device declined {declined}"
    );
    let e = rel_err(&dev, &cpu);
    println!("{label}: rel err {e:.2e}");
    assert!(e <= 2e-5, "{label}: the device differs from the CPU by {e}");
    x
}

#[test]
fn encoder_plan_matches_cpu() {
    let Some(b) = gpu(QuantPath::DequantCublas) else {
        return;
    };
    let lens = [5usize, 1, 37, 130, 64];
    let cases = [
        // all-MiniLM-L6-v2's geometry (two of its six layers).
        Case {
            dim: 384,
            heads: 12,
            ffn: 1536,
            layers: 2,
            bias: true,
            gated: false,
            act: EncoderAct::GeluErf,
            stored: Stored::F32,
        },
        Case {
            dim: 128,
            heads: 2,
            ffn: 320,
            layers: 2,
            bias: true,
            gated: false,
            act: EncoderAct::GeluTanh,
            stored: Stored::F16,
        },
        // NomicBERT's block without its rotary positions (below): no biases, SwiGLU.
        Case {
            dim: 192,
            heads: 2,
            ffn: 256,
            layers: 2,
            bias: false,
            gated: true,
            act: EncoderAct::Silu,
            stored: Stored::F32,
        },
        // A gated MLP with biases on its gate and up projections.
        Case {
            dim: 128,
            heads: 2,
            ffn: 192,
            layers: 1,
            bias: true,
            gated: true,
            act: EncoderAct::GeluTanh,
            stored: Stored::F32,
        },
        // Heads of 48: the kernel of 64 with its second element idle past the head.
        Case {
            dim: 96,
            heads: 2,
            ffn: 64,
            layers: 1,
            bias: true,
            gated: false,
            act: EncoderAct::GeluErf,
            stored: Stored::F32,
        },
        // The tiny test checkpoints' heads of 8 (the kernel of 32, lanes past 8 idle).
        Case {
            dim: 32,
            heads: 4,
            ffn: 37,
            layers: 2,
            bias: true,
            gated: false,
            act: EncoderAct::GeluErf,
            stored: Stored::F32,
        },
        Case {
            dim: 256,
            heads: 1,
            ffn: 512,
            layers: 1,
            bias: true,
            gated: false,
            act: EncoderAct::Relu,
            stored: Stored::F32,
        },
    ];
    let mut rng = Rng(0x5eed_e4c0);
    for c in &cases {
        let owned = build(c, &mut take(&mut rng));
        let p = plan(c, &owned);
        let declined = format!("{} × {} heads", c.heads, c.dim / c.heads);
        let label = format!(
            "encoder dim {} heads {} ffn {} gated {} {:?} {:?}",
            c.dim, c.heads, c.ffn, c.gated, c.act, c.stored
        );
        let x = assert_matches_cpu(&b, &p, &lens, &mut rng, &declined, &label);
        // A second pass of a smaller batch reuses the uploaded weights and scratch.
        let mut one = vec![f32::NAN; lens[0] * c.dim];
        assert!(b.run_encoder(&p, &x[..one.len()], &lens[..1], &mut one));
        let cpu_one = run_cpu(&p, x[..one.len()].to_vec(), &lens[..1]);
        assert!(rel_err(&one, &cpu_one) <= 2e-5);
    }
}

#[test]
fn encoder_plan_rotary_matches_cpu() {
    use oxinfer::config::RopeStyle;
    let Some(b) = gpu(QuantPath::DequantCublas) else {
        return;
    };
    let lens = [5usize, 1, 37, 130, 64];
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
    let mut rng = Rng(0x20ae_0001);
    let owned = build(&c, &mut take(&mut rng));
    // Every pair rotated (transformers' rotate_half), a longer sequence with a base of its
    // own as dynamic NTK scaling gives one; then half the pairs, interleaved.
    let (short, long) = (
        rope(10_000.0, 64, RopeStyle::Half),
        rope(37_000.0, 64, RopeStyle::Half),
    );
    let partial = rope(10_000.0, 32, RopeStyle::Interleaved);
    let scaled = |n: usize| if n > 64 { &long } else { &short };
    let one = |_: usize| &partial;
    let (scaled, one) = (RopeOf::Positions(&scaled), RopeOf::Positions(&one));
    rotary_case(&b, &c, &owned, scaled, "half, two bases", &lens, &mut rng);
    rotary_case(
        &b,
        &c,
        &owned,
        one,
        "interleaved, 32 of 64",
        &lens,
        &mut rng,
    );
}

/// Case `c` with rotations `rope_of` on the device against the CPU.
fn rotary_case<'a>(
    b: &oxinfer_cuda::CudaBackend,
    c: &Case,
    owned: &'a [Owned],
    rope_of: RopeOf<'a>,
    name: &str,
    lens: &[usize],
    rng: &mut Rng,
) {
    let mut p = plan(c, owned);
    p.layers.iter_mut().for_each(|l| l.rope_of = Some(rope_of));
    let label = format!("rotary encoder ({name})");
    assert_matches_cpu(b, &p, lens, rng, name, &label);
}

#[test]
fn encoder_plan_declines_what_it_does_not_run() {
    use oxinfer::config::RopeStyle;
    let Some(b) = gpu(QuantPath::DequantCublas) else {
        return;
    };
    let mut rng = Rng(7);
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
    let owned = build(&c, &mut take(&mut rng));
    let x = vec![0.5f32; 3 * c.dim];
    let mut out = vec![0f32; x.len()];
    // Heads of 288: wider than the widest kernel's 256.
    assert!(!b.run_encoder(&plan(&c, &owned), &x, &[3], &mut out));
    let c = Case { dim: 64, ..c };
    let owned = build(&c, &mut take(&mut rng));
    let x = vec![0.5f32; 3 * c.dim];
    // A post-norm block without its norm.
    let mut p = plan(&c, &owned);
    p.layers[0].attn_norm = None;
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
    assert!(
        out.iter().chain(&out2).all(|&v| v == 0.0),
        "a declined pass wrote"
    );
}

#[test]
fn encoder_plan_pre_norm_matches_cpu() {
    let Some(b) = gpu(QuantPath::DequantCublas) else {
        return;
    };
    let lens = [5usize, 1, 37, 130, 64];
    let mut rng = Rng(0x70de_4e5f);
    // ModernBERT's blocks: pre-norm, a global layer then local ones, a rotation per layer type.
    for (c, window) in PRE_NORM_CASES {
        let (g_rope, l_rope) = pre_norm_ropes(&c);
        let owned = build(&c, &mut take(&mut rng));
        let final_norm = norm(&mut take(&mut rng), c.dim);
        let (g_of, l_of) = (|_: usize| &g_rope, |_: usize| &l_rope);
        let mut p = plan(&c, &owned);
        let (g_of, l_of) = (RopeOf::Positions(&g_of), RopeOf::Positions(&l_of));
        make_pre_norm(&mut p, &final_norm, window, g_of, l_of);
        let declined = format!("the pre-norm plan of dim {}", c.dim);
        let label = format!(
            "pre-norm encoder dim {} heads {} window {window} {:?}",
            c.dim, c.heads, c.stored
        );
        assert_matches_cpu(&b, &p, &lens, &mut rng, &declined, &label);
    }
}

#[test]
fn encoder_plan_grid_rotation_matches_cpu() {
    let Some(b) = gpu(QuantPath::DequantCublas) else {
        return;
    };
    let lens = [5usize, 1, 37, 130, 64];
    let mut rng = Rng(0x6121_0001);
    // Qwen 3.5's vision tower's blocks: pre-norm with a final norm (its merger's), biases, a
    // GELU (tanh) MLP, each sequence rotated by its own 2-D grid rows.
    for c in GRID_CASES {
        let owned = build(&c, &mut take(&mut rng));
        let final_norm = norm(&mut take(&mut rng), c.dim);
        let rows = grid_rows(&c, &lens);
        let mut p = plan(&c, &owned);
        make_grid_pre_norm(&mut p, &final_norm, &rows);
        let hd = c.dim / c.heads;
        let declined = format!("the grid-rotated plan with heads of {hd}");
        let label = format!(
            "grid-rotated pre-norm encoder dim {} heads {}x{hd} {:?}",
            c.dim, c.heads, c.stored
        );
        let x = assert_matches_cpu(&b, &p, &lens, &mut rng, &declined, &label);
        // Rows that do not fit the batch: declined, nothing written.
        let mut out = vec![0f32; 5 * c.dim];
        assert!(!b.run_encoder(&p, &x[..out.len()], &[3, 2], &mut out));
        assert!(out.iter().all(|&v| v == 0.0), "a declined pass wrote");
    }
}

/// Gemma 4's vision tower's blocks: pre-norm RMS sandwich blocks without a final norm, per-head
/// RMS norms of the queries, keys and values, grouped-query heads (an attention wider than the
/// hidden state), scale 1, a gated GELU (tanh) MLP, clamped projections, each sequence rotated
/// by its own axial halves; the first case also with a final RMSNorm and post-norm.
#[test]
fn encoder_plan_sandwich_matches_cpu() {
    let Some(b) = gpu(QuantPath::DequantCublas) else {
        return;
    };
    let lens = [5usize, 1, 37, 130, 64];
    let mut rng = Rng(0x6e44_0001);
    for (i, c) in SANDWICH_CASES.iter().enumerate() {
        let owned = build_sandwich(c, &mut take(&mut rng));
        let rows = sandwich_rows(c, &lens);
        let mut p = sandwich_plan(c, &owned, &rows);
        let declined = format!("the sandwich plan of dim {}", c.dim);
        let label = format!(
            "sandwich encoder dim {} heads {} over {} of {} clip {} {:?}",
            c.dim, c.heads, c.kv_heads, c.head_dim, c.clip, c.stored
        );
        assert_matches_cpu(&b, &p, &lens, &mut rng, &declined, &label);
        if i == 0 {
            let final_norm = rms_norm(&mut take(&mut rng), c.dim);
            p.order = NormOrder::Pre {
                final_norm: Some((&final_norm).into()),
            };
            let label = format!("{label}, final RMSNorm");
            assert_matches_cpu(&b, &p, &lens, &mut rng, &declined, &label);
            p.order = NormOrder::Post;
            let label = format!("{label}, post-norm");
            assert_matches_cpu(&b, &p, &lens, &mut rng, &declined, &label);
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
