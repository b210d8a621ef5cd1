//! Rotary positions given token by token: one row of cosines and sines per token, for positions
//! that are not one index along the sequence, such as the 2-D patch grid of a vision tower
//! ([`RopeRows::axial_2d`], [`RopeRows::axial_halves`]). An encoder plan carries them per sequence
//! ([`crate::plan::encoder::RopeOf::Rows`]); the device passes upload the rows as they are.

use super::rope::rotate_half_pairs;

/// The rotation of one sequence's tokens: `cos` and `sin` `[n, half]` (row-major, token `i`'s
/// row at `i · half`), token `i` rotating the pairs `(j, j + half)` of each of its heads by row
/// `i` (transformers' `rotate_half` layout; a head's values past `2 · half` stay). With
/// `sections` > 1 the head's first `2 · half` values are that many blocks rotated each on its
/// own (`rotate_half` within the block): block `s`, of `2 w` values (`w = half / sections`),
/// rotates its pairs `(j, j + w)` by the angles `s · w + j` of the row (Gemma 4's axial rotation,
/// [`Self::axial_halves`]).
#[derive(Clone, Debug, PartialEq)]
pub struct RopeRows {
    half: usize,
    sections: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeRows {
    /// Rows `cos` / `sin` of `half` values each; `Err` when `half` is 0 or the two tables are
    /// not whole rows of the same length.
    pub fn new(half: usize, cos: Vec<f32>, sin: Vec<f32>) -> Result<Self, String> {
        if half == 0 || cos.len() != sin.len() || !cos.len().is_multiple_of(half) {
            return Err(format!(
                "rotary rows of {half} values: {} cosines and {} sines",
                cos.len(),
                sin.len()
            ));
        }
        Ok(RopeRows {
            half,
            sections: 1,
            cos,
            sin,
        })
    }

    /// The 2-D axial rotation of patches at `cells` (`(row, column)` per token, in token order)
    /// with heads of `head_dim` (≥ 4) and base `theta` (transformers' `VisionRotaryEmbedding(
    /// head_dim / 2)` read by `rot_pos_emb`, Qwen2-VL to Qwen 3.5): per token, the `head_dim / 4`
    /// frequencies `theta^(−2i / (head_dim / 2))` at its row, then the same at its column, so
    /// `half = 2 · (head_dim / 4)`.
    pub fn axial_2d(
        head_dim: usize,
        theta: f64,
        cells: impl ExactSizeIterator<Item = (usize, usize)>,
    ) -> Self {
        let quarter = (head_dim / 4).max(1);
        let spatial = 2 * quarter;
        let inv: Vec<f32> = (0..quarter)
            .map(|i| (1.0 / theta.powf((2 * i) as f64 / spatial as f64)) as f32)
            .collect();
        let n = cells.len();
        let (mut cos, mut sin) = (
            Vec::with_capacity(n * spatial),
            Vec::with_capacity(n * spatial),
        );
        for (r, c) in cells {
            for pos in [r as f32, c as f32] {
                for f in &inv {
                    let a = pos * f;
                    cos.push(a.cos());
                    sin.push(a.sin());
                }
            }
        }
        RopeRows {
            half: spatial,
            sections: 1,
            cos,
            sin,
        }
    }

    /// Gemma 4's 2-D axial rotation of patches at `cells` (`(row, column)` per token, in token
    /// order) with heads of `head_dim` (a multiple of 4) and base `theta` (transformers'
    /// `Gemma4VisionRotaryEmbedding`): the first half of each head rotated by the patch's
    /// column, the second half by its row, each half with `rotate_half` inside it (two
    /// [`Self::sections`]), both at the `head_dim / 4` frequencies `theta^(−2i / (head_dim /
    /// 2))`. The same angles as [`Self::axial_2d`] with row and column swapped; only the pairs
    /// differ.
    pub fn axial_halves(
        head_dim: usize,
        theta: f64,
        cells: impl ExactSizeIterator<Item = (usize, usize)>,
    ) -> Self {
        let swapped = Self::axial_2d(head_dim, theta, cells.map(|(r, c)| (c, r)));
        RopeRows {
            sections: 2,
            ..swapped
        }
    }

    /// Blocks of each head rotated independently (1 but for [`Self::axial_halves`]).
    pub fn sections(&self) -> usize {
        self.sections
    }

    /// Tokens (rows).
    pub fn tokens(&self) -> usize {
        self.cos.len() / self.half
    }

    /// Rotated pairs per head.
    pub fn half(&self) -> usize {
        self.half
    }

    /// The cosines, `[tokens, half]`.
    pub fn cos(&self) -> &[f32] {
        &self.cos
    }

    /// The sines, `[tokens, half]`.
    pub fn sin(&self) -> &[f32] {
        &self.sin
    }

    /// Rotates `x` (`[t, heads · head_dim]`, `t ≤ tokens`, `2 · half ≤ head_dim`) in place, row
    /// `i` by token `i`'s row.
    pub fn apply(&self, x: &mut [f32], t: usize, heads: usize, head_dim: usize) {
        debug_assert!(t <= self.tokens() && 2 * self.half <= head_dim);
        debug_assert_eq!(x.len(), t * heads * head_dim);
        let (half, w) = (self.half, self.half / self.sections);
        for (i, row) in x.chunks_exact_mut(heads * head_dim).take(t).enumerate() {
            let (cos, sin) = (
                &self.cos[i * half..(i + 1) * half],
                &self.sin[i * half..(i + 1) * half],
            );
            for head in row.chunks_exact_mut(head_dim) {
                let blocks = head[..2 * half].chunks_exact_mut(2 * w);
                for ((block, c), s) in blocks.zip(cos.chunks_exact(w)).zip(sin.chunks_exact(w)) {
                    rotate_half_pairs(block, c, s);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axial_rows_read_the_row_then_the_column() {
        let r = RopeRows::axial_2d(8, 10_000.0, [(0, 0), (2, 3)].into_iter());
        assert_eq!((r.tokens(), r.half()), (2, 4));
        // Frequencies 1 and 10000^(-1/2) = 0.01, at row 2 then column 3.
        let want = [2.0f32, 0.02, 3.0, 0.03].map(f32::cos);
        assert_eq!(&r.cos()[4..], &want);
        assert_eq!(&r.cos()[..4], &[1.0; 4]);
        let mut x: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let before = x.clone();
        r.apply(&mut x, 2, 1, 8);
        assert_eq!(&x[..8], &before[..8], "token 0 sits at the origin");
        let (c, s) = (2f32.cos(), 2f32.sin());
        assert_eq!(x[8], before[8] * c - before[12] * s);
        assert!(RopeRows::new(4, vec![0.0; 8], vec![0.0; 4]).is_err());
        assert!(RopeRows::new(0, vec![], vec![]).is_err());
    }

    #[test]
    fn axial_halves_rotate_each_half_by_column_then_row() {
        let r = RopeRows::axial_halves(8, 100.0, [(2, 3)].into_iter());
        assert_eq!((r.half(), r.sections()), (4, 2));
        // Frequencies 1 and 100^(-1/2) = 0.1, at column 3 then row 2.
        let angles = [3.0f32, 0.3, 2.0, 0.2];
        assert_eq!(r.cos(), &angles.map(f32::cos));
        let mut x: Vec<f32> = (1..=8).map(|v| v as f32).collect();
        let before = x.clone();
        r.apply(&mut x, 1, 1, 8);
        // Pairs (0, 2), (1, 3) by the column; (4, 6), (5, 7) by the row.
        for (a, b, k) in [(0, 2, 0), (1, 3, 1), (4, 6, 2), (5, 7, 3)] {
            let (c, s) = (angles[k].cos(), angles[k].sin());
            assert_eq!(x[a], before[a] * c - before[b] * s);
            assert_eq!(x[b], before[b] * c + before[a] * s);
        }
    }
}
