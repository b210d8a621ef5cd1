//! A whole model plan on the device against the CPU executor (the body of the `plan_*` tests in
//! backend_ops.rs): prefill of two sequences, the scored pass, then decode (decode.rs).

use super::{decode, gpu, random_weights, rel_err, Rng};
use half::f16;
use oxinfer_cuda::{CudaBackend, QuantPath};
use oxinfer_kernels::WeightFormat;

/// The weights of [`plan_case`]'s model.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum PlanWeights {
    /// Every matrix F16.
    F16,
    /// Q4_K (layer 0) and Q4_1 (layer 1) projections, Q8_0 values and head, Q6_K down.
    Quantized,
    /// IQ4_XS (layer 0) and IQ2_XXS (layer 1) projections, IQ4_NL values, IQ3_S down, MXFP4 head.
    Iq,
    /// The value projection in another format than the query's and key's, as llama.cpp's
    /// mixes store it (one-row GEMV launches then take the pair's mixed kernel): Q4_K with Q6_K
    /// values and Q4_K down (layer 0), Q5_0 with Q8_0 values and Q4_1 down (layer 1); Q8_0
    /// head.
    Mixes,
}

impl PlanWeights {
    /// Formats of: layer 0's projections, layer 1's, layer 0's values, layer 1's values, layer
    /// 0's down projection, layer 1's, the head.
    fn formats(self) -> [WeightFormat; 7] {
        use WeightFormat::*;
        match self {
            PlanWeights::F16 => [F16; 7],
            PlanWeights::Quantized => [Q4K, Q4_1, Q8_0, Q8_0, Q6K, Q6K, Q8_0],
            PlanWeights::Iq => [IQ4_XS, IQ2_XXS, IQ4_NL, IQ4_NL, IQ3_S, IQ3_S, MXFP4],
            PlanWeights::Mixes => [Q4K, Q5_0, Q6K, Q8_0, Q4K, Q4_1, Q8_0],
        }
    }
}

