//! Qwen 3.5's vision tower (transformers `Qwen3_5VisionModel`, Qwen3-VL's without deepstack):
//! patches `[n, 3 · frames · p²]` (merge-block order) → the Conv3d patch embedding as one
//! linear layer, plus the learned square position table bilinearly resampled to the patch grid
//! (`align_corners=True`) → pre-LayerNorm blocks (fused qkv with bias, 2-D rotary positions —
//! the first half of each head's frequencies read the patch row, the second the column,
//! `rotate_half` layout —, bidirectional attention over the image, a GELU MLP) → the merger:
//! a LayerNorm per patch, each `merge × merge` block of patches concatenated, then
//! `fc2(gelu(fc1(·)))` into the text model's width.

use super::config::VisionConfig;
use super::image_processor::VisionPatches;
use crate::error::LoadError;
use crate::loader::{TensorStore, TensorView};
use crate::nn::encoder_act::EncoderAct;
use crate::nn::encoder_attention::{encoder_attention, EncoderHeads};
use crate::nn::encoder_linear::EncoderLinear;
use crate::nn::rope::rotate_half_pairs;
use crate::nn::{LayerNorm, Linear};

/// LayerNorm epsilon of the blocks and the merger (fixed in transformers).
const NORM_EPS: f32 = 1e-6;

/// Patches one image may have: the attention's score matrix per head is `n²` floats (1 GiB
/// at this bound).
pub const MAX_PATCHES: usize = 16_384;

struct Block {
    norm1: LayerNorm,
    qkv: EncoderLinear,
    proj: EncoderLinear,
    norm2: LayerNorm,
    fc1: EncoderLinear,
    fc2: EncoderLinear,
}

/// A loaded vision tower with its merger into the text model.
pub struct VisionTower {
    cfg: VisionConfig,
    patch_embed: EncoderLinear,
    /// `[side², hidden]` learned positions of a `side × side` grid.
    pos_table: Vec<f32>,
    blocks: Vec<Block>,
    merger_norm: LayerNorm,
    merger_fc1: EncoderLinear,
    merger_fc2: EncoderLinear,
}

impl VisionTower {
    /// Loads the tower under `prefix` (`model.visual.`).
    pub fn load(
        store: &dyn TensorStore,
        cfg: VisionConfig,
        prefix: &str,
    ) -> Result<Self, LoadError> {
        let d = cfg.hidden;
        let lin = |name: &str, o, i| EncoderLinear::load(store, &format!("{prefix}{name}"), o, i);
        let norm =
            |name: &str, dim| LayerNorm::load(store, &format!("{prefix}{name}"), dim, NORM_EPS);
        let blocks = (0..cfg.depth)
            .map(|i| {
                let b = |part: &str| format!("blocks.{i}.{part}");
                Ok(Block {
                    norm1: norm(&b("norm1"), d)?,
                    qkv: lin(&b("attn.qkv.weight"), 3 * d, d)?,
                    proj: lin(&b("attn.proj.weight"), d, d)?,
                    norm2: norm(&b("norm2"), d)?,
                    fc1: lin(&b("mlp.linear_fc1.weight"), cfg.ffn, d)?,
                    fc2: lin(&b("mlp.linear_fc2.weight"), d, cfg.ffn)?,
                })
            })
            .collect::<Result<Vec<_>, LoadError>>()?;
        // The Conv3d kernel `[hidden, 3, frames, p, p]` with stride = kernel is a linear layer
        // over the flattened patch `(channel, frame, row, column)`.
        let conv = format!("{prefix}patch_embed.proj.weight");
        let (c, t, p) = (cfg.channels, cfg.temporal_patch, cfg.patch);
        let view = store.require_shape(&conv, &[d, c, t, p, p])?;
        let bias = store
            .require_shape(&format!("{prefix}patch_embed.proj.bias"), &[d])?
            .to_f32()?;
        let view = TensorView {
            shape: vec![d, cfg.patch_values()],
            ..view
        };
        let patch_embed = EncoderLinear::from_linear(Linear::from_view(view, Some(bias))?);
        let side = cfg.grid_side();
        let table = store
            .require_shape(&format!("{prefix}pos_embed.weight"), &[cfg.positions, d])?
            .to_f32()?;
        let merged = d * cfg.merge * cfg.merge;
        Ok(VisionTower {
            patch_embed,
            pos_table: table[..side * side * d].to_vec(),
            blocks,
            merger_norm: norm("merger.norm", d)?,
            merger_fc1: lin("merger.linear_fc1.weight", merged, merged)?,
            merger_fc2: lin("merger.linear_fc2.weight", cfg.out_hidden, merged)?,
            cfg,
        })
    }

