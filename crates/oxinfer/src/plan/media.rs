//! Soft tokens of media inputs (images, audio) injected into a sequence: rows that replace the
//! token embeddings at given positions, the placeholder ids there swapped for the model's
//! input id first (so token-indexed inputs such as Gemma 4's per-layer embeddings read what
//! transformers reads). A prefill chunk may cover any part of a span, except of a span whose
//! soft tokens attend to each other both ways ([`MediaSpan::bidirectional`]): a pass holds such
//! a group whole or none of it ([`MediaEmbeds::cut_group`]).

use super::batch::SeqBatch;
use std::ops::Range;
use std::sync::Arc;

/// One input's soft tokens at positions `start .. start + n` of a sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct MediaSpan {
    /// First position (absolute, in the sequence).
    pub start: usize,
    /// `[n, dim]` rows in the text model's embedding space.
    pub rows: Arc<Vec<f32>>,
    /// Identity of the input (a content hash): spans with equal keys and starts hold the same
    /// rows, so a cached prefix through them can be reused.
    pub key: u64,
    /// The soft tokens as a `[rows, cols]` grid (row-major), for models whose rotary positions
    /// are multimodal ([`super::positions`]); `None`: they take plain positions.
    pub grid: Option<[usize; 2]>,
    /// The soft tokens attend to each other both ways (Gemma 4's
    /// `use_bidirectional_attention: "vision"`): with the spans next to it that do too, the
    /// span is one group of [`MediaEmbeds::groups`].
    pub bidirectional: bool,
}

impl MediaSpan {
    /// Number of positions (rows) of `dim` values.
    pub fn len(&self, dim: usize) -> usize {
        self.rows.len() / dim.max(1)
    }
}

/// Every media span of one sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct MediaEmbeds {
    /// Spans in position order, not overlapping.
    pub spans: Vec<MediaSpan>,
    /// Width of each row (the text model's hidden size).
    pub dim: usize,
    /// Id fed to the token-indexed inputs at span positions.
    pub input_id: u32,
    /// Ids that read as `input_id` wherever they appear in the sequence, generated ones
    /// included (Gemma 4: its image, audio and video placeholder ids, as transformers'
    /// placeholder mask maps them to the pad token).
    pub mapped_ids: Vec<u32>,
}

impl MediaEmbeds {
    /// How much of a cached prefix of `common` positions, written with `cached` media, stays
    /// valid for these media: up to the first span that the two disagree on.
    pub fn agreed_prefix(this: Option<&Self>, cached: Option<&Self>, common: usize) -> usize {
        fn spans(m: Option<&MediaEmbeds>) -> &[MediaSpan] {
            m.map_or(&[], |m| &m.spans)
        }
        let mut limit = common;
        for s in spans(this).iter().chain(spans(cached)) {
            if s.start >= limit {
                continue;
            }
            let same = |m: Option<&Self>| {
                spans(m)
                    .iter()
                    .any(|o| o.start == s.start && o.key == s.key && o.rows.len() == s.rows.len())
            };
            if !(same(this) && same(cached)) {
                limit = s.start;
            }
        }
        limit
    }

    /// The groups of positions whose tokens attend to each other both ways, in order: each
    /// run of adjacent bidirectional spans (transformers' `get_block_sequence_ids_for_mask`
    /// groups consecutive vision tokens; an image's start and end markers are text between).
    pub fn groups(&self) -> Vec<Range<usize>> {
        let mut out: Vec<Range<usize>> = Vec::new();
        for s in self.spans.iter().filter(|s| s.bidirectional) {
            let r = s.start..s.start + s.len(self.dim);
            match out.last_mut() {
                Some(last) if last.end == r.start => last.end = r.end,
                _ if r.is_empty() => {}
                _ => out.push(r),
            }
        }
        out
    }

    /// The group that a boundary at position `pos` (between `pos − 1` and `pos`) cuts, if any.
    pub fn cut_group(&self, pos: usize) -> Option<Range<usize>> {
        self.groups()
            .into_iter()
            .find(|g| g.start < pos && pos < g.end)
    }

    /// Whether a group has positions in `range`.
    pub fn has_group_in(&self, range: Range<usize>) -> bool {
        self.groups()
            .iter()
            .any(|g| g.start < range.end && range.start < g.end)
    }

    /// `pos` moved back to the start of the group it cuts (a cached prefix ending inside a
    /// group is reused up to the group only).
    pub fn uncut_prefix(&self, pos: usize) -> usize {
        self.cut_group(pos).map_or(pos, |g| g.start)
    }

    /// How many of `n` wanted tokens a pass from position `pos` (not inside a group) runs so
    /// that it ends outside every group: fewer, up to the start of the group the end would
    /// cut, or, when that group starts at `pos`, more, through its end.
    pub fn uncut_chunk(&self, pos: usize, n: usize) -> usize {
        match self.cut_group(pos + n) {
            Some(g) if g.start > pos => g.start - pos,
            Some(g) => g.end - pos,
            None => n,
        }
    }
}

/// One sequence's media in a stacked pass: its first row, first position, new tokens.
pub struct Placed {
    row: usize,
    pos0: usize,
    len: usize,
    media: Arc<MediaEmbeds>,
}

