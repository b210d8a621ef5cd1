//! Bookkeeping of a multi-sequence batch: the rows of each sequence inside the stacked
//! activations `[total_tokens, dim]`, their positions, and which rows need logits.

use crate::error::{Error, Result};
use crate::nn::{KvCache, Linear, RmsNorm, SeqRows};

/// One sequence of a batch: new tokens and the cache they extend.
pub struct SeqBatch<'a> {
    /// New tokens, at positions `cache.len() ..`.
    pub tokens: &'a [u32],
    pub cache: &'a mut KvCache,
    /// Logits of every new position (else of the last one only).
    pub all_logits: bool,
}

/// Where one sequence's rows lie in the stacked activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqSpan {
    /// First row in the stacked `[total, dim]` activations.
    pub row: usize,
    /// Number of new tokens.
    pub len: usize,
    /// Position of the first new token (= cached positions before this pass).
    pub pos0: usize,
}

/// Validates a batch and lays out its sequences: returns the stacked token ids and the span
/// of each sequence.
pub fn layout(batch: &[SeqBatch<'_>]) -> Result<(Vec<u32>, Vec<SeqSpan>)> {
    let mut ids = Vec::new();
    let mut spans = Vec::with_capacity(batch.len());
    for s in batch {
        if s.tokens.is_empty() {
            return Err(Error::Request("no tokens to run".into()));
        }
        let pos0 = s.cache.len();
        if pos0 + s.tokens.len() > s.cache.capacity() {
            return Err(Error::Request(format!(
                "context overflow: {pos0} cached + {} new tokens exceed the context of {}",
                s.tokens.len(),
                s.cache.capacity()
            )));
        }
        spans.push(SeqSpan {
            row: ids.len(),
            len: s.tokens.len(),
            pos0,
        });
        ids.extend_from_slice(s.tokens);
    }
    Ok((ids, spans))
}

/// Copies the rows that need logits (every row, or each sequence's last) out of the stacked
/// hidden states `x` (`[total, dim]`): returns them stacked, with the row count per sequence.
pub fn logit_rows(
    x: &[f32],
    dim: usize,
    batch: &[SeqBatch<'_>],
    spans: &[SeqSpan],
) -> (Vec<f32>, Vec<usize>) {
    let mut rows = Vec::new();
    let mut counts = Vec::with_capacity(spans.len());
    for (s, sp) in batch.iter().zip(spans) {
        let (first, n) = if s.all_logits {
            (sp.row, sp.len)
        } else {
            (sp.row + sp.len - 1, 1)
        };
        rows.extend_from_slice(&x[first * dim..(first + n) * dim]);
        counts.push(n);
    }
    (rows, counts)
}

/// Splits stacked logits `[sum(counts), vocab]` into one buffer per sequence.
pub fn split_logits(logits: Vec<f32>, vocab: usize, counts: &[usize]) -> Vec<Vec<f32>> {
    if counts.len() == 1 {
        return vec![logits];
    }
    let mut out = Vec::with_capacity(counts.len());
    let mut at = 0;
    for &n in counts {
        out.push(logits[at * vocab..(at + n) * vocab].to_vec());
        at += n;
    }
    out
}

/// Each sequence's rows and cache, as the blocks of one pass take them.
pub fn seq_rows<'a>(batch: &'a mut [SeqBatch<'_>], spans: &[SeqSpan]) -> Vec<SeqRows<'a>> {
    batch
        .iter_mut()
        .zip(spans)
        .map(|(s, sp)| SeqRows {
            row: sp.row,
            len: sp.len,
            cache: &mut *s.cache,
        })
        .collect()
}

/// Ends a pass: advances every cache by its new tokens, then runs the final norm and the output
/// head (soft-capped when `softcap` is given) on the rows that need logits (`x` is the stacked
/// `[total, dim]` hidden state). Returns the logits per sequence.
pub fn finish(
    batch: &mut [SeqBatch<'_>],
    spans: &[SeqSpan],
    x: &[f32],
    norm: &RmsNorm,
    head: &Linear,
    softcap: Option<f32>,
) -> Vec<Vec<f32>> {
    for (s, sp) in batch.iter_mut().zip(spans) {
        s.cache.advance(sp.len);
    }
    let d = head.n_in;
    let (rows, counts) = logit_rows(x, d, batch, spans);
    let h = norm.forward(&rows);
    let mut logits = head.forward(&h, h.len() / d);
    if let Some(cap) = softcap {
        logits.iter_mut().for_each(|v| *v = cap * (*v / cap).tanh());
    }
    split_logits(logits, head.n_out, &counts)
}
