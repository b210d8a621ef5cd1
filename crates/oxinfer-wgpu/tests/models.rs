//! Whole models on the wgpu backend (installed process-wide, as `--device wgpu` does): the tiny
//! fixtures' logits within 1e-3 of the committed transformers references (whole, chunked and
//! one-token prefill; greedy ids as the reference), 32 greedy tokens identical to the CPU
//! path, and on the real SmolLM2 and Gemma 3 GGUFs greedy tokens and perplexity against the
//! CPU. Every check also asserts that the plans really ran on the device. Without an adapter
//! the tests print a `skipped:` line (under `CI=true` they fail instead).

#[path = "../../oxinfer/tests/common/mod.rs"]
mod common;
mod device;

use common::{check_sources, fixtures, greedy, ids, real_model, sources_in};
use oxinfer::backend;
use oxinfer::Model;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// Serializes the tests: `cpu_only` (the CPU twins) is process-wide.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Installs the backend on adapter 0 once; false (after the skip line) without one.
fn installed() -> bool {
    static DONE: OnceLock<bool> = OnceLock::new();
    *DONE.get_or_init(|| match device::backend() {
        Some(b) => {
            backend::install(Some(Box::new(b)));
            true
        }
        None => false,
    })
}

/// Plan passes the installed backend ran so far (from its stats).
fn device_passes() -> u64 {
    let stats = backend::active()
        .and_then(|b| b.stats())
        .unwrap_or_default();
    stats
        .lines()
        .filter(|l| l.trim_start().starts_with("run_plan"))
        .filter_map(|l| l.split_whitespace().find_map(|w| w.parse::<u64>().ok()))
        .sum()
}

/// `n` greedy tokens after `prompt` on the device and on the CPU; asserts they are the same
/// and that the device ran passes.
fn greedy_matches_cpu(model: &Model, prompt: &[u32], n: usize, what: &str) {
    let before = device_passes();
    let start = Instant::now();
    let dev = greedy(model, prompt, n);
    let dev_s = start.elapsed().as_secs_f64();
    let passes = device_passes() - before;
    let start = Instant::now();
    let cpu = {
        let _cpu = backend::cpu_only();
        greedy(model, prompt, n)
    };
    println!(
        "{what}: {n} greedy tokens, device {dev_s:.1} s ({passes} passes), CPU {:.1} s",
        start.elapsed().as_secs_f64()
    );
    assert!(
        passes > n as u64 / 2,
        "{what}: the plan did not run on the device"
    );
    assert_eq!(dev, cpu, "{what}: greedy tokens differ from the CPU path");
}

/// The tiny checkpoints the kernels run whole (the rest are declined by op and run on the
/// CPU: per-layer embeddings, value norms, Gated DeltaNet, experts).
const TINY: [(&str, &[&str]); 6] = [
    ("llama-tiny-a", &["", "model.gguf"]),
    ("qwen2-tiny", &[""]),
    ("qwen2-tiny-swa", &[""]),
    ("qwen3-tiny", &[""]),
    ("gemma3-tiny-a", &["", "model.gguf"]),
    ("gemma3-tiny-b", &[""]),
];

#[test]
fn tiny_fixtures_match_transformers_and_cpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !installed() {
        return;
    }
    for (name, sources) in TINY {
        let dir = fixtures().join(name);
        let before = device_passes();
        let worst = check_sources(&dir, &sources_in(&dir, sources), &[0, 7, 1], 1e-3);
        let passes = device_passes() - before;
        println!("{name}: worst logit diff {worst:.2e} over {passes} device passes");
        assert!(passes > 0, "{name}: the plan never ran on the device");
        let r = common::reference(&dir);
        let prompt = ids(&r["prompts"][0]["ids"]);
        for source in sources_in(&dir, sources) {
            let model = Model::load(&source).expect("load");
            greedy_matches_cpu(&model, &prompt, 32, &format!("{}", source.display()));
        }
    }
}

