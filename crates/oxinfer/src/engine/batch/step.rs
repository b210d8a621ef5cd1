//! One forward pass over a set of sequences: every decoding sequence runs its last token,
//! prefilling ones share a budget of prompt tokens, all together in one
//! [`CausalLm::forward_batch`]; then each sequence takes its logits.

use super::sequence::{PassOut, SeqEvent, Sequence};
use crate::arch::{CausalLm, SeqBatch};
use crate::engine::speculative::draft_head::{DraftHead, HeadSlot, HEAD_EXTRA_ROWS};
use crate::engine::speculative::draft_model::{DraftModel, DraftSlot};
use crate::engine::speculative::lookup::lookup_draft;
use crate::error::Error;
use crate::nn::KvCache;

/// Prompt tokens one step may run, over all prefilling sequences together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefillBudget {
    /// While some sequence is decoding (keeps its step time short).
    pub shared: usize,
    /// While no sequence is decoding.
    pub alone: usize,
}

impl PrefillBudget {
    /// No step-wide limit: each sequence runs up to its own
    /// [`prefill_chunk`](crate::engine::GenerateOptions::prefill_chunk) per step.
    pub const UNLIMITED: PrefillBudget = PrefillBudget {
        shared: usize::MAX,
        alone: usize::MAX,
    };
}

impl Default for PrefillBudget {
    /// 128 prompt tokens per step beside decoding sequences, 512 when none decodes.
    fn default() -> Self {
        PrefillBudget {
            shared: 128,
            alone: 512,
        }
    }
}

/// What one step did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepReport {
    /// Prompt tokens run.
    pub prompt_tokens: usize,
    /// Tokens sampled (one per sequence that was past its prompt, more with accepted drafts).
    pub sampled: usize,
}

/// A sequence with the cache it runs in.
pub(super) struct Lane<'a, 'm> {
    pub cache: &'a mut KvCache,
    /// Receives every token appended to `cache`.
    pub cached: &'a mut Vec<u32>,
    pub seq: &'a mut Sequence<'m>,
    /// The slot's draft-model cache, when the generator has a draft model.
    pub draft: Option<&'a mut DraftSlot>,
    /// The target's last hidden state, when the generator has a draft head.
    pub head: Option<&'a mut HeadSlot>,
}

/// Where drafts beyond prompt lookup come from.
#[derive(Clone, Copy, Default)]
pub(super) struct Drafters<'d, 'm> {
    pub model: Option<&'d DraftModel<'m>>,
    pub head: Option<&'d DraftHead<'m>>,
}

