//! Multimodal rotary position embeddings (M-RoPE, transformers' Qwen2-VL / Qwen3-VL / Qwen 3.5
//! text rotary): each rotating frequency reads one of three position axes — time, height,
//! width ([`RowPositions::axes`]) — chosen by `mrope_section`: in consecutive blocks
//! (Qwen2-VL) or interleaved `t h w t h w …` over the first `3 · section` frequencies
//! (`mrope_interleaved`, Qwen3-VL and Qwen 3.5). Where the three axes agree (text) it is the
//! plain RoPE it wraps.

use super::rope::{rotate_half_pairs, Rope};
use crate::plan::{RopeOp, RowPositions};

/// A half-split RoPE whose frequencies each follow one position axis.
#[derive(Clone, Debug)]
pub struct MRope {
    rope: Rope,
    /// Per frequency (`dim / 2`): the axis it reads (0 time, 1 height, 2 width).
    axis: Vec<u8>,
}

impl MRope {
    /// Wraps `rope` (half-split pairs) with the `[t, h, w]` frequency counts of `sections`.
    pub fn new(rope: Rope, sections: [usize; 3], interleaved: bool) -> Result<Self, String> {
        let half = rope.dim() / 2;
        if rope.interleaved() {
            return Err("multimodal rotary needs half-split pairs".into());
        }
        if !interleaved && sections.iter().sum::<usize>() != half {
            return Err(format!(
                "mrope_section {sections:?} must sum to the {half} rotating pairs"
            ));
        }
        let axis = (0..half)
            .map(|j| {
                if interleaved {
                    match j % 3 {
                        1 if j < 3 * sections[1] => 1,
                        2 if j < 3 * sections[2] => 2,
                        _ => 0,
                    }
                } else if j < sections[0] {
                    0
                } else if j < sections[0] + sections[1] {
                    1
                } else {
                    2
                }
            })
            .collect();
        Ok(MRope { rope, axis })
    }

    /// Cosines and sines of row `i` of `pos` into `cos`/`sin` (`dim / 2` each).
    fn angles(&self, pos: &RowPositions<'_>, i: usize, cos: &mut [f32], sin: &mut [f32]) {
        let axes = pos.axes(i);
        for (j, (&f, &a)) in self.rope.inv_freq().iter().zip(&self.axis).enumerate() {
            let angle = axes[a as usize] as f32 * f;
            cos[j] = angle.cos();
            sin[j] = angle.sin();
        }
    }
}

impl RopeOp for MRope {
    fn dim(&self) -> usize {
        self.rope.dim()
    }

    fn interleaved(&self) -> bool {
        false
    }

    fn tables(&self, pos0: usize, t: usize, cos: &mut [f32], sin: &mut [f32]) {
        self.rope.tables(pos0, t, cos, sin);
    }

    fn apply(&self, x: &mut [f32], t: usize, heads: usize, head_dim: usize, pos0: usize) {
        self.rope.apply(x, t, heads, head_dim, pos0);
    }

    fn apply_rows(
        &self,
        x: &mut [f32],
        t: usize,
        heads: usize,
        head_dim: usize,
        pos: RowPositions<'_>,
    ) {
        if pos.is_plain() {
            return self.rope.apply(x, t, heads, head_dim, pos.pos0);
        }
        let half = self.rope.dim() / 2;
        let (mut cos, mut sin) = (vec![0f32; half], vec![0f32; half]);
        for (i, row) in x.chunks_exact_mut(heads * head_dim).enumerate() {
            self.angles(&pos, i, &mut cos, &mut sin);
            for h in row.chunks_exact_mut(head_dim) {
                rotate_half_pairs(h, &cos, &sin);
            }
        }
    }

    fn tables_rows(&self, pos: RowPositions<'_>, t: usize, cos: &mut [f32], sin: &mut [f32]) {
        if pos.is_plain() {
            return self.rope.tables(pos.pos0, t, cos, sin);
        }
        let half = self.rope.dim() / 2;
        for i in 0..t {
            let r = i * half..(i + 1) * half;
            self.angles(&pos, i, &mut cos[r.clone()], &mut sin[r]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{RopeConfig, RopeScaling, RopeStyle};

    fn rope() -> Rope {
        Rope::new(
            &RopeConfig {
                theta: 10_000.0,
                dim: 8,
                style: RopeStyle::Half,
                scaling: RopeScaling::None,
            },
            None,
        )
    }

    #[test]
    fn interleaved_sections_pick_axes_as_transformers() {
        // Qwen3-VL's `apply_interleaved_mrope` with sections [2, 1, 1] over 4 frequencies:
        // t h w t.
        let m = MRope::new(rope(), [2, 1, 1], true).unwrap();
        assert_eq!(m.axis, [0, 1, 2, 0]);
        let m = MRope::new(rope(), [2, 1, 1], false).unwrap();
        assert_eq!(m.axis, [0, 0, 1, 2]);
        assert!(MRope::new(rope(), [2, 2, 2], false).is_err());
    }

    #[test]
    fn text_positions_rotate_as_the_plain_rope() {
        let m = MRope::new(rope(), [2, 1, 1], true).unwrap();
        let x: Vec<f32> = (0..3 * 16).map(|i| (i as f32 * 0.37).sin()).collect();
        let (mut a, mut b) = (x.clone(), x);
        rope().apply(&mut a, 3, 1, 16, 5);
        let media = crate::plan::media::MediaEmbeds {
            spans: Vec::new(),
            dim: 1,
            input_id: 0,
            mapped_ids: Vec::new(),
        };
        let pos = RowPositions {
            pos0: 5,
            media: Some(&media),
        };
        m.apply_rows(&mut b, 3, 1, 16, pos);
        assert_eq!(a, b);
    }
}
