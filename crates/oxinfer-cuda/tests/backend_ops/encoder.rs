//! Whole encoder passes on the device ([`Backend::run_encoder`]) against the CPU executor of the
//! same plan ([`oxinfer::plan::encoder::run_cpu`]): random BERT-style encoders of several widths
//! and head sizes, with and without biases, plain and gated MLPs, f32 / f16 weights, rotary
//! positions (half and interleaved pairs, a base per sequence length), pre-norm blocks with
//! local windows and a rotation per layer type (ModernBERT's), a batch of sequences of different
//! lengths (one of a single token).

use super::{gpu, rel_err, Rng};
use half::f16;
use oxinfer::backend::Backend;
use oxinfer::mapped::TensorView;
use oxinfer::nn::encoder_act::EncoderAct;
use oxinfer::nn::encoder_attention::EncoderHeads;
use oxinfer::nn::encoder_linear::EncoderLinear;
use oxinfer::nn::{LayerNorm, Linear, Rope};
use oxinfer::plan::encoder::{run_cpu, EncoderLayer, EncoderPlan, NormOrder, RopeOf};
use oxinfer_cuda::QuantPath;
use oxinfer_kernels::WeightFormat;
use std::path::Path;

/// How the random weights are stored.
#[derive(Clone, Copy, Debug)]
enum Stored {
    F32,
    F16,
}

/// A random `[n_out, n_in]` projection (weights of std ≈ 1/√n_in), with a bias when `bias`.
fn linear(rng: &mut Rng, n_out: usize, n_in: usize, bias: bool, stored: Stored) -> EncoderLinear {
    let s = 1.7 / (n_in as f32).sqrt();
    let w: Vec<f32> = (0..n_out * n_in).map(|_| rng.f() * s).collect();
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
    let b = bias.then(|| (0..n_out).map(|_| rng.f() * 0.1).collect());
    EncoderLinear::from_linear(Linear::from_view(view, b).expect("a valid matrix"))
}

/// A random LayerNorm of `dim` (gains near 1).
fn norm(rng: &mut Rng, dim: usize) -> LayerNorm {
    LayerNorm {
        weight: (0..dim).map(|_| 1.0 + 0.2 * rng.f()).collect(),
        bias: (0..dim).map(|_| 0.1 * rng.f()).collect(),
        eps: 1e-12,
    }
}

/// One layer's owned parts.
struct Owned {
    q: EncoderLinear,
    k: EncoderLinear,
    v: EncoderLinear,
    o: EncoderLinear,
    attn_norm: LayerNorm,
    gate: Option<EncoderLinear>,
    up: EncoderLinear,
    down: EncoderLinear,
    ffn_norm: LayerNorm,
}

struct Case {
    dim: usize,
    heads: usize,
    ffn: usize,
    layers: usize,
    bias: bool,
    gated: bool,
    act: EncoderAct,
    stored: Stored,
}

fn build(c: &Case, rng: &mut Rng) -> Vec<Owned> {
    let (d, f, b, st) = (c.dim, c.ffn, c.bias, c.stored);
    (0..c.layers)
        .map(|_| Owned {
            q: linear(rng, d, d, b, st),
            k: linear(rng, d, d, b, st),
            v: linear(rng, d, d, b, st),
            o: linear(rng, d, d, b, st),
            attn_norm: norm(rng, d),
            gate: c.gated.then(|| linear(rng, f, d, b, st)),
            up: linear(rng, f, d, b, st),
            down: linear(rng, d, f, b, st),
            ffn_norm: norm(rng, d),
        })
        .collect()
}

fn plan<'a>(c: &Case, owned: &'a [Owned]) -> EncoderPlan<'a> {
    EncoderPlan {
        layers: owned
            .iter()
            .map(|l| EncoderLayer {
                q: &l.q,
                k: &l.k,
                v: &l.v,
                o: &l.o,
                attn_norm: Some(&l.attn_norm),
                window: None,
                rope_of: None,
                gate: l.gate.as_ref(),
                up: &l.up,
                down: &l.down,
                ffn_norm: &l.ffn_norm,
            })
            .collect(),
        order: NormOrder::Post,
        heads: EncoderHeads {
            n_heads: c.heads,
            head_dim: c.dim / c.heads,
            scale: 1.0 / ((c.dim / c.heads) as f32).sqrt(),
            window: None,
        },
        act: c.act,
        dim: c.dim,
    }
}

#[test]
fn encoder_plan_matches_cpu() {
    let Some(b) = gpu(QuantPath::DequantCublas) else {
        return;
    };
    let lens = [5usize, 1, 37, 130, 64];
    let t: usize = lens.iter().sum();
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
        // The tiny test checkpoints' heads of 8 (the narrow kernel).
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
        let owned = build(c, &mut rng);
        let p = plan(c, &owned);
        let x: Vec<f32> = (0..t * c.dim).map(|_| rng.f()).collect();
        let cpu = run_cpu(&p, x.clone(), &lens);
        let mut dev = vec![f32::NAN; x.len()];
        assert!(
            b.run_encoder(&p, &x, &lens, &mut dev),
            "the device declined {} × {} heads",
            c.heads,
            c.dim / c.heads
        );
        let e = rel_err(&dev, &cpu);
        println!(
            "encoder dim {} heads {} ffn {} gated {} {:?} {:?}: rel err {e:.2e}",
            c.dim, c.heads, c.ffn, c.gated, c.act, c.stored
        );
        assert!(e <= 2e-5, "encoder pass differs from the CPU by {e}");
        // A second pass of a smaller batch reuses the uploaded weights and scratch.
        let mut one = vec![f32::NAN; lens[0] * c.dim];
        assert!(b.run_encoder(&p, &x[..one.len()], &lens[..1], &mut one));
        let cpu_one = run_cpu(&p, x[..one.len()].to_vec(), &lens[..1]);
        assert!(rel_err(&one, &cpu_one) <= 2e-5);
    }
}

