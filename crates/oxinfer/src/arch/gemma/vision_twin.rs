//! The vision tower's encoder layers as they ran before they became an [`EncoderPlan`] (a host
//! loop of per-op calls: clipped linears, the axial rotation table of its own, the shared full
//! attention), kept as the twin of the plan path and compared with it on random patches.
//!
//! [`EncoderPlan`]: crate::plan::encoder::EncoderPlan

use super::*;
use crate::arch::gemma::clipped::ClippedLinear;
use crate::loader::safetensors::SafetensorsModel;
use crate::nn::full_attention::attention_full;
use crate::nn::mlp::apply_gated;
use crate::nn::AttnShape;
use oxinfer_kernels::act::GateAct;
use std::path::Path;

/// One layer's weights as the host loop held them.
struct HostLayer {
    input_norm: RmsNorm,
    q: ClippedLinear,
    k: ClippedLinear,
    v: ClippedLinear,
    o: ClippedLinear,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    post_attn_norm: RmsNorm,
    pre_ffn_norm: RmsNorm,
    gate: ClippedLinear,
    up: ClippedLinear,
    down: ClippedLinear,
    post_ffn_norm: RmsNorm,
}

impl HostLayer {
    fn load(store: &dyn TensorStore, cfg: &VisionConfig, p: &str) -> Self {
        let (d, hd) = (cfg.hidden, cfg.head_dim);
        let norm = |name: &str, dim| {
            RmsNorm::load(store, &format!("{p}{name}.weight"), dim, cfg.eps, false).unwrap()
        };
        let lin = |part: &str, o, n| ClippedLinear::load(store, &format!("{p}{part}"), o, n);
        let lin = |part: &str, o, n| lin(part, o, n).unwrap();
        HostLayer {
            input_norm: norm("input_layernorm", d),
            q: lin("self_attn.q_proj", cfg.heads * hd, d),
            k: lin("self_attn.k_proj", cfg.kv_heads * hd, d),
            v: lin("self_attn.v_proj", cfg.kv_heads * hd, d),
            o: lin("self_attn.o_proj", d, cfg.heads * hd),
            q_norm: norm("self_attn.q_norm", hd),
            k_norm: norm("self_attn.k_norm", hd),
            post_attn_norm: norm("post_attention_layernorm", d),
            pre_ffn_norm: norm("pre_feedforward_layernorm", d),
            gate: lin("mlp.gate_proj", cfg.ffn, d),
            up: lin("mlp.up_proj", cfg.ffn, d),
            down: lin("mlp.down_proj", d, cfg.ffn),
            post_ffn_norm: norm("post_feedforward_layernorm", d),
        }
    }

    /// The former `VisionTower::layer`.
    fn forward(&self, c: &VisionConfig, x: &mut [f32], n: usize, rope: &AxialRope) {
        let l = self;
        let v_norm = RmsNorm {
            weight: vec![1.0; c.head_dim],
            eps: c.eps,
        };
        let h = l.input_norm.forward(x);
        let mut q = l.q.forward(&h, n);
        let mut k = l.k.forward(&h, n);
        let mut v = l.v.forward(&h, n);
        l.q_norm.forward_inplace(&mut q);
        l.k_norm.forward_inplace(&mut k);
        v_norm.forward_inplace(&mut v);
        rope.apply(&mut q, c.heads);
        rope.apply(&mut k, c.kv_heads);
        let shape = AttnShape {
            n_heads: c.heads,
            n_kv_heads: c.kv_heads,
            head_dim: c.head_dim,
            scale: 1.0,
            window: None,
            softcap: None,
        };
        let a = attention_full(&q, &k, &v, n, &shape);
        let mut a = l.o.forward(&a, n);
        l.post_attn_norm.forward_inplace(&mut a);
        x.iter_mut().zip(&a).for_each(|(x, a)| *x += a);
        let h = l.pre_ffn_norm.forward(x);
        let mut g = l.gate.forward(&h, n);
        let u = l.up.forward(&h, n);
        apply_gated(GateAct::GeluTanh, &mut g, &u);
        let mut m = l.down.forward(&g, n);
        l.post_ffn_norm.forward_inplace(&mut m);
        x.iter_mut().zip(&m).for_each(|(x, m)| *x += m);
    }
}

