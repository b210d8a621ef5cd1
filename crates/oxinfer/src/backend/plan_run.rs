//! Running a whole [`Plan`] on a backend ([`super::Backend::run_plan`]).
//!
//! Departure from `shared/seed/backend-spec.rs.txt`, which offloads single ops (matmul,
//! attention, conv2d): with one op at a time the `[t, dim]` activations cross the bus for every
//! op and the norms, RoPE and residual adds run on the host; on an H200 that held a 7B-geometry
//! prefill at ~950 tok/s while the matmuls alone take a few ms. So a backend may take the whole
//! plan in one call: the embedding rows go up, the logits of the rows that need them and every
//! layer's new keys and values come down.
//!
//! KV ownership: the host [`crate::plan::KvCache`] stays the one source of truth. The backend
//! reads each sequence's cached keys/values through [`crate::plan::KvCache::past`] (in position
//! order, also for ring-buffer sliding layers) and appends every layer's new rows to the caches
//! as the CPU would (a backend can overlap that copy with the next layers' compute); [`run`]
//! then advances the caches. Decode (one token per step) then runs wherever it runs (on the
//! CPU by default) over the same cache.

use super::Backend;
use crate::error::{Error, Result};
use crate::plan::batch::{logit_rows, split_logits};
use crate::plan::{Plan, PlanInput, RopeTable, SeqRows};

/// Per sequence and layer: rows stored and oldest position, to tell whether a declined run
/// changed a cache.
fn fingerprint(seqs: &[SeqRows<'_>]) -> Vec<(usize, usize)> {
    seqs.iter()
        .flat_map(|s| s.cache.layers.iter().map(|l| (l.k.len(), l.start)))
        .collect()
}

/// Runs `plan` over the embedded tokens `x` (`[t, dim]`, tokens `ids`) on `b`: appends the new
/// keys/values to each sequence's cache, advances the caches and returns the logits per
/// sequence. `None` when `b` declines (it does not want a pass this small, does not implement
/// an op of the plan, or uploading the cached keys would cost more than the pass, e.g.
/// many-sequence decode), with nothing changed; an error when the device failed after part of
/// the keys were stored (those caches are then emptied).
pub fn run(
    b: &dyn Backend,
    plan: &Plan,
    ids: &[u32],
    x: &[f32],
    seqs: &mut [SeqRows<'_>],
) -> Option<Result<Vec<Vec<f32>>>> {
    let (t, dim) = (ids.len(), plan.dim);
    // Rows every layer would upload, against the pass's own work.
    let past_rows: usize = seqs.iter().map(|s| s.cache.len()).sum();
    if !b.wants(dim, dim, t) || past_rows > 4 * t {
        return None;
    }
    let rope_tables: Vec<RopeTable> = plan
        .ropes
        .iter()
        .map(|rope| {
            let half = rope.dim() / 2;
            let (mut cos, mut sin) = (vec![0f32; t * half], vec![0f32; t * half]);
            for s in seqs.iter() {
                let r = s.row * half..(s.row + s.len) * half;
                rope.tables(s.cache.len(), s.len, &mut cos[r.clone()], &mut sin[r]);
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
    let vocab = plan.head.matrix().rows;
    let mut logits = vec![0f32; rows.len() * vocab];
    let before = fingerprint(seqs);
    if !b.run_plan(plan, &input, seqs, &mut logits) {
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
    Some(Ok(split_logits(logits, vocab, &counts)))
}
