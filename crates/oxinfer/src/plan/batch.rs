//! Bookkeeping of a multi-sequence batch: the rows of each sequence inside the stacked
//! activations `[total_tokens, dim]`, the cache each extends, and which rows need logits.

use super::kv_cache::KvCache;
use super::media::MediaEmbeds;
use super::positions::RowPositions;
use crate::error::{Error, Result};
use std::sync::Arc;

/// One sequence of a batch: new tokens and the cache they extend.
pub struct SeqBatch<'a> {
    /// New tokens, at positions `cache.len() ..`.
    pub tokens: &'a [u32],
    pub cache: &'a mut KvCache,
    /// Logits of every new position (else of the last one only).
    pub all_logits: bool,
    /// Soft tokens of media inputs replacing the embeddings at their positions.
    pub media: Option<Arc<MediaEmbeds>>,
}

/// One sequence's rows in a stacked pass `[total, dim]` and the cache they extend. The cache
/// still holds the previous positions only (it advances after the whole pass), so the new rows
/// are at positions `cache.len() ..`.
pub struct SeqRows<'c> {
    /// First row in the stacked activations.
    pub row: usize,
    /// Number of new tokens.
    pub len: usize,
    /// Logits of every new row are wanted (else of the last one).
    pub all_logits: bool,
    pub cache: &'c mut KvCache,
    /// The sequence's media (their grids move rotary positions under M-RoPE).
    pub media: Option<Arc<MediaEmbeds>>,
}

impl SeqRows<'_> {
    /// The rows whose logits are wanted.
    pub fn logit_rows(&self) -> std::ops::Range<usize> {
        let first = if self.all_logits {
            self.row
        } else {
            self.row + self.len - 1
        };
        first..self.row + self.len
    }

    /// The rotary positions of the new rows.
    pub fn positions(&self) -> RowPositions<'_> {
        RowPositions {
            pos0: self.cache.len(),
            media: self.media.as_deref(),
        }
    }
}

/// Validates a batch and stacks its sequences: returns the token ids of every sequence and
/// each sequence's rows. A sequence's pass may not begin or end inside one of its media groups
/// ([`MediaEmbeds::groups`]: their tokens attend to each other both ways, so every layer needs
/// the whole group's keys at once).
pub fn layout<'a>(batch: &'a mut [SeqBatch<'_>]) -> Result<(Vec<u32>, Vec<SeqRows<'a>>)> {
    let mut ids = Vec::new();
    let mut seqs = Vec::with_capacity(batch.len());
    for s in batch.iter_mut() {
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
        let end = pos0 + s.tokens.len();
        if let Some(m) = &s.media {
            if let Some(g) = m.cut_group(pos0).or_else(|| m.cut_group(end)) {
                return Err(Error::Request(format!(
                    "a pass over positions {pos0}..{end} cuts the media group at positions \
                     {}..{} (its soft tokens attend to each other both ways and run in one pass)",
                    g.start, g.end
                )));
            }
        }
        seqs.push(SeqRows {
            row: ids.len(),
            len: s.tokens.len(),
            all_logits: s.all_logits,
            cache: &mut *s.cache,
            media: s.media.clone(),
        });
        ids.extend_from_slice(s.tokens);
    }
    Ok((ids, seqs))
}

/// Every sequence's logit rows in output order, and how many belong to each sequence.
pub fn logit_rows(seqs: &[SeqRows<'_>]) -> (Vec<usize>, Vec<usize>) {
    let mut rows = Vec::new();
    let mut counts = Vec::with_capacity(seqs.len());
    for s in seqs {
        let r = s.logit_rows();
        counts.push(r.len());
        rows.extend(r);
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

/// Rows `rows` of the row-major matrix `m` (`width` columns), stacked.
pub fn gather_rows(m: &[f32], width: usize, rows: &[usize]) -> Vec<f32> {
    rows.iter()
        .flat_map(|&r| m[r * width..(r + 1) * width].iter().copied())
        .collect()
}