    /// The tower's settings.
    pub fn config(&self) -> &VisionConfig {
        &self.cfg
    }

    /// Encodes one image's patches; returns the soft tokens `[rows · cols / merge², out_hidden]`
    /// in merge-block order (row-major over the merged grid).
    pub fn encode(&self, p: &VisionPatches) -> Result<Vec<f32>, String> {
        let c = &self.cfg;
        let n = p.rows * p.cols;
        if n == 0 || p.values.len() != n * c.patch_values() {
            return Err(format!(
                "{} pixel values for a {}×{} grid of patches of {} values",
                p.values.len(),
                p.rows,
                p.cols,
                c.patch_values()
            ));
        }
        if !p.rows.is_multiple_of(c.merge) || !p.cols.is_multiple_of(c.merge) {
            return Err(format!(
                "a {}×{} patch grid is not a multiple of the merge side {}",
                p.rows, p.cols, c.merge
            ));
        }
        if n > MAX_PATCHES {
            return Err(format!(
                "the image becomes {n} patches ({}×{}), more than the {MAX_PATCHES} the vision \
                 tower encodes at once: send a smaller image or lower the processor's \
                 size.longest_edge",
                p.rows, p.cols
            ));
        }
        let cells = BlockGrid::new(p.rows, p.cols, c.merge);
        let mut x = self.patch_embed.forward(&p.values, n);
        self.add_positions(&mut x, &cells);
        let rope = GridRope::new(c.head_dim(), c.rope_theta, &cells);
        for b in &self.blocks {
            self.block(b, &mut x, n, &rope);
        }
        Ok(self.merge(&mut x, n))
    }

    /// Adds the learned positions resampled to the patch grid (`F.interpolate`, bilinear,
    /// `align_corners=True`), each patch summing its four taps in transformers' order.
    fn add_positions(&self, x: &mut [f32], cells: &BlockGrid) {
        let (d, side) = (self.cfg.hidden, self.cfg.grid_side());
        let rows = axis_taps(cells.rows, side);
        let cols = axis_taps(cells.cols, side);
        let mut acc = vec![0f32; d];
        for (i, xr) in x.chunks_exact_mut(d).enumerate() {
            let (r, c) = cells.cell(i);
            acc.iter_mut().for_each(|v| *v = 0.0);
            for (ti, wi) in rows[r] {
                for (tj, wj) in cols[c] {
                    let w = wi * wj;
                    let e = &self.pos_table[(ti * side + tj) * d..(ti * side + tj + 1) * d];
                    acc.iter_mut().zip(e).for_each(|(a, &e)| *a += e * w);
                }
            }
            xr.iter_mut().zip(&acc).for_each(|(v, a)| *v += a);
        }
    }

    fn block(&self, b: &Block, x: &mut [f32], n: usize, rope: &GridRope) {
        let c = &self.cfg;
        let d = c.hidden;
        let mut h = x.to_vec();
        b.norm1.forward_inplace(&mut h);
        let qkv = b.qkv.forward(&h, n);
        let (mut q, mut k, mut v) = (
            Vec::with_capacity(n * d),
            Vec::with_capacity(n * d),
            Vec::with_capacity(n * d),
        );
        for row in qkv.chunks_exact(3 * d) {
            q.extend_from_slice(&row[..d]);
            k.extend_from_slice(&row[d..2 * d]);
            v.extend_from_slice(&row[2 * d..]);
        }
        rope.apply(&mut q, c.heads);
        rope.apply(&mut k, c.heads);
        let heads = EncoderHeads {
            n_heads: c.heads,
            head_dim: c.head_dim(),
            scale: 1.0 / (c.head_dim() as f32).sqrt(),
            window: None,
        };
        let a = encoder_attention(&q, &k, &v, &[n], &heads);
        let o = b.proj.forward(&a, n);
        x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
        let mut h = x.to_vec();
        b.norm2.forward_inplace(&mut h);
        let mut m = b.fc1.forward(&h, n);
        c.act.apply_all(&mut m, None);
        let m = b.fc2.forward(&m, n);
        x.iter_mut().zip(&m).for_each(|(x, m)| *x += m);
    }