/// A rotation of `dim` of a head's dimensions with base `theta`.
fn rope(theta: f32, dim: usize, style: oxinfer::config::RopeStyle) -> Rope {
    Rope::new(
        &oxinfer::config::RopeConfig {
            theta,
            dim,
            style,
            scaling: oxinfer::config::RopeScaling::None,
        },
        None,
    )
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
    let owned = build(&c, &mut rng);
    // Every pair rotated (transformers' rotate_half), a longer sequence with a base of its
    // own as dynamic NTK scaling gives one; then half the pairs, interleaved.
    let (short, long) = (
        rope(10_000.0, 64, RopeStyle::Half),
        rope(37_000.0, 64, RopeStyle::Half),
    );
    let partial = rope(10_000.0, 32, RopeStyle::Interleaved);
    let scaled = |n: usize| if n > 64 { &long } else { &short };
    let one = |_: usize| &partial;
    rotary_case(&b, &c, &owned, &scaled, "half, two bases", &lens, &mut rng);
    rotary_case(
        &b,
        &c,
        &owned,
        &one,
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
    let t: usize = lens.iter().sum();
    let mut p = plan(c, owned);
    p.layers.iter_mut().for_each(|l| l.rope_of = Some(rope_of));
    let x: Vec<f32> = (0..t * c.dim).map(|_| rng.f()).collect();
    let cpu = run_cpu(&p, x.clone(), lens);
    let mut dev = vec![f32::NAN; x.len()];
    assert!(
        b.run_encoder(&p, &x, lens, &mut dev),
        "the device declined {name}"
    );
    let e = rel_err(&dev, &cpu);
    println!("rotary encoder ({name}): rel err {e:.2e}");
    assert!(
        e <= 2e-5,
        "rotary encoder pass ({name}) differs from the CPU by {e}"
    );
}

#[test]
fn encoder_plan_declines_what_it_does_not_run() {
    use oxinfer::config::RopeStyle;
    let Some(b) = gpu(QuantPath::DequantCublas) else {
        return;
    };
    let mut rng = Rng(7);
    let c = Case {
        dim: 96,
        heads: 2,
        ffn: 64,
        layers: 1,
        bias: true,
        gated: false,
        act: EncoderAct::GeluErf,
        stored: Stored::F32,
    };
    let owned = build(&c, &mut rng);
    let x = vec![0.5f32; 3 * c.dim];
    let mut out = vec![0f32; x.len()];
    // Heads of 48: no kernel.
    assert!(!b.run_encoder(&plan(&c, &owned), &x, &[3], &mut out));
    let c = Case { dim: 64, ..c };
    let owned = build(&c, &mut rng);
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
    p.layers[0].rope_of = Some(&mixed);
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
    use oxinfer::config::RopeStyle;
    let Some(b) = gpu(QuantPath::DequantCublas) else {
        return;
    };
    let lens = [5usize, 1, 37, 130, 64];
    let t: usize = lens.iter().sum();
    let global = rope(160_000.0, 64, RopeStyle::Half);
    let local = rope(10_000.0, 64, RopeStyle::Half);
    let (global_8, local_8) = (
        rope(160_000.0, 8, RopeStyle::Half),
        rope(10_000.0, 8, RopeStyle::Half),
    );
    // ModernBERT's blocks: GeGLU (GELU erf) without biases, a global layer then local ones
    // (windows of 64 / 2 and, for the tiny checkpoints' heads of 8, 8 / 2), each layer type
    // with its own base; heads of 64 (modernbert-base) and of 8.
    let cases = [
        (
            Case {
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
            (&global, &local),
        ),
        (
            Case {
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
            (&global_8, &local_8),
        ),
    ];
    let mut rng = Rng(0x70de_4e5f);
    for (c, window, (g_rope, l_rope)) in cases {
        let owned = build(&c, &mut rng);
        let final_norm = norm(&mut rng, c.dim);
        let (g_of, l_of) = (|_: usize| g_rope, |_: usize| l_rope);
        let mut p = plan(&c, &owned);
        p.order = NormOrder::Pre {
            final_norm: &final_norm,
        };
        for (i, l) in p.layers.iter_mut().enumerate() {
            let is_global = i % 3 == 0;
            l.window = (!is_global).then_some(window);
            let rope_of: RopeOf = if is_global { &g_of } else { &l_of };
            l.rope_of = Some(rope_of);
        }
        p.layers[0].attn_norm = None;
        let x: Vec<f32> = (0..t * c.dim).map(|_| rng.f()).collect();
        let cpu = run_cpu(&p, x.clone(), &lens);
        let mut dev = vec![f32::NAN; x.len()];
        assert!(
            b.run_encoder(&p, &x, &lens, &mut dev),
            "the device declined the pre-norm plan of dim {}",
            c.dim
        );
        let e = rel_err(&dev, &cpu);
        println!(
            "pre-norm encoder dim {} heads {} window {window} {:?}: rel err {e:.2e}",
            c.dim, c.heads, c.stored
        );
        assert!(
            e <= 2e-5,
            "pre-norm encoder pass differs from the CPU by {e}"
        );
    }
}
