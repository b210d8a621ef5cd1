//! Rotary positions of a sequence's new rows. Usually a row's position is its index in the
//! sequence (the cache length before it plus its offset). With multimodal rotary embeddings
//! (M-RoPE: Qwen2-VL … Qwen 3.5) every position has three axes — time, height, width — and the
//! soft tokens of an image laid out as a `rows × cols` grid ([`MediaSpan::grid`]) sit at
//! `(b, b + row, b + col)`, `b` being the position the image starts at; the text after it
//! resumes at `b + max(rows, cols)` (transformers' `get_rope_index`), so every later position
//! is shifted by `max(rows, cols) − rows · cols` per image before it.

use super::media::{MediaEmbeds, MediaSpan};

/// Where the rows of one sequence in a pass sit: row `i` is sequence index `pos0 + i`; `media`
/// gives the grids that move positions under M-RoPE.
#[derive(Clone, Copy, Debug)]
pub struct RowPositions<'a> {
    /// Sequence index of the first row (the cache length before the pass).
    pub pos0: usize,
    /// The sequence's media, if any.
    pub media: Option<&'a MediaEmbeds>,
}

impl<'a> RowPositions<'a> {
    /// Rows at `pos0 ..` with no media.
    pub fn plain(pos0: usize) -> Self {
        RowPositions { pos0, media: None }
    }

    /// Whether every row's three axes equal its sequence index (no media grid moves them).
    pub fn is_plain(&self) -> bool {
        self.media
            .is_none_or(|m| m.spans.iter().all(|s| s.grid.is_none()))
    }

    /// The `(time, height, width)` rotary positions of row `i`.
    pub fn axes(&self, i: usize) -> [usize; 3] {
        let p = self.pos0 + i;
        let Some(m) = self.media else {
            return [p; 3];
        };
        let mut shift: isize = 0;
        for s in &m.spans {
            let Some([rows, cols]) = grid_of(s, m.dim) else {
                continue;
            };
            let n = rows * cols;
            if p < s.start {
                break;
            }
            let base = (s.start as isize + shift).max(0) as usize;
            if p < s.start + n {
                let k = p - s.start;
                return [base, base + k / cols, base + k % cols];
            }
            shift += rows.max(cols) as isize - n as isize;
        }
        [(p as isize + shift).max(0) as usize; 3]
    }
}

/// A span's grid when it describes the span's rows exactly.
fn grid_of(s: &MediaSpan, dim: usize) -> Option<[usize; 2]> {
    s.grid
        .filter(|[r, c]| *r > 0 && *c > 0 && r * c == s.len(dim))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn image_grid_positions_follow_get_rope_index() {
        // 12 text ids, a 4×6 image (24 soft tokens), then text: transformers gives the image
        // (12, 12 + r, 12 + c) and the text after it 18, 19, ….
        let m = MediaEmbeds {
            spans: vec![MediaSpan {
                start: 12,
                rows: Arc::new(vec![0.0; 24]),
                key: 1,
                grid: Some([4, 6]),
                bidirectional: false,
            }],
            dim: 1,
            input_id: 0,
            mapped_ids: Vec::new(),
        };
        let p = RowPositions {
            pos0: 0,
            media: Some(&m),
        };
        assert_eq!(p.axes(11), [11; 3]);
        assert_eq!(p.axes(12), [12, 12, 12]);
        assert_eq!(p.axes(12 + 7), [12, 13, 13]);
        assert_eq!(p.axes(12 + 23), [12, 15, 17]);
        assert_eq!(p.axes(36), [18; 3]);
        let later = RowPositions {
            pos0: 40,
            media: Some(&m),
        };
        assert_eq!(later.axes(2), [24; 3]);
        assert!(!p.is_plain());
        assert!(RowPositions::plain(3).is_plain());
    }
}
