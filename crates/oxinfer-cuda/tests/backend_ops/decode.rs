//! Decode steps of a whole plan over the device KV caches against the CPU executor (called
//! from `plan_case` in backend_ops.rs, which builds the plan and the cached rows).

use super::rel_err;
use oxinfer::plan::{cpu, KvCache, Plan, SeqBatch};
use oxinfer_cuda::CudaBackend;

/// A fresh cache of `past`'s geometry and storage types (64 positions).
fn empty_cache(past: &KvCache, windows: &[Option<usize>]) -> KvCache {
    KvCache::new(windows.len(), past.row_width(0), 64)
        .with_windows(windows)
        .with_types(past.types())
}

/// One pass of `plan` over each sequence's `toks` with its cache, on the device (`on_dev`) or
/// the CPU executor: each sequence's logits (its last row).
fn step(
    b: &CudaBackend,
    plan: &Plan,
    on_dev: bool,
    toks: &[Vec<u32>],
    caches: &mut [KvCache],
) -> Vec<Vec<f32>> {
    let mut batch: Vec<SeqBatch> = toks
        .iter()
        .zip(caches.iter_mut())
        .map(|(t, c)| SeqBatch {
            tokens: t,
            cache: c,
            all_logits: false,
            media: None,
        })
        .collect();
    let (ids, mut seqs) = oxinfer::plan::batch::layout(&mut batch).expect("layout");
    let x = plan.embed.forward(&ids).expect("embed");
    if on_dev {
        oxinfer::backend::plan_run::run(b, plan, &ids, &x, &mut seqs)
            .expect("decode step declined")
            .expect("device step")
    } else {
        cpu::forward(plan, &ids, x, &mut seqs).expect("cpu step")
    }
}

/// The index of the largest logit.
fn argmax(l: &[f32]) -> u32 {
    l.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i as u32)
}

/// Decode over the device KV cache against the CPU: two sequences (one after 20 cached rows
/// whose sliding ring has wrapped, one fresh) prefill 5 tokens, then step one token each per
/// pass, fed the CPU's greedy tokens; one step in the middle runs on the CPU over the device
/// caches (rows come down), the next device step uploads what the CPU appended, and a rewind
/// by 3 positions trims both copies. Every step's logits stay within `bound` of the CPU's.
pub(crate) fn decode_case(
    b: &CudaBackend,
    plan: &oxinfer::plan::Plan,
    past: &oxinfer::plan::KvCache,
    windows: &[Option<usize>],
    bound: f64,
) {
    let empty = || empty_cache(past, windows);
    let fresh = || [past.clone(), empty()];
    let (mut cpu_c, mut dev_c) = (fresh(), fresh());
    let step = |on_dev: bool, toks: &[Vec<u32>], caches: &mut [KvCache]| {
        step(b, plan, on_dev, toks, caches)
    };
    let prompts = [vec![3u32, 14, 15, 92, 65], vec![35, 89, 79, 32, 38]];
    let mut toks = prompts.clone();
    // Every token sequence 1 was fed, to rebuild its CPU twin after a rewind.
    let mut hist1: Vec<u32> = Vec::new();
    let (mut worst, mut same, mut steps) = (0f64, 0, 0);
    for i in 0..30 {
        if i == 20 {
            // Rewind by 3. The device mirrors keep every position, so they serve it; the CPU's
            // wrapped sliding ring cannot and empties. Sequence 0 starts over on both;
            // sequence 1's CPU twin is rebuilt from its tokens.
            for c in dev_c.iter_mut() {
                let n = c.len();
                c.truncate(n - 3);
                assert_eq!(c.len(), n - 3, "the device mirror serves the rewind");
            }
            dev_c[0].reset();
            cpu_c[0].reset();
            toks[0] = prompts[0].clone();
            let n = dev_c[1].len();
            cpu_c[1] = empty();
            step(false, &[hist1[..n].to_vec()], &mut cpu_c[1..]);
            toks[1] = vec![hist1[n]];
            hist1.truncate(n);
        }
        hist1.extend_from_slice(&toks[1]);
        let want = step(false, &toks, &mut cpu_c);
        // Step 10 runs on the CPU over the device caches (their rows come down first).
        let got = step(i != 10, &toks, &mut dev_c);
        for s in 0..2 {
            let e = rel_err(&got[s], &want[s]);
            worst = worst.max(e);
            assert!(
                e < bound,
                "decode step {i} sequence {s}: error {e} (bound {bound:.2e})"
            );
            same += usize::from(argmax(&got[s]) == argmax(&want[s]));
            steps += 1;
            toks[s] = vec![argmax(&want[s])];
        }
        if i == 0 {
            assert!(dev_c.iter().all(|c| c.device().is_some()));
        }
    }
    println!("decode: worst logits error {worst:.2e}, greedy tokens equal in {same}/{steps} steps");
}

/// One sequence decoding alone (one activation row per pass: a single user's decode, whose
/// one-row int8 GEMVs take the kernels and input layouts that only `t = 1` takes, such as the
/// grouped int8 layout) against the CPU: a 5-token prompt, then 12 single-token steps fed the
/// CPU's greedy tokens; every step's logits within `bound` of the CPU's.
pub(crate) fn decode_single_case(
    b: &CudaBackend,
    plan: &oxinfer::plan::Plan,
    past: &oxinfer::plan::KvCache,
    windows: &[Option<usize>],
    bound: f64,
) {
    let (mut cpu_c, mut dev_c) = ([empty_cache(past, windows)], [empty_cache(past, windows)]);
    let mut toks = vec![vec![7u32, 21, 4, 88, 50]];
    let mut worst = 0f64;
    for i in 0..13 {
        let want = step(b, plan, false, &toks, &mut cpu_c).concat();
        let got = step(b, plan, true, &toks, &mut dev_c).concat();
        let e = rel_err(&got, &want);
        worst = worst.max(e);
        assert!(
            e < bound,
            "single decode step {i}: error {e} (bound {bound:.2e})"
        );
        toks = vec![vec![argmax(&want)]];
    }
    println!("single-sequence decode: worst logits error {worst:.2e}");
}
