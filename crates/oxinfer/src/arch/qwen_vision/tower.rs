//! Qwen 3.5's vision tower (transformers `Qwen3_5VisionModel`, Qwen3-VL's without deepstack):
//! patches `[n, 3 · frames · p²]` (merge-block order) → the Conv3d patch embedding as one
//! linear layer, plus the learned square position table bilinearly resampled to the patch grid
//! (`align_corners=True`) → pre-LayerNorm blocks (qkv with bias, 2-D rotary positions — the
//! first half of each head's frequencies read the patch row, the second the column,
//! `rotate_half` layout —, bidirectional attention over the image, a GELU MLP) → the merger:
//! a LayerNorm per patch, each `merge × merge` block of patches concatenated, then
//! `fc2(gelu(fc1(·)))` into the text model's width.
//!
//! The blocks and the merger's LayerNorm are one pre-norm [`EncoderPlan`] (the fused qkv split
//! into its query, key and value rows at load, the grid rotation as [`RopeRows`], the merger's
//! LayerNorm as the plan's final norm), which [`encoder::run`] offers whole to the installed
//! backend (CUDA, wgpu) and runs on the CPU otherwise; the patch embedding, the learned
//! positions and the rest of the merger run on the host.

use super::config::VisionConfig;
use super::image_processor::VisionPatches;
use crate::error::LoadError;
use crate::loader::{TensorStore, TensorView};
use crate::nn::encoder_act::EncoderAct;
use crate::nn::encoder_attention::EncoderHeads;
use crate::nn::encoder_linear::{split_rows, EncoderLinear};
use crate::nn::{LayerNorm, Linear, RopeRows};
use crate::plan::encoder::{self, EncoderLayer, EncoderPlan, ExtraNorms, NormOrder, RopeOf};

/// LayerNorm epsilon of the blocks and the merger (fixed in transformers).
const NORM_EPS: f32 = 1e-6;

/// Patches one image may have: the attention's score matrix per head is `n²` floats (1 GiB
/// at this bound).
pub const MAX_PATCHES: usize = 16_384;