/// The media of every sequence of `batch` with their places in the stacked rows (call before
/// [`super::batch::layout`], which stacks the sequences in this order).
pub fn collect(batch: &[SeqBatch<'_>]) -> Vec<Placed> {
    let mut row = 0;
    let mut out = Vec::new();
    for s in batch {
        if let Some(m) = &s.media {
            out.push(Placed {
                row,
                pos0: s.cache.len(),
                len: s.tokens.len(),
                media: m.clone(),
            });
        }
        row += s.tokens.len();
    }
    out
}

/// Calls `f(row, span, index in span)` for every new position inside a span.
fn each_position(placed: &[Placed], mut f: impl FnMut(usize, &MediaSpan, usize, &MediaEmbeds)) {
    for p in placed {
        for s in &p.media.spans {
            let n = s.len(p.media.dim);
            let from = s.start.max(p.pos0);
            let to = (s.start + n).min(p.pos0 + p.len);
            for pos in from..to {
                f(p.row + pos - p.pos0, s, pos - s.start, &p.media);
            }
        }
    }
}

/// Replaces the ids at span positions, and the mapped ids anywhere, by the model's input id.
pub fn substitute_ids(placed: &[Placed], ids: &mut [u32]) {
    for p in placed {
        for id in &mut ids[p.row..p.row + p.len] {
            if p.media.mapped_ids.contains(id) {
                *id = p.media.input_id;
            }
        }
    }
    each_position(placed, |row, _, _, m| ids[row] = m.input_id);
}

/// Replaces the embedded rows (`x` `[t, dim]`) at span positions by the soft tokens.
pub fn overwrite_rows(placed: &[Placed], x: &mut [f32], dim: usize) {
    each_position(placed, |row, s, i, m| {
        if m.dim == dim {
            x[row * dim..(row + 1) * dim].copy_from_slice(&s.rows[i * dim..(i + 1) * dim]);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn media(spans: &[(usize, u64)]) -> MediaEmbeds {
        MediaEmbeds {
            spans: spans
                .iter()
                .map(|&(start, key)| MediaSpan {
                    start,
                    rows: Arc::new(vec![key as f32; 4]),
                    key,
                    grid: None,
                    bidirectional: false,
                })
                .collect(),
            dim: 2,
            input_id: 0,
            mapped_ids: vec![5],
        }
    }

    #[test]
    fn a_chunk_gets_the_rows_of_the_span_part_it_covers() {
        let m = Arc::new(media(&[(3, 7)]));
        // Positions 4..6 run now: position 4 is the span's second row, 5 is past it.
        let placed = vec![Placed {
            row: 1,
            pos0: 4,
            len: 2,
            media: m,
        }];
        let mut ids = vec![9, 9, 5];
        substitute_ids(&placed, &mut ids);
        assert_eq!(ids, [9, 0, 0]);
        let mut x = vec![1.0; 6];
        overwrite_rows(&placed, &mut x, 2);
        assert_eq!(x, [1.0, 1.0, 7.0, 7.0, 1.0, 1.0]);
    }

    #[test]
    fn cached_prefix_stops_at_the_first_other_input() {
        let (a, b) = (media(&[(2, 1), (10, 2)]), media(&[(2, 1), (10, 3)]));
        assert_eq!(MediaEmbeds::agreed_prefix(Some(&a), Some(&a), 20), 20);
        assert_eq!(MediaEmbeds::agreed_prefix(Some(&a), Some(&b), 20), 10);
        assert_eq!(MediaEmbeds::agreed_prefix(Some(&a), None, 20), 2);
        assert_eq!(MediaEmbeds::agreed_prefix(None, Some(&b), 5), 2);
        assert_eq!(MediaEmbeds::agreed_prefix(None, None, 5), 5);
    }

    /// Spans `(start, rows, bidirectional)` of width 1.
    fn grouped(spans: &[(usize, usize, bool)]) -> MediaEmbeds {
        MediaEmbeds {
            spans: spans
                .iter()
                .map(|&(start, n, bidirectional)| MediaSpan {
                    start,
                    rows: Arc::new(vec![0.0; n]),
                    key: start as u64,
                    grid: None,
                    bidirectional,
                })
                .collect(),
            dim: 1,
            input_id: 0,
            mapped_ids: Vec::new(),
        }
    }

    /// Adjacent bidirectional spans make one group, others none; a boundary inside a group
    /// moves back to its start (prefixes) or to either side (chunks).
    #[test]
    fn groups_and_the_boundaries_that_keep_them_whole() {
        let m = grouped(&[(2, 4, true), (6, 3, true), (12, 5, true), (20, 4, false)]);
        assert_eq!(m.groups(), [2..9, 12..17]);
        assert_eq!(m.cut_group(5), Some(2..9));
        assert_eq!(m.cut_group(2), None);
        assert_eq!(m.cut_group(9), None);
        assert_eq!(m.cut_group(22), None);
        assert_eq!(m.uncut_prefix(13), 12);
        assert_eq!(m.uncut_prefix(10), 10);
        // From 0, 4 tokens would end inside 2..9: 2; from 2 (its start): through 9.
        assert_eq!(m.uncut_chunk(0, 4), 2);
        assert_eq!(m.uncut_chunk(2, 4), 7);
        assert_eq!(m.uncut_chunk(9, 5), 3);
        assert_eq!(m.uncut_chunk(17, 5), 5);
        assert!(m.has_group_in(8..10));
        assert!(!m.has_group_in(9..12));
        assert!(!m.has_group_in(17..30));
        assert!(grouped(&[(0, 4, false)]).groups().is_empty());
    }
}