/// `greedy_n` greedy tokens and the perplexity of one 64-token window of a real GGUF on the
/// device against the CPU; prints the times. (Sized for lavapipe, where a SmolLM2 decode step
/// takes seconds: docs/wgpu.md.)
fn real_model_matches_cpu(file: &str, ppl_ref: &str, greedy_n: usize) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !installed() {
        return;
    }
    let Some(path) = real_model(file) else {
        return;
    };
    let case = common::perplexity_case(&path, ppl_ref);
    let model = &case.model;
    let prompt = model
        .tokenize("The capital of France is", model.adds_bos())
        .expect("tokenize");
    greedy_matches_cpu(model, &prompt, greedy_n, file);
    let ppl = |on_cpu: bool| {
        let _cpu = on_cpu.then(backend::cpu_only);
        let start = Instant::now();
        let p = oxinfer::engine::perplexity::perplexity(
            model.lm(),
            &case.tokens,
            64,
            case.bos,
            Some(1),
            64,
            |_, _, _| {},
        )
        .expect("perplexity");
        (p.ppl, start.elapsed().as_secs_f64())
    };
    let before = device_passes();
    let (dev, dev_s) = ppl(false);
    assert!(
        device_passes() > before,
        "{file}: perplexity did not run on the device"
    );
    let (cpu, cpu_s) = ppl(true);
    let rel = (dev - cpu).abs() / cpu;
    println!("{file}: perplexity device {dev:.4} ({dev_s:.1} s), CPU {cpu:.4} ({cpu_s:.1} s), rel diff {rel:.2e}");
    assert!(rel < 5e-3, "{file}: perplexity {dev} vs CPU {cpu}");
}

/// Known failure (docs/wgpu.md): the 8 greedy tokens match, the perplexity of the 64-token
/// window does not (6.165 on lavapipe against the CPU's 5.985): the device RMSNorm's f32
/// rounding differs from the CPU's f64 one by an ulp, and the int8 rounding of the next
/// matmul's input amplifies that (`smollm2_layer0_projection_vs_cpu`).
#[test]
#[ignore = "known: perplexity 3 % off the CPU until RMSNorm matches it bit for bit (docs/wgpu.md)"]
fn smollm2_matches_cpu() {
    let file = "SmolLM2-135M-Instruct.Q4_1.gguf";
    real_model_matches_cpu(file, "smollm2/llamacpp_ref.json", 8);
}

/// Gemma 3's 262k-row head makes each lavapipe decode step several times SmolLM2's: run with
/// `--ignored` (or on a hardware adapter).
#[test]
#[ignore = "minutes on lavapipe; run with --ignored"]
fn gemma3_matches_cpu() {
    real_model_matches_cpu("gemma-3-270m-q4_k_m.gguf", "gemma3/llamacpp_ref.json", 8);
}

/// Diagnostic for the SmolLM2 discrepancy: prints the max |logit difference| between the
/// device and the CPU per position of one 24-token prefill (0.13 to 0.81 on lavapipe, while the
/// tiny fixtures agree to 2e-6).
#[test]
#[ignore = "diagnostic; prints only"]
fn smollm2_logit_rows_vs_cpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !installed() {
        return;
    }
    let Some(path) = real_model("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let model = Model::load(&path).expect("load");
    let prompt: Vec<u32> = (0..24u32).map(|i| 100 + 37 * i).collect();
    let dev = common::prompt_logits(&model, &prompt, 24);
    let cpu = {
        let _c = backend::cpu_only();
        common::prompt_logits(&model, &prompt, 24)
    };
    let v = model.config().vocab_size;
    for r in 0..24 {
        let d = common::max_abs_diff(&dev[r * v..(r + 1) * v], &cpu[r * v..(r + 1) * v]);
        println!("row {r}: {d:.3e}");
    }
}