struct Block {
    norm1: LayerNorm,
    /// Query, key and value: the rows of the fused `attn.qkv` (`[3 hidden, hidden]`, with its
    /// bias) in that order.
    q: EncoderLinear,
    k: EncoderLinear,
    v: EncoderLinear,
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
                let qkv = format!("{prefix}{}", b("attn.qkv.weight"));
                let [q, k, v] = split_rows(store, &qkv, [d; 3], d)?;
                Ok(Block {
                    norm1: norm(&b("norm1"), d)?,
                    q,
                    k,
                    v,
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
        let mut out = self.encode_batch(std::slice::from_ref(p))?;
        out.pop()
            .ok_or_else(|| "vision tower: no output".to_string())
    }

    /// Encodes several grids of patches (a video's frame groups) in one pass of the blocks,
    /// each attending only to its own patches (transformers' `cu_seqlens`); returns each one's
    /// soft tokens as [`Self::encode`] does.
    pub fn encode_batch(&self, ps: &[VisionPatches]) -> Result<Vec<Vec<f32>>, String> {
        let c = &self.cfg;
        let mut cells = Vec::with_capacity(ps.len());
        let mut x = Vec::new();
        for p in ps {
            let n = self.check(p)?;
            let grid = BlockGrid::new(p.rows, p.cols, c.merge);
            let mut xi = self.patch_embed.forward(&p.values, n);
            self.add_positions(&mut xi, &grid);
            // One image (the usual case) keeps its rows; groups are appended.
            if x.is_empty() {
                x = xi;
            } else {
                x.extend_from_slice(&xi);
            }
            cells.push(grid);
        }
        let x = self.blocks(x, &cells)?;
        let mut first = 0;
        Ok(cells
            .iter()
            .map(|g| {
                let n = g.rows * g.cols;
                let rows = &x[first * c.hidden..(first + n) * c.hidden];
                first += n;
                self.merge(rows, n)
            })
            .collect())
    }

    /// The patch count of `p`, or why the tower cannot encode it.
    fn check(&self, p: &VisionPatches) -> Result<usize, String> {
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
        Ok(n)
    }

    /// The blocks and the merger's LayerNorm over the embedded patches `x` (`[Σ n, hidden]`:
    /// the patches of each grid of `cells` in merge-block order, one grid after the other) as
    /// one [`EncoderPlan`], each grid its own attention sequence; returns `[Σ n, hidden]`.
    fn blocks(&self, x: Vec<f32>, cells: &[BlockGrid]) -> Result<Vec<f32>, String> {
        let c = &self.cfg;
        let lens: Vec<usize> = cells.iter().map(|g| g.rows * g.cols).collect();
        let rows: Vec<RopeRows> = cells
            .iter()
            .map(|g| {
                let grid = (0..g.rows * g.cols).map(|i| g.cell(i));
                RopeRows::axial_2d(c.head_dim(), c.rope_theta, grid)
            })
            .collect();
        let rope_of = Some(RopeOf::Rows(&rows));
        let layers = self
            .blocks
            .iter()
            .map(|b| EncoderLayer {
                q: &b.q,
                k: &b.k,
                v: &b.v,
                o: &b.proj,
                attn_norm: Some((&b.norm1).into()),
                window: None,
                rope_of,
                gate: None,
                up: &b.fc1,
                down: &b.fc2,
                ffn_norm: (&b.norm2).into(),
                extra_norms: ExtraNorms::default(),
            })
            .collect();
        let plan = EncoderPlan {
            layers,
            order: NormOrder::Pre {
                final_norm: Some((&self.merger_norm).into()),
            },
            heads: EncoderHeads {
                n_heads: c.heads,
                n_kv_heads: c.heads,
                head_dim: c.head_dim(),
                scale: 1.0 / (c.head_dim() as f32).sqrt(),
                window: None,
            },
            act: c.act,
            dim: c.hidden,
        };
        encoder::run(&plan, x, &lens).map_err(|e| format!("vision tower: {e}"))
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

    /// The merger after its LayerNorm (the blocks' plan ran that): each block's `merge²`
    /// consecutive patches of `x` (`[n, hidden]`) as one row, `fc2(gelu(fc1(row)))` (exact
    /// GELU).
    fn merge(&self, x: &[f32], n: usize) -> Vec<f32> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::safetensors::SafetensorsModel;
    use crate::nn::encoder_attention::encoder_attention;
    use std::path::Path;

    /// One block as the tower ran it before its blocks became a plan (the fused qkv in one
    /// product, the rotation and attention on the host): the twin of the plan path.
    fn host_block(
        c: &VisionConfig,
        b: &Block,
        qkv: &EncoderLinear,
        x: &mut [f32],
        rope: &RopeRows,
    ) {
        let (d, n) = (c.hidden, x.len() / c.hidden);
        let mut h = x.to_vec();
        b.norm1.forward_inplace(&mut h);
        let qkv = qkv.forward(&h, n);
        let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
        for row in qkv.chunks_exact(3 * d) {
            q.extend_from_slice(&row[..d]);
            k.extend_from_slice(&row[d..2 * d]);
            v.extend_from_slice(&row[2 * d..]);
        }
        rope.apply(&mut q, n, c.heads, c.head_dim());
        rope.apply(&mut k, n, c.heads, c.head_dim());
        let heads = EncoderHeads {
            n_heads: c.heads,
            n_kv_heads: c.heads,
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

    /// The tiny fixture's blocks and merger norm as one plan against the host loop above, over
    /// random embedded patches of a 4 × 6 grid.
    #[test]
    fn the_blocks_plan_matches_the_host_loop() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/qwen35-vl-tiny");
        let store = SafetensorsModel::open(&dir).unwrap();
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
        let err = |what| LoadError::Field {
            path: dir.clone(),
            what,
        };
        let cfg = VisionConfig::from_json(&json["vision_config"], &err).unwrap();
        let prefix = "model.visual.";
        let tower = VisionTower::load(&store, cfg.clone(), prefix).unwrap();
        let (d, cells) = (cfg.hidden, BlockGrid::new(4, 6, cfg.merge));
        let n = 24;
        let mut seed = 0x9e37_79b9u32;
        let x: Vec<f32> = (0..n * d)
            .map(|_| {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (seed >> 8) as f32 / (1 << 23) as f32 - 1.0
            })
            .collect();
        let plan = tower
            .blocks(x.clone(), std::slice::from_ref(&cells))
            .unwrap();
        let rope = RopeRows::axial_2d(
            cfg.head_dim(),
            cfg.rope_theta,
            (0..n).map(|i| cells.cell(i)),
        );
        let x_first = x.clone();
        let mut host = x;
        for (i, b) in tower.blocks.iter().enumerate() {
            let name = format!("{prefix}blocks.{i}.attn.qkv.weight");
            let qkv = EncoderLinear::load(&store, &name, 3 * d, d).unwrap();
            host_block(&cfg, b, &qkv, &mut host, &rope);
        }
        tower.merger_norm.forward_inplace(&mut host);
        let diff = plan
            .iter()
            .zip(&host)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        println!("blocks plan against the host loop: max diff {diff:e}");
        assert!(
            diff <= 1e-5,
            "the plan differs from the host loop by {diff}"
        );
        // A grid that does not fit the rows given is an error, not a panic.
        assert!(tower
            .blocks(vec![0.0; 5 * d], std::slice::from_ref(&cells))
            .is_err());
        // Two grids in one pass (a video's frame groups): each attends to its own patches only,
        // so each gets the rows of a pass of its own.
        let small = BlockGrid::new(2, 2, cfg.merge);
        let xs: Vec<f32> = (0..4 * d).map(|i| (i % 7) as f32 * 0.25 - 0.75).collect();
        let alone = tower
            .blocks(xs.clone(), std::slice::from_ref(&small))
            .unwrap();
        let both = tower
            .blocks([x_first, xs].concat(), &[cells, small])
            .unwrap();
        let gap = both
            .iter()
            .zip(plan.iter().chain(&alone))
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            gap <= 1e-5,
            "a batched pass differs from single ones by {gap}"
        );
    }

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