/// The plan of backend_ops.rs's `plan_*` tests with `weights`, every KV cache (host and device)
/// storing keys and values as `kv`.
pub(crate) fn plan_case(weights: PlanWeights, kv: oxinfer::plan::KvType) {
    let [f0, f1, fv0, fv1, fdown0, fdown1, fhead] = weights.formats();
    use oxinfer::config::{RopeConfig, RopeScaling, RopeStyle};
    use oxinfer::loader::TensorView;
    use oxinfer::nn::SelfAttention;
    use oxinfer::nn::{AttentionShape, Embedding, GateAct, GatedMlp, Linear, RmsNorm, Rope};
    use oxinfer::plan::{cpu, AttnSpec, Ffn, KvCache, KvTypes, Layer, Mixer, Plan, SeqRows};
    let types = KvTypes { k: kv, v: kv };
    // Without a GPU the CPU executor's own sensitivity is still computed (and printed).
    let b = gpu(QuantPath::DequantCublas);
    let mut rng = Rng(0x57AC_0000_0000_0001);
    let (dim, heads, kv_heads, hd, ffn, vocab, n_layers) = (256, 4, 2, 64, 512, 320, 2);
    let (q_row, kv_row) = (heads * hd, kv_heads * hd);
    // K-quant (and IQ4_XS, IQ3_S) super-block scales divided by 64 so weights stay near the
    // 32-block formats' magnitudes (random 6/8-bit sub-block scales otherwise make weights up to
    // ~50 and the MLP intermediates overflow f16 past the first layer, which no real model comes
    // near).
    let mut lin = |f: WeightFormat, rows: usize, cols: usize, bias: Option<Vec<f32>>| {
        let mut data = random_weights(f, rows, cols, &mut rng);
        if f == WeightFormat::F16 {
            // Weights of ~0.06 keep activations in a real model's range.
            for v in data.chunks_exact_mut(2) {
                let w = f16::from_le_bytes([v[0], v[1]]).to_f32() * 0.06;
                v.copy_from_slice(&f16::from_f32(w).to_le_bytes());
            }
        }
        let d_at: &[usize] = match f {
            WeightFormat::Q4K => &[0, 2],
            WeightFormat::Q6K => &[208],
            WeightFormat::IQ4_XS | WeightFormat::IQ3_S => &[0],
            _ => &[],
        };
        for blk in data.chunks_exact_mut(f.block_bytes()) {
            for &o in d_at {
                let d = f16::from_le_bytes([blk[o], blk[o + 1]]).to_f32() / 64.0;
                blk[o..o + 2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
            }
        }
        let origin = std::path::Path::new("random");
        let view = TensorView::from_owned(origin, "w", f, vec![rows, cols], data, Vec::new());
        Linear::from_view(view, bias).expect("linear")
    };
    let mut vr = Rng(0x57AC_0000_0000_0002);
    let vecf = |n: usize, c: f32, s: f32, r: &mut Rng| -> Vec<f32> {
        (0..n).map(|_| c + s * r.f()).collect()
    };
    let norm = |n: usize, r: &mut Rng| RmsNorm {
        weight: vecf(n, 1.0, 0.3, r),
        eps: 1e-6,
    };
    struct Block {
        attn_norm: RmsNorm,
        attn: SelfAttention,
        post_attn_norm: RmsNorm,
        ffn_norm: RmsNorm,
        mlp: GatedMlp,
        post_ffn_norm: RmsNorm,
    }
    let shape = AttentionShape {
        dim,
        n_heads: heads,
        n_kv_heads: kv_heads,
        head_dim: hd,
        norm_eps: 1e-6,
        qk_norm_unit_offset: false,
        output_gate: false,
    };
    let blocks: Vec<Block> = (0..n_layers)
        .map(|li| {
            let (f, fv, fdown) = if li == 0 {
                (f0, fv0, fdown0)
            } else {
                (f1, fv1, fdown1)
            };
            Block {
                attn_norm: norm(dim, &mut vr),
                attn: SelfAttention {
                    q: lin(f, q_row, dim, Some(vecf(q_row, 0.0, 0.1, &mut vr))),
                    k: lin(f, kv_row, dim, Some(vecf(kv_row, 0.0, 0.1, &mut vr))),
                    v: lin(fv, kv_row, dim, None),
                    o: lin(f, dim, q_row, None),
                    q_norm: Some(norm(hd, &mut vr)),
                    k_norm: Some(norm(hd, &mut vr)),
                    shape,
                },
                post_attn_norm: norm(dim, &mut vr),
                ffn_norm: norm(dim, &mut vr),
                mlp: GatedMlp {
                    gate: lin(f, ffn, dim, None),
                    up: lin(f, ffn, dim, None),
                    down: lin(fdown, dim, ffn, None),
                    act: GateAct::Silu,
                },
                post_ffn_norm: norm(dim, &mut vr),
            }
        })
        .collect();
    let head = lin(fhead, vocab, dim, None);
    let final_norm = norm(dim, &mut vr);
    let table: Vec<u8> = vecf(vocab * dim, 0.0, 1.0, &mut vr)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let origin = std::path::Path::new("random");
    let table = TensorView::from_owned(
        origin,
        "e",
        WeightFormat::F32,
        vec![vocab, dim],
        table,
        vec![],
    );
    let embed = Embedding::new(table, 1.0).expect("embedding");
    // Table 0 with base 10000, table 1 with base 1000 (two layer kinds).
    let rope = |theta: f32| {
        let cfg = RopeConfig {
            theta,
            dim: hd,
            style: RopeStyle::Half,
            scaling: RopeScaling::None,
        };
        Rope::new(&cfg, None)
    };
    let ropes = [rope(10000.0), rope(1000.0)];
    let windows = [None, Some(12)];
    let layers = blocks
        .iter()
        .enumerate()
        .map(|(li, bl)| {
            let spec = AttnSpec {
                rope: li,
                scale: 1.0 / (hd as f32).sqrt(),
                window: windows[li],
                softcap: None,
            };
            let ffn = Ffn::mlp(&bl.ffn_norm, &bl.mlp);
            let mut layer = Layer::new(&bl.attn_norm, Mixer::Attention { op: &bl.attn, spec }, ffn);
            if li == 1 {
                layer.mixer_post_norm = Some(&bl.post_attn_norm);
                layer.ffn.post_norm = Some(&bl.post_ffn_norm);
            }
            layer
        })
        .collect();
    let mut plan = Plan::new(
        &embed,
        layers,
        &final_norm,
        &head,
        vec![&ropes[0], &ropes[1]],
    );
    plan.final_softcap = Some(3.0);
    // Sequence 0: 23 new rows, nothing cached; sequence 1: 17 new rows after 20 cached ones
    // (random keys and values: attention only needs them stored).
    let (len0, len1, past1) = (23, 17, 20);
    let t = len0 + len1;
    let ids: Vec<u32> = (0..t as u32).collect();
    let x = vecf(t * dim, 0.0, 1.0, &mut vr);
    let new_cache = || {
        KvCache::new(n_layers, kv_row, 64)
            .with_windows(&windows)
            .with_types(types)
    };
    let mut past = new_cache();
    for li in 0..n_layers {
        let (k, v) = (
            vecf(past1 * kv_row, 0.0, 1.0, &mut vr),
            vecf(past1 * kv_row, 0.0, 1.0, &mut vr),
        );
        past.append(li, &k, &v);
    }
    past.advance(past1);
    assert!(
        !past.past_views(1).k[1].is_empty(),
        "the sliding layer's ring has wrapped"
    );
    // Runs `f` over fresh copies of the caches: returns them and the logits per sequence.
    let with_caches = |f: &mut dyn FnMut(&mut [SeqRows]) -> Vec<Vec<f32>>| {
        let mut c = [new_cache(), past.clone()];
        let [c0, c1] = &mut c;
        let mut seqs = [
            SeqRows {
                row: 0,
                len: len0,
                all_logits: true,
                cache: c0,
                media: None,
            },
            SeqRows {
                row: len0,
                len: len1,
                all_logits: false,
                cache: c1,
                media: None,
            },
        ];
        let logits = f(&mut seqs);
        (c, logits.concat())
    };
    let cpu_run =
        |x: &[f32]| with_caches(&mut |s| cpu::forward(&plan, &ids, x.to_vec(), s).expect("cpu"));
    let (cpu_kv, cpu_logits) = cpu_run(&x);
    // The CPU executor's own sensitivity: the same pass with every input moved by up to 2^-11
    // relative (f16 rounding, what separates the device from the CPU in layer 0). int8
    // activation rounding turns such a move into a step of 1/127 of a block's maximum wherever
    // a value sits near a rounding boundary, so later layers and the logits move by far more
    // than 2^-11; the device must stay within a few times this jitter.
    let xp: Vec<f32> = x.iter().map(|&v| v * (1.0 + rng.f() / 2048.0)).collect();
    let (pert_kv, pert_logits) = cpu_run(&xp);
    let layer_err = |a: &[KvCache; 2], b: &[KvCache; 2], li: usize| {
        (0..2)
            .map(|s| {
                let (x, y) = (&a[s].layers[li], &b[s].layers[li]);
                rel_err(&x.k.to_f32(), &y.k.to_f32()).max(rel_err(&x.v.to_f32(), &y.v.to_f32()))
            })
            .fold(0f64, f64::max)
    };
    let sens: Vec<f64> = (0..n_layers)
        .map(|li| layer_err(&pert_kv, &cpu_kv, li))
        .collect();
    let sens_logits = rel_err(&pert_logits, &cpu_logits);
    println!("CPU executor under 2^-11 input jitter: keys/values per layer {sens:?}, logits {sens_logits:.2e}");
    let Some(b) = b else {
        return;
    };
    let (mut dev_kv, dev_logits) = with_caches(&mut |s| {
        oxinfer::backend::plan_run::run(&b, &plan, &ids, &x, s)
            .expect("plan declined")
            .expect("device run")
    });
    // The device keeps the keys in its mirrors: bring the host copies level to compare.
    for c in dev_kv.iter_mut() {
        assert!(
            c.host_len() < c.len(),
            "the device pass stored its keys on the device"
        );
        c.sync_host().expect("reading the device KV cache");
    }
    for (li, &sens) in sens.iter().enumerate() {
        let e = layer_err(&dev_kv, &cpu_kv, li);
        println!("plan layer {li}: keys/values {e:.2e}");
        // Layer 0 differs by f16 rounding only, which a stored type turns into one of its
        // steps wherever a value sits near one of its rounding boundaries (bf16: 2^-8 of the
        // value; Q8_0 / Q4_0: a block's largest value over 127 / 8), so the bound is two
        // steps; later layers by int8 jitter (above). A wrong RoPE table, norm, rotation or
        // window moves them by O(1).
        let bound = if li == 0 {
            use oxinfer::plan::KvType;
            match kv {
                KvType::F32 | KvType::F16 => 1e-3,
                KvType::Bf16 => 8e-3,
                KvType::Q8_0 => 2.0 / 127.0,
                KvType::Q4_0 => 2.0 / 8.0,
            }
        } else {
            (4.0 * sens).max(1e-2)
        };
        assert!(e < bound, "layer {li}: keys/values {e} (bound {bound:.2e})");
    }
    let e = rel_err(&dev_logits, &cpu_logits);
    println!("plan logits: {e:.2e}");
    let bound = (4.0 * sens_logits).max(1e-2);
    assert!(e < bound, "logits: error {e} (bound {bound:.2e})");
    scores_case(&b, &plan, &ids[..len0], &x[..len0 * dim], new_cache);
    decode::decode_case(&b, &plan, &past, &windows, bound);
    decode::decode_single_case(&b, &plan, &past, &windows, bound);
}

/// Perplexity's reduction on the device (`run_plan_scored`): one sequence's logit rows scored
/// against targets on the device equal the same pass's logits scored on the host
/// (`RowScore::from_logits`): the log-probabilities to f64 summation order, the argmax exactly.
fn scores_case(
    b: &CudaBackend,
    plan: &oxinfer::plan::Plan,
    ids: &[u32],
    x: &[f32],
    cache: impl Fn() -> oxinfer::plan::KvCache,
) {
    use oxinfer::backend::plan_run;
    use oxinfer::plan::{RowScore, SeqRows};
    let vocab = plan.head.matrix().rows;
    let targets: Vec<u32> = (0..ids.len() as u32)
        .map(|i| (i * 37 + 11) % vocab as u32)
        .collect();
    let (mut c0, mut c1) = (cache(), cache());
    let seq = |c| SeqRows {
        row: 0,
        len: ids.len(),
        all_logits: true,
        cache: c,
        media: None,
    };
    let logits = plan_run::run(b, plan, ids, x, &mut [seq(&mut c0)])
        .expect("plan declined")
        .expect("device run")
        .concat();
    let scores = plan_run::run_scored(b, plan, ids, x, &mut [seq(&mut c1)], &targets)
        .expect("plan declined")
        .expect("device run");
    assert_eq!(scores.len(), ids.len());
    let mut worst = 0f64;
    for ((s, row), &t) in scores.iter().zip(logits.chunks_exact(vocab)).zip(&targets) {
        let host = RowScore::from_logits(row, t);
        worst = worst.max((s.logp - host.logp).abs());
        assert_eq!(s.argmax, host.argmax, "argmax of a row");
    }
    println!("plan scores: log-probabilities within {worst:.2e} of the host's");
    assert!(worst < 1e-9, "log-probabilities {worst:.2e} off the host's");
}