/// Diagnostic for the SmolLM2 discrepancy: layer 0's k projection of the normed embeddings,
/// three ways: the layer's own CPU forward, `oxinfer_kernels::matmul` on its matrix, and the
/// device. Prints the relative differences.
#[test]
#[ignore = "diagnostic; prints only"]
fn smollm2_layer0_projection_vs_cpu() {
    use oxinfer::backend::{Backend, Job};
    use oxinfer::plan::Mixer;
    let Some(b) = device::backend() else { return };
    let Some(path) = real_model("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let model = Model::load(&path).expect("load");
    let lm = model.lm();
    let plan = lm.plan();
    let ids: Vec<u32> = vec![504, 3575, 282, 4649, 314];
    let x = plan.embed.forward(&ids).expect("embed");
    let l = &plan.layers[0];
    let h = l.mixer_norm.forward(&x);
    let n = l.mixer_norm;
    let h_dev = b.rms_norm(&x, n.gain(), n.eps()).expect("norm");
    println!(
        "norm (eps {:e}): device vs CPU {:.2e}; x max {:.3e}",
        n.eps(),
        device::rel_err(&h_dev, &h),
        x.iter().fold(0f32, |m, v| m.max(v.abs()))
    );
    let Mixer::Attention { op, .. } = &l.mixer else {
        panic!("attention")
    };
    let p = op.parts();
    {
        // How much the CPU's own k projection moves when its input moves by the device norm's
        // f32 rounding (int8 rounding of the input flips at block boundaries).
        let _c = backend::cpu_only();
        let k = p.k.expect("k");
        let (a, b2) = (k.forward(&h, ids.len()), k.forward(&h_dev, ids.len()));
        println!(
            "CPU k of CPU norm vs CPU k of device norm: {:.2e}",
            device::rel_err(&b2, &a)
        );
    }
    for (name, proj) in [("q", p.q), ("k", p.k.expect("k")), ("v", p.v.expect("v"))] {
        let w = proj.matrix();
        let t = ids.len();
        let own = {
            let _c = backend::cpu_only();
            proj.forward(&h, t)
        };
        let mut kern = vec![0f32; t * w.rows];
        oxinfer_kernels::matmul(&w, &h, t, &mut kern);
        let dev_w = b.upload(&w).expect("upload");
        let mut dev = vec![0f32; t * w.rows];
        let job = Job {
            w,
            dev: &dev_w,
            y: &mut dev,
        };
        assert!(b.matmul(&h, t, w.cols, &mut [job]));
        println!(
            "{name} ({}, {}x{}): own vs kernels {:.2e}, device vs kernels {:.2e}, device vs own {:.2e}",
            w.format,
            w.rows,
            w.cols,
            device::rel_err(&own, &kern),
            device::rel_err(&dev, &kern),
            device::rel_err(&dev, &own)
        );
    }
    let t = ids.len();
    // The head and layer 0's MLP on the normed embeddings, as their own CPU forwards run them.
    for (name, proj) in [("head", plan.head), ("o", p.o)] {
        let w = proj.matrix();
        let input = &h[..t * w.cols.min(h.len() / t)];
        if input.len() != t * w.cols {
            continue;
        }
        let own = {
            let _c = backend::cpu_only();
            proj.forward(input, t)
        };
        let dev_w = b.upload(&w).expect("upload");
        let mut dev = vec![0f32; t * w.rows];
        let job = Job {
            w,
            dev: &dev_w,
            y: &mut dev,
        };
        assert!(b.matmul(input, t, w.cols, &mut [job]));
        println!(
            "{name} ({}): device vs own {:.2e}",
            w.format,
            device::rel_err(&dev, &own)
        );
    }
    if let oxinfer::plan::FfnBody::Mlp(m) = l.ffn.body {
        let own = {
            let _c = backend::cpu_only();
            m.forward(&h, t)
        };
        let mp = m.parts();
        let devs = [mp.gate, mp.up, mp.down].map(|p| b.upload(&p.matrix()).expect("upload"));
        fn wt<'a>(
            p: &'a dyn oxinfer::plan::ProjOp,
            dev: &'a oxinfer::backend::DeviceWeight,
        ) -> oxinfer::backend::Weight<'a> {
            oxinfer::backend::Weight { w: p.matrix(), dev }
        }
        let mut dev = vec![0f32; own.len()];
        assert!(b.gated_mlp(
            &h,
            t,
            wt(mp.gate, &devs[0]),
            wt(mp.up, &devs[1]),
            wt(mp.down, &devs[2]),
            mp.act,
            &mut dev
        ));
        println!(
            "mlp ({:?}): device vs own {:.2e}",
            mp.act,
            device::rel_err(&dev, &own)
        );
    }
    let rope = plan.ropes[0];
    let hd = p.head_dim;
    let half = rope.dim() / 2;
    let k = p.k.expect("k").forward(&h, t);
    let mut cpu = k.clone();
    rope.apply(&mut cpu, t, p.n_kv_heads, hd, 0);
    let (mut cos, mut sin) = (vec![0f32; t * half], vec![0f32; t * half]);
    rope.tables(0, t, &mut cos, &mut sin);
    let dev = b
        .rope(&k, (t, p.n_kv_heads, hd), &cos, &sin, rope.interleaved())
        .expect("rope");
    println!(
        "rope dim {} of head {hd}, interleaved {}: device vs CPU apply {:.2e}",
        rope.dim(),
        rope.interleaved(),
        device::rel_err(&dev, &cpu)
    );
}