    /// The merger: LayerNorm per patch, each block's `merge²` consecutive patches as one row,
    /// `fc2(gelu(fc1(row)))` (exact GELU).
    fn merge(&self, x: &mut [f32], n: usize) -> Vec<f32> {
        self.merger_norm.forward_inplace(x);
        let tokens = n / (self.cfg.merge * self.cfg.merge);
        let mut h = self.merger_fc1.forward(x, tokens);
        h.iter_mut()
            .for_each(|v| *v = EncoderAct::GeluErf.apply(*v));
        self.merger_fc2.forward(&h, tokens)
    }
}

/// Bilinear taps (`align_corners=True`) of each of `size` target positions into a source axis
/// of `side` entries: two `(index, weight)` pairs, indices clamped to the axis as transformers'
/// `_interpolation_axis_taps_weights` does (weights from the unclamped taps).
fn axis_taps(size: usize, side: usize) -> Vec<[(usize, f32); 2]> {
    (0..size)
        .map(|i| {
            let src = i as f32 * (side - 1) as f32 / (size.max(2) - 1) as f32;
            let floor = src.floor();
            let tap = |o: f32| {
                let raw = floor + o;
                let w = (1.0 - (src - raw).abs()).max(0.0);
                ((raw.max(0.0) as usize).min(side - 1), w)
            };
            [tap(0.0), tap(1.0)]
        })
        .collect()
}

/// A patch grid read in merge-block order: patch `i` is block `i / merge²` (row-major over the
/// blocks), then row-major inside its block.
struct BlockGrid {
    rows: usize,
    cols: usize,
    merge: usize,
}

impl BlockGrid {
    fn new(rows: usize, cols: usize, merge: usize) -> Self {
        BlockGrid { rows, cols, merge }
    }

    /// `(row, column)` of patch `i`.
    fn cell(&self, i: usize) -> (usize, usize) {
        let m = self.merge;
        let blocks_w = self.cols / m;
        let (block, inner) = (i / (m * m), i % (m * m));
        (
            (block / blocks_w) * m + inner / m,
            (block % blocks_w) * m + inner % m,
        )
    }
}

/// 2-D rotary angles of a patch grid: per patch, `head_dim / 4` frequencies of its row then the
/// same of its column, rotating the pairs `(j, j + head_dim / 2)` of each head.
struct GridRope {
    head_dim: usize,
    /// `[n, head_dim / 2]` each.
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl GridRope {
    fn new(head_dim: usize, theta: f64, cells: &BlockGrid) -> Self {
        let quarter = head_dim / 4;
        let spatial = head_dim / 2;
        let inv: Vec<f32> = (0..quarter)
            .map(|i| (1.0 / theta.powf((2 * i) as f64 / spatial as f64)) as f32)
            .collect();
        let n = cells.rows * cells.cols;
        let (mut cos, mut sin) = (
            Vec::with_capacity(n * spatial),
            Vec::with_capacity(n * spatial),
        );
        for i in 0..n {
            let (r, c) = cells.cell(i);
            for pos in [r as f32, c as f32] {
                for f in &inv {
                    let a = pos * f;
                    cos.push(a.cos());
                    sin.push(a.sin());
                }
            }
        }
        GridRope { head_dim, cos, sin }
    }

    /// Rotates `x` `[n, heads · head_dim]` in place.
    fn apply(&self, x: &mut [f32], heads: usize) {
        let (hd, half) = (self.head_dim, self.head_dim / 2);
        for (i, row) in x.chunks_exact_mut(heads * hd).enumerate() {
            let r = i * half..(i + 1) * half;
            for head in row.chunks_exact_mut(hd) {
                rotate_half_pairs(head, &self.cos[r.clone()], &self.sin[r.clone()]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_order_walks_each_merge_square() {
        let g = BlockGrid::new(4, 6, 2);
        let cells: Vec<_> = (0..6).map(|i| g.cell(i)).collect();
        assert_eq!(cells, [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3)]);
        assert_eq!(g.cell(23), (3, 5));
    }

    #[test]
    fn bilinear_taps_hit_the_corners() {
        let t = axis_taps(5, 3);
        assert_eq!(t[0], [(0, 1.0), (1, 0.0)]);
        assert_eq!(t[2], [(1, 1.0), (2, 0.0)]);
        assert_eq!(t[4], [(2, 1.0), (2, 0.0)]);
        assert_eq!(t[1], [(0, 0.5), (1, 0.5)]);
    }
}