/// Runs one step over `lanes`; `emit(lane, event)` receives the events (returns `false` to
/// cancel that lane's sequence). Returns the report and the lanes that ran, or the error and
/// the lanes whose pass failed (their caches are in an unknown state).
pub(super) fn run_step(
    lm: &dyn CausalLm,
    drafters: Drafters<'_, '_>,
    lanes: &mut [Lane<'_, '_>],
    budget: PrefillBudget,
    emit: &mut dyn FnMut(usize, SeqEvent) -> bool,
) -> Result<(StepReport, Vec<usize>), (Error, Vec<usize>)> {
    for (i, lane) in lanes.iter_mut().enumerate() {
        make_draft(drafters, lane).map_err(|e| (e, vec![i]))?;
    }
    let plan = plan(lanes, budget);
    // When every sequence samples the argmax of its last row, only those indices come back.
    let argmax = plan.iter().all(|&(i, _)| lanes[i].seq.argmax_is_enough());
    // A draft head reads the target's hidden state of each sequence's last kept row: while some
    // sequence drafts with it, the pass returns those rows too (on the CPU).
    let want_hidden = drafters.head.is_some()
        && plan
            .iter()
            .any(|&(i, _)| lanes[i].seq.speculation().draft_max > 0);
    let mut batch: Vec<SeqBatch<'_>> = Vec::with_capacity(plan.len());
    let mut next = plan.iter().peekable();
    for (i, lane) in lanes.iter_mut().enumerate() {
        let Some(&&(j, n)) = next.peek() else { break };
        if i == j {
            next.next();
            batch.push(SeqBatch {
                tokens: lane.seq.input(n),
                all_logits: lane.seq.wants_all_logits(),
                cache: &mut *lane.cache,
                media: lane.seq.media(),
            });
        }
    }
    let mut hidden: Vec<Vec<f32>> = Vec::new();
    let result = if want_hidden {
        crate::arch::run_plan_with_hidden(&lm.plan(), &mut batch).map(|out| {
            hidden = out.hidden;
            out.logits.into_iter().map(PassOut::Logits).collect()
        })
    } else if argmax {
        lm.forward_batch_argmax(&mut batch)
            .map(|ids| ids.into_iter().map(PassOut::Argmax).collect::<Vec<_>>())
    } else {
        lm.forward_batch(&mut batch)
            .map(|l| l.into_iter().map(PassOut::Logits).collect())
    };
    drop(batch);
    let ran: Vec<usize> = plan.iter().map(|&(i, _)| i).collect();
    let logits = result.map_err(|e| (e, ran.clone()))?;
    let vocab = lm.config().vocab_size;
    let mut report = StepReport::default();
    for (k, (&(i, n), logits)) in plan.iter().zip(logits).enumerate() {
        let Lane {
            cache,
            cached,
            seq,
            head,
            ..
        } = &mut lanes[i];
        cached.extend_from_slice(seq.input(n));
        if seq.prompt_left() > 0 {
            report.prompt_tokens += n;
        }
        let (len, capacity) = (cache.len(), cache.capacity());
        let took = seq.accept(n, logits, vocab, len, capacity, &mut |ev| emit(i, ev));
        report.sampled += took.sampled;
        // Roll back the rows of rejected draft tokens.
        cache.truncate(len - n + took.kept);
        cached.truncate(cached.len() - n + took.kept);
        if let (Some(slot), Some(h)) = (head.as_deref_mut(), hidden.get(k)) {
            // Rows came back for every new position, or for the last one only.
            let dim = lm.config().hidden_size;
            let rows = h.len() / dim;
            let row = if rows == n {
                took.kept.max(1) - 1
            } else {
                rows - 1
            };
            slot.hidden.clear();
            slot.hidden
                .extend_from_slice(&h[row * dim..(row + 1) * dim]);
            slot.pos = (took.kept > 0).then(|| cache.len() - 1);
        }
    }
    Ok((report, ran))
}

/// Gives a decoding sequence that speculates its draft for this step: prompt lookup first,
/// then the draft model or the draft head. A cache that cannot rewind (recurrent state) gets none; a sliding
/// window cache keeps enough extra rows to rewind the draft.
fn make_draft(drafters: Drafters<'_, '_>, lane: &mut Lane<'_, '_>) -> crate::Result<()> {
    let spec = lane.seq.speculation();
    if !spec.is_on() {
        return Ok(());
    }
    let mut room = lane.seq.draft_room(lane.cache.len(), lane.cache.capacity());
    if !lane.cache.recurrent.is_empty() {
        room = 0;
    }
    if room == 0 {
        lane.seq.set_draft(&[]);
        return Ok(());
    }
    lane.cache.keep_rewind(room);
    let mut draft = lookup_draft(lane.seq.history(), room.min(spec.lookup));
    if draft.len() < spec.draft_min.max(1) && spec.draft_max > 0 {
        if let (Some(model), Some(slot)) = (drafters.model, lane.draft.as_deref_mut()) {
            draft = model.draft(slot, lane.seq.history(), room.min(spec.draft_max))?;
        } else if let (Some(head), Some(slot)) = (drafters.head, lane.head.as_deref()) {
            lane.cache.keep_rewind(room + HEAD_EXTRA_ROWS);
            let max = room.min(spec.draft_max);
            draft = head.draft(slot, lane.cache, lane.seq.history(), max)?;
        }
    }
    lane.seq.set_draft(&draft);
    Ok(())
}

/// Which lanes run this step and how many tokens each, in lane order.
fn plan(lanes: &[Lane<'_, '_>], budget: PrefillBudget) -> Vec<(usize, usize)> {
    let decoding = lanes.iter().any(|l| l.seq.prompt_left() == 0);
    let mut budget = if decoding {
        budget.shared
    } else {
        budget.alone
    };
    let mut plan = Vec::with_capacity(lanes.len());
    for (i, lane) in lanes.iter().enumerate() {
        let left = lane.seq.prompt_left();
        if left == 0 {
            plan.push((i, lane.seq.decode_len()));
        } else if budget > 0 {
            // A media group the chunk would cut runs whole, past the budget if need be.
            let n = lane
                .seq
                .prompt_chunk(left.min(budget).min(lane.seq.chunk_cap()));
            budget = budget.saturating_sub(n);
            plan.push((i, n));
        }
    }
    plan
}