/// Diagnostic for the SmolLM2 discrepancy: SmolLM2's plan cut to its first `n` layers, one
/// 5-token pass on the device (`plan_run::run` with this test's own backend) against the CPU
/// executor; prints the logits' relative difference per depth.
#[test]
#[ignore = "diagnostic; prints only"]
fn smollm2_truncated_plans_vs_cpu() {
    use oxinfer::plan::{cpu, Ffn, Layer, Plan, SeqBatch};
    let Some(b) = device::backend() else { return };
    let Some(path) = real_model("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let model = Model::load(&path).expect("load");
    let lm = model.lm();
    let full = lm.plan();
    let ids: Vec<u32> = vec![504, 3575, 282, 4649, 314];
    for n in [1, 2, 4, 30] {
        let layers: Vec<Layer> = full.layers[..n]
            .iter()
            .map(|l| Layer {
                mixer_norm: l.mixer_norm,
                mixer: l.mixer,
                mixer_post_norm: l.mixer_post_norm,
                ffn: Ffn {
                    norm: l.ffn.norm,
                    body: l.ffn.body,
                    side_experts: l.ffn.side_experts,
                    post_norm: l.ffn.post_norm,
                },
                ple: l.ple,
                scalar: l.scalar,
            })
            .collect();
        let plan = Plan::new(
            full.embed,
            layers,
            full.final_norm,
            full.head,
            full.ropes.clone(),
        );
        let run = |on_dev: bool| {
            let mut cache = lm.new_cache(16);
            let mut batch = [SeqBatch {
                tokens: &ids,
                cache: &mut cache,
                all_logits: true,
                media: None,
            }];
            let (ids, mut seqs) = oxinfer::plan::batch::layout(&mut batch).expect("layout");
            let x = plan.embed.forward(&ids).expect("embed");
            if on_dev {
                backend::plan_run::run(&b, &plan, &ids, &x, &mut seqs)
                    .expect("declined")
                    .expect("device")
            } else {
                let _c = backend::cpu_only();
                cpu::forward(&plan, &ids, x, &mut seqs).expect("cpu")
            }
        };
        let (dev, cpu) = (run(true), run(false));
        println!(
            "{n} layers: logits device vs CPU {:.2e}",
            device::rel_err(&dev[0], &cpu[0])
        );
    }
}