/// 2-D axial rotary tables of a patch grid: per patch, the angles of the column (first half of
/// each head) and of the row (second half); each half rotates its two quarters (`rotate_half`).
struct AxialRope {
    head_dim: usize,
    /// `[n, head_dim / 2]`: cos of the column angles then of the row angles, per frequency.
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl AxialRope {
    fn new(head_dim: usize, theta: f64, rows: usize, cols: usize) -> Self {
        let half = head_dim / 2;
        let q = half / 2;
        let inv: Vec<f32> = (0..q)
            .map(|i| (1.0 / theta.powf((2 * i) as f64 / half as f64)) as f32)
            .collect();
        let n = rows * cols;
        let (mut cos, mut sin) = (Vec::with_capacity(n * half), Vec::with_capacity(n * half));
        for i in 0..n {
            for pos in [(i % cols) as f32, (i / cols) as f32] {
                for f in &inv {
                    let a = pos * f;
                    cos.push(a.cos());
                    sin.push(a.sin());
                }
            }
        }
        AxialRope { head_dim, cos, sin }
    }

    /// Rotates `x` `[n, heads · head_dim]` in place.
    fn apply(&self, x: &mut [f32], heads: usize) {
        let (hd, half) = (self.head_dim, self.head_dim / 2);
        let q = half / 2;
        for (i, row) in x.chunks_exact_mut(heads * hd).enumerate() {
            let (cos, sin) = (
                &self.cos[i * half..(i + 1) * half],
                &self.sin[i * half..(i + 1) * half],
            );
            for head in row.chunks_exact_mut(hd) {
                for (part, chunk) in head.chunks_exact_mut(half).enumerate() {
                    for j in 0..q {
                        let (c, s) = (cos[part * q + j], sin[part * q + j]);
                        let (a, b) = (chunk[j], chunk[j + q]);
                        chunk[j] = a * c - b * s;
                        chunk[j + q] = b * c + a * s;
                    }
                }
            }
        }
    }
}

/// The tiny fixture's encoder layers as one plan against the host loop above, over random
/// embedded patches of a 6 × 9 grid (grouped-query heads, clamped projections, sandwich norms).
#[test]
fn the_blocks_plan_matches_the_host_loop() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny_gemma4_mm");
    let store = SafetensorsModel::open(&dir).unwrap();
    let json: Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    let err = |what| LoadError::Field {
        path: dir.clone(),
        what,
    };
    let cfg = VisionConfig::from_json(&json["vision_config"], &err).unwrap();
    let text_hidden = json["text_config"]["hidden_size"].as_u64().unwrap() as usize;
    let prefix = "model.vision_tower.";
    let tower = VisionTower::load(
        &store,
        cfg.clone(),
        prefix,
        "model.embed_vision",
        text_hidden,
    )
    .unwrap();
    let (rows, cols) = (6, 9);
    let (d, n) = (cfg.hidden, rows * cols);
    let mut seed = 0x9e37_79b9u32;
    let x: Vec<f32> = (0..n * d)
        .map(|_| {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            2.0 * ((seed >> 8) as f32 / (1 << 23) as f32 - 1.0)
        })
        .collect();
    let plan = tower.blocks(x.clone(), rows, cols).unwrap();
    let rope = AxialRope::new(cfg.head_dim, cfg.rope_theta, rows, cols);
    let mut host = x;
    for i in 0..cfg.layers {
        let layer = HostLayer::load(&store, &cfg, &format!("{prefix}encoder.layers.{i}."));
        layer.forward(&cfg, &mut host, n, &rope);
    }
    let diff = plan
        .iter()
        .zip(&host)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let top = host.iter().fold(0f32, |m, v| m.max(v.abs()));
    println!("Gemma 4 vision blocks plan against the host loop: max diff {diff:e} (max |x| {top})");
    assert!(
        diff <= 1e-5 * top.max(1.0),
        "the plan differs from the host loop by {diff}"
    );
    // The plan's rotation is the host loop's table, bit for bit.
    let rows_table = RopeRows::axial_halves(
        cfg.head_dim,
        cfg.rope_theta,
        (0..n).map(|i| (i / cols, i % cols)),
    );
    assert_eq!(rows_table.cos(), &rope.cos[..]);
    assert_eq!(rows_table.sin(), &rope.sin[..]);
}
