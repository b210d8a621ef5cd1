//! Running a whole [`Plan`] on a backend ([`super::Backend::run_plan`]).
//!
//! Departure from `shared/seed/backend-spec.rs.txt`, which offloads single ops (matmul,
//! attention, conv2d): with one op at a time the `[t, dim]` activations cross the bus for every
//! op and the norms, RoPE and residual adds run on the host; on an H200 that held a 7B-geometry
//! prefill at ~950 tok/s while the matmuls alone take a few ms. So a backend may take the whole
//! plan in one call: the embedding rows go up, the logits of the rows that need them and every
//! layer's new keys and values come down.
//!
//! KV ownership: the state of a sequence lives where its passes run. A backend stores each
//! pass's new keys/values either on the host ([`crate::plan::KvCache::append`], as the CPU
//! does) or in a device mirror it attaches to the cache ([`crate::plan::DeviceKv`],
//! [`crate::plan::KvCache::set_device`]; the CUDA backend does this, so decode steps move
//! only the embedded rows up and the wanted logits down); [`run`] then advances the caches.
//! The rule, for every cache: positions `0 .. len()` lie on the host (`0 .. host_len()`), in
//! the mirror (`0 .. mirror.len()`), or both, and one of the two holds them all.
//! - A device pass appends to the mirror only, after copying up any rows only the host holds
//!   (written by a CPU pass since).
//! - A CPU pass ([`crate::plan::cpu`]) first copies down the rows only the mirror holds
//!   ([`crate::plan::KvCache::sync_host`]), then appends to the host only. So does anything
//!   else that reads the host layers (the `OXINFER_GPU_CHECK` twin).
//! - [`crate::plan::KvCache::truncate`] / `reset` trim both; a clone copies the host part.
//!
//! The backend declines what it does not run (ops it lacks, a mirror of another backend)
//! before changing anything, and the CPU runs that pass over the same cache.

use super::Backend;
use crate::error::{Error, Result};
use crate::plan::batch::{logit_rows, split_logits};
use crate::plan::{Plan, PlanInput, RopeTable, RowScore, SeqRows};

/// Per sequence and layer: rows stored and oldest position, then per sequence the mirror's
/// length, to tell whether a declined run changed a cache.
fn fingerprint(seqs: &[SeqRows<'_>]) -> Vec<(usize, usize)> {
    let host = seqs
        .iter()
        .flat_map(|s| s.cache.layers.iter().map(|l| (l.k.len(), l.start)));
    let device = seqs
        .iter()
        .map(|s| (s.cache.device().map_or(0, |d| d.len()), usize::MAX));
    host.chain(device).collect()
}

/// Runs `plan` over the embedded tokens `x` (`[t, dim]`, tokens `ids`) on `b`: stores the new
/// keys/values of each sequence (host or mirror, see the module docs), advances the caches and
/// returns the logits per sequence. `None` when `b` declines (it does not implement an op of
/// the plan, or does not run passes this small), with nothing changed; an error when the
/// device failed after part of the keys were stored (those caches are then emptied).
pub fn run(
    b: &dyn Backend,
    plan: &Plan,
    ids: &[u32],
    x: &[f32],
    seqs: &mut [SeqRows<'_>],
) -> Option<Result<Vec<Vec<f32>>>> {
    let vocab = plan.head.matrix().rows;
    let mut logits = Vec::new();
    let counts = run_with(b, plan, ids, x, seqs, &mut |input, seqs| {
        logits = vec![0f32; input.logit_rows.len() * vocab];
        b.run_plan(plan, input, seqs, &mut logits)
    })?;
    Some(counts.map(|counts| split_logits(logits, vocab, &counts)))
}

/// [`run`] with every logit row (of one sequence or several) scored against a target token
/// (`targets[i]` for the `i`-th logit row): on the device when `b` implements
/// [`Backend::run_plan_scored`], else from [`Backend::run_plan`]'s logits on the host
/// ([`RowScore::from_logits`]). `None` when `b` declines the plan.
pub fn run_scored(
    b: &dyn Backend,
    plan: &Plan,
    ids: &[u32],
    x: &[f32],
    seqs: &mut [SeqRows<'_>],
    targets: &[u32],
) -> Option<Result<Vec<RowScore>>> {
    let mut scores = Vec::new();
    let done = run_with(b, plan, ids, x, seqs, &mut |input, seqs| {
        if input.logit_rows.len() != targets.len() {
            return false;
        }
        scores = vec![
            RowScore {
                logp: 0.0,
                argmax: 0
            };
            targets.len()
        ];
        b.run_plan_scored(plan, input, seqs, targets, &mut scores)
    });
    match done {
        Some(r) => Some(r.map(|_| scores)),
        None => {
            let vocab = plan.head.matrix().rows;
            let logits = run(b, plan, ids, x, seqs)?;
            Some(logits.map(|l| RowScore::from_rows(&l.concat(), vocab, targets)))
        }
    }
}

/// The common part of [`run`] and [`run_scored`]: builds the pass's input (RoPE rows, logit
/// rows), lets `pass` run it on the backend, and on success advances the caches and returns how
/// many logit rows each sequence has. `None` when the backend declined with nothing changed.
fn run_with(
    b: &dyn Backend,
    plan: &Plan,
    ids: &[u32],
    x: &[f32],
    seqs: &mut [SeqRows<'_>],
    pass: &mut dyn FnMut(&PlanInput, &mut [SeqRows<'_>]) -> bool,
) -> Option<Result<Vec<usize>>> {
    if plan.bidirectional {
        return None; // the backends' attention op is causal only
    }
    // Nor do the backends' plan runs apply media groups (soft tokens that attend to each other
    // both ways): a pass holding one runs on the CPU, whose attention does.
    let grouped = |s: &SeqRows<'_>| {
        let pos0 = s.cache.len();
        let m = s.media.as_deref();
        m.is_some_and(|m| m.has_group_in(pos0..pos0 + s.len))
    };
    if seqs.iter().any(grouped) {
        return None;
    }
    if seqs.iter().any(|s| !b.holds_kv(s.cache.types())) {
        return None; // the device cannot keep this cache's types: the CPU runs it
    }
    let t = ids.len();
    let rope_tables: Vec<RopeTable> = plan
        .ropes
        .iter()
        .map(|rope| {
            let half = rope.dim() / 2;
            let (mut cos, mut sin) = (vec![0f32; t * half], vec![0f32; t * half]);
            for s in seqs.iter() {
                let r = s.row * half..(s.row + s.len) * half;
                rope.tables_rows(s.positions(), s.len, &mut cos[r.clone()], &mut sin[r]);
            }
            RopeTable { cos, sin }
        })
        .collect();
    let (rows, counts) = logit_rows(seqs);
    let input = PlanInput {
        ids,
        x,
        rope_tables: &rope_tables,
        logit_rows: &rows,
    };
    let before = fingerprint(seqs);
    if !pass(&input, seqs) {
        if fingerprint(seqs) == before {
            return None;
        }
        for s in seqs.iter_mut() {
            s.cache.reset();
        }
        return Some(Err(Error::Device(format!(
            "{} failed after storing part of the keys; the KV cache was emptied",
            b.name()
        ))));
    }
    for s in seqs.iter_mut() {
        s.cache.advance(s.len);
    }
    Some(Ok(counts))
}
