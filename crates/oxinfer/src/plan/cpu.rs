//! The CPU executor of a [`Plan`]: every op through its nn block's own CPU path (packed
//! kernels, fused attention, the thread pool), in plan order. It is also the twin that
//! `OXINFER_GPU_CHECK` compares a backend's plan runs against.

use super::batch::{gather_rows, logit_rows, split_logits, SeqRows};
use super::{Ffn, FfnBody, Layer, Mixer, Plan};
use crate::error::{Error, Result};

/// Runs `plan` over the embedded tokens `x` (`[t, dim]`, `ids` stacked as in `seqs`): appends
/// every layer's keys/values (and updates recurrent state) of each sequence, advances the
/// caches and returns the logits per sequence (of every row or of the last one, as each
/// sequence asks).
pub fn forward(
    plan: &Plan,
    ids: &[u32],
    x: Vec<f32>,
    seqs: &mut [SeqRows<'_>],
) -> Result<Vec<Vec<f32>>> {
    let x = hidden(plan, ids, x, seqs)?;
    for s in seqs.iter_mut() {
        s.cache.advance(s.len);
    }
    let (rows, counts) = logit_rows(seqs);
    let h = gather_rows(&x, plan.dim, &rows);
    let vocab = plan.head.matrix().rows;
    Ok(split_logits(logits(plan, &h, rows.len()), vocab, &counts))
}

/// Per sequence, the logits of a pass and the final-normed hidden state of the same rows.
pub struct LogitsAndHidden {
    /// `[rows, vocab]` per sequence.
    pub logits: Vec<Vec<f32>>,
    /// `[rows, dim]` per sequence.
    pub hidden: Vec<Vec<f32>>,
}

/// [`forward`], also returning per sequence the final-normed hidden state of its logit rows
/// (`[rows, dim]`: every new row, or the last one): what a drafter reading the target's hidden
/// state needs ([`crate::engine::speculative::draft_head`]).
pub fn forward_with_hidden(
    plan: &Plan,
    ids: &[u32],
    x: Vec<f32>,
    seqs: &mut [SeqRows<'_>],
) -> Result<LogitsAndHidden> {
    let x = hidden(plan, ids, x, seqs)?;
    for s in seqs.iter_mut() {
        s.cache.advance(s.len);
    }
    let (rows, counts) = logit_rows(seqs);
    let h = plan.final_norm.forward(&gather_rows(&x, plan.dim, &rows));
    let vocab = plan.head.matrix().rows;
    Ok(LogitsAndHidden {
        logits: split_logits(normed_logits(plan, &h, rows.len()), vocab, &counts),
        hidden: split_logits(h, plan.dim, &counts),
    })
}

/// The hidden state `[t, dim]` after every layer; each layer's keys/values are appended to the
/// caches, which are not advanced. Rows a backend left only in a cache's device mirror are
/// copied to the host first ([`super::KvCache::sync_host`]).
pub fn hidden(
    plan: &Plan,
    ids: &[u32],
    mut x: Vec<f32>,
    seqs: &mut [SeqRows<'_>],
) -> Result<Vec<f32>> {
    for s in seqs.iter_mut() {
        s.cache.sync_host().map_err(Error::Device)?;
    }
    let d = plan.dim;
    let mut t = ids.len();
    let mut ple = match plan.ple {
        Some(p) => Some(p.forward(ids, &x, t)?),
        None => None,
    };
    let last_only = seqs.iter().all(|s| !s.all_logits) && t > seqs.len();
    let mut sliced: Option<Sliced> = None;
    let mut skipped: Vec<usize> = Vec::new();
    for (li, l) in plan.layers.iter().enumerate() {
        if last_only && plan.last_rows_from == Some(li) {
            let last: Vec<usize> = seqs.iter().map(|s| s.row + s.len - 1).collect();
            ple = ple.map(|p| gather_rows(&p, p.len() / t, &last));
            skipped = seqs.iter().map(|s| s.len - 1).collect();
            let spans = seqs.iter().map(|s| (s.row, s.len)).collect();
            for (k, sq) in seqs.iter_mut().enumerate() {
                sq.row = k;
                sq.len = 1;
            }
            let xs = gather_rows(&x, d, &last);
            sliced = Some(Sliced {
                full: std::mem::replace(&mut x, xs),
                last,
                spans,
            });
            t = seqs.len();
        }
        layer(plan, l, li, &mut x, t, seqs, &skipped, ple.as_deref())?;
    }
    if let Some(Sliced {
        mut full,
        last,
        spans,
    }) = sliced
    {
        // Only the last rows are read from here on.
        for (k, &r) in last.iter().enumerate() {
            full[r * d..(r + 1) * d].copy_from_slice(&x[k * d..(k + 1) * d]);
        }
        x = full;
        for (sq, (row, len)) in seqs.iter_mut().zip(spans) {
            sq.row = row;
            sq.len = len;
        }
    }
    Ok(x)
}

/// While the layers run on each sequence's last row only: the full hidden state, the last
/// rows, and each sequence's rows (first, count) to restore.
struct Sliced {
    full: Vec<f32>,
    last: Vec<usize>,
    spans: Vec<(usize, usize)>,
}

/// Final norm, head and soft-cap of the hidden rows `h` (`[n, dim]`): `[n, vocab]`.
pub fn logits(plan: &Plan, h: &[f32], n: usize) -> Vec<f32> {
    normed_logits(plan, &plan.final_norm.forward(h), n)
}

/// The head (and final soft-cap) over `n` rows already through the final norm.
pub(crate) fn normed_logits(plan: &Plan, h: &[f32], n: usize) -> Vec<f32> {
    let mut logits = plan.head.forward(h, n);
    if let Some(cap) = plan.final_softcap {
        softcap(&mut logits, cap);
    }
    logits
}

/// `cap · tanh(x / cap)` on every value.
pub fn softcap(x: &mut [f32], cap: f32) {
    x.iter_mut().for_each(|v| *v = cap * (*v / cap).tanh());
}

/// `x += y`, elementwise.
fn add(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(x, y)| *x += y);
}

/// One layer over `x` (`[t, dim]`, updated in place); an error when the plan is
/// bidirectional and the layer's attention has no bidirectional form.
#[allow(clippy::too_many_arguments)]
fn layer(
    plan: &Plan,
    l: &Layer,
    li: usize,
    x: &mut [f32],
    t: usize,
    seqs: &mut [SeqRows<'_>],
    skipped: &[usize],
    ple: Option<&[f32]>,
) -> Result<()> {
    let h = l.mixer_norm.forward(x);
    let mut o = match &l.mixer {
        Mixer::Attention { op, spec } if plan.bidirectional => op
            .forward_bidirectional(&h, t, seqs, plan.ropes[spec.rope], spec)
            .ok_or_else(|| {
                Error::Request(format!("layer {li}'s attention cannot run bidirectionally"))
            })?,
        Mixer::Attention { op, spec } => {
            op.forward(&h, t, li, seqs, skipped, plan.ropes[spec.rope], spec)
        }
        Mixer::Recurrent(r) => r.forward(&h, t, li, seqs),
    };
    if let Some(n) = l.mixer_post_norm {
        n.forward_inplace(&mut o);
    }
    add(x, &o);
    let m = ffn(&l.ffn, x, t);
    add(x, &m);
    if let (Some(block), Some(inputs), Some(all)) = (l.ple, plan.ple, ple) {
        let y = block.forward(x, &inputs.layer(all, li, t), t);
        add(x, &y);
    }
    if let Some(s) = l.scalar {
        x.iter_mut().for_each(|v| *v *= s);
    }
    Ok(())
}

/// A feed-forward block on the residual stream `x` (`[t, dim]`); returns its output before the
/// residual add.
fn ffn(f: &Ffn, x: &[f32], t: usize) -> Vec<f32> {
    let h = f.norm.forward(x);
    let mut m = match f.body {
        FfnBody::Mlp(m) => m.forward(&h, t),
        FfnBody::Experts(e) => e.forward(&h, t),
    };
    if let Some((mlp_norm, experts)) = f.side_experts {
        mlp_norm.forward_inplace(&mut m);
        let e = experts.forward(x, t);
        add(&mut m, &e);
    }
    if let Some(n) = f.post_norm {
        n.forward_inplace(&mut m);
    }
    m
}
