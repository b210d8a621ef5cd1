//! Gemma 4's vision tower (transformers `Gemma4VisionModel` + `Gemma4MultimodalEmbedder`):
//! patches `[n, 3·p²]` → a linear patch embedding plus learned x and y position embeddings →
//! encoder layers (bidirectional attention with q/k RMS norms, an unscaled v norm and 2-D
//! axial RoPE — the first half of each head rotated by the patch column, the second by its
//! row —, sandwich norms, a tanh-GELU gated MLP, clippable linears) → k×k average pooling by
//! patch position, × √hidden, optional standardization → an unscaled RMS norm and the
//! projection into the text embedding space.
//!
//! The encoder layers run as one [`EncoderPlan`] ([`encoder::run`]: whole on a CUDA or wgpu
//! device that takes it, else on the CPU); the patch embedding, the position tables, the
//! pooling, the standardization and the projection stay on the host.

use super::clipped::load_encoder;
use crate::error::LoadError;
use crate::loader::TensorStore;
use crate::nn::encoder_act::EncoderAct;
use crate::nn::encoder_attention::EncoderHeads;
use crate::nn::encoder_linear::EncoderLinear;
use crate::nn::{Linear, RmsNorm, RopeRows};
use crate::plan::encoder::{self, EncoderLayer, EncoderPlan, ExtraNorms, NormOrder, RopeOf};
use serde_json::Value;

/// Shape and settings of the tower (`vision_config`).
#[derive(Clone, Debug, PartialEq)]
pub struct VisionConfig {
    pub hidden: usize,
    pub ffn: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub eps: f32,
    /// Patch side in pixels.
    pub patch: usize,
    /// Side of the pooling window in patches.
    pub pool: usize,
    /// Rows of each position-embedding table (largest patch coordinate + 1).
    pub positions: usize,
    pub rope_theta: f64,
    pub standardize: bool,
}

impl VisionConfig {
    /// Reads `vision_config` with transformers' defaults for absent fields; `err` names the
    /// field at fault.
    pub fn from_json(v: &Value, err: &dyn Fn(String) -> LoadError) -> Result<Self, LoadError> {
        let num = |k: &str, d: usize| -> Result<usize, LoadError> {
            match v.get(k) {
                None | Some(Value::Null) => Ok(d),
                Some(x) => x
                    .as_u64()
                    .map(|x| x as usize)
                    .ok_or_else(|| err(format!("vision_config.{k} must be a whole number"))),
            }
        };
        let heads = num("num_attention_heads", 12)?;
        let hidden = num("hidden_size", 768)?;
        if let Some(a) = v.get("hidden_activation").and_then(Value::as_str) {
            if a != "gelu_pytorch_tanh" {
                return Err(err(format!(
                    "vision_config.hidden_activation {a} is not supported"
                )));
            }
        }
        let rope = v.get("rope_parameters");
        if let Some(t) = rope
            .and_then(|r| r.get("rope_type"))
            .and_then(Value::as_str)
        {
            if t != "axial" {
                return Err(err(format!(
                    "vision_config rope_type {t} is not supported (axial is)"
                )));
            }
        }
        let cfg = VisionConfig {
            hidden,
            ffn: num("intermediate_size", 3072)?,
            layers: num("num_hidden_layers", 16)?,
            heads,
            kv_heads: num("num_key_value_heads", heads)?,
            head_dim: num("head_dim", hidden / heads.max(1))?,
            eps: v
                .get("rms_norm_eps")
                .and_then(Value::as_f64)
                .unwrap_or(1e-6) as f32,
            patch: num("patch_size", 16)?,
            pool: num("pooling_kernel_size", 3)?,
            positions: num("position_embedding_size", 10240)?,
            rope_theta: rope
                .and_then(|r| r.get("rope_theta"))
                .and_then(Value::as_f64)
                .unwrap_or(100.0),
            standardize: v
                .get("standardize")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        };
        if cfg.heads == 0
            || cfg.kv_heads == 0
            || !cfg.heads.is_multiple_of(cfg.kv_heads)
            || !cfg.head_dim.is_multiple_of(4)
            || cfg.patch == 0
            || cfg.pool == 0
        {
            return Err(err(format!(
                "vision_config: {} heads, {} kv heads, head_dim {}, patch {}, pooling {} are not \
                 a usable shape",
                cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.patch, cfg.pool
            )));
        }
        Ok(cfg)
    }
}

/// One encoder layer's weights (its projections with their clamps).
struct VisionLayer {
    input_norm: RmsNorm,
    q: EncoderLinear,
    k: EncoderLinear,
    v: EncoderLinear,
    o: EncoderLinear,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    post_attn_norm: RmsNorm,
    pre_ffn_norm: RmsNorm,
    gate: EncoderLinear,
    up: EncoderLinear,
    down: EncoderLinear,
    post_ffn_norm: RmsNorm,
}

/// A loaded vision tower with its projection into the text model.
pub struct VisionTower {
    cfg: VisionConfig,
    patch_proj: Linear,
    /// `[2, positions, hidden]`: x then y embedding tables.
    pos_table: Vec<f32>,
    layers: Vec<VisionLayer>,
    /// Unscaled RMS norm of the head dim (v norm).
    v_norm: RmsNorm,
    /// `(bias, scale)` of the standardization.
    standardize: Option<(Vec<f32>, Vec<f32>)>,
    /// Unscaled RMS norm before the projection.
    pre_proj_norm: RmsNorm,
    proj: Linear,
}

/// Patches of one image in the order the processor lays them out (row-major over the grid).
#[derive(Clone, Debug, PartialEq)]
pub struct Patches {
    /// `[rows · cols, 3 · patch²]`, each patch `(row in patch, column in patch, channel)`, in
    /// [0, 1].
    pub values: Vec<f32>,
    /// Grid of patches: rows, columns.
    pub rows: usize,
    pub cols: usize,
}

impl VisionTower {
    /// Loads the tower under `prefix` (`model.vision_tower.`) and the projection
    /// `{embed}.embedding_projection.weight` to `text_hidden`.
    pub fn load(
        store: &dyn TensorStore,
        cfg: VisionConfig,
        prefix: &str,
        embed: &str,
        text_hidden: usize,
    ) -> Result<Self, LoadError> {
        let (d, hd) = (cfg.hidden, cfg.head_dim);
        let norm = |name: &str, dim| RmsNorm::load(store, name, dim, cfg.eps, false);
        let mut layers = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            let p = format!("{prefix}encoder.layers.{i}.");
            let lin = |part: &str, o, n| load_encoder(store, &format!("{p}{part}"), o, n);
            layers.push(VisionLayer {
                input_norm: norm(&format!("{p}input_layernorm.weight"), d)?,
                q: lin("self_attn.q_proj", cfg.heads * hd, d)?,
                k: lin("self_attn.k_proj", cfg.kv_heads * hd, d)?,
                v: lin("self_attn.v_proj", cfg.kv_heads * hd, d)?,
                o: lin("self_attn.o_proj", d, cfg.heads * hd)?,
                q_norm: norm(&format!("{p}self_attn.q_norm.weight"), hd)?,
                k_norm: norm(&format!("{p}self_attn.k_norm.weight"), hd)?,
                post_attn_norm: norm(&format!("{p}post_attention_layernorm.weight"), d)?,
                pre_ffn_norm: norm(&format!("{p}pre_feedforward_layernorm.weight"), d)?,
                gate: lin("mlp.gate_proj", cfg.ffn, d)?,
                up: lin("mlp.up_proj", cfg.ffn, d)?,
                down: lin("mlp.down_proj", d, cfg.ffn)?,
                post_ffn_norm: norm(&format!("{p}post_feedforward_layernorm.weight"), d)?,
            });
        }
        let pos_table = store
            .require_shape(
                &format!("{prefix}patch_embedder.position_embedding_table"),
                &[2, cfg.positions, d],
            )?
            .to_f32()?;
        let standardize = if cfg.standardize {
            let v = |n: &str| {
                store
                    .require_shape(&format!("{prefix}{n}"), &[d])
                    .and_then(|t| t.to_f32())
            };
            Some((v("std_bias")?, v("std_scale")?))
        } else {
            None
        };
        let unscaled = |dim| RmsNorm {
            weight: vec![1.0; dim],
            eps: cfg.eps,
        };
        Ok(VisionTower {
            patch_proj: Linear::load(
                store,
                &format!("{prefix}patch_embedder.input_proj.weight"),
                d,
                3 * cfg.patch * cfg.patch,
            )?,
            pos_table,
            layers,
            v_norm: unscaled(hd),
            standardize,
            pre_proj_norm: unscaled(d),
            proj: Linear::load(
                store,
                &format!("{embed}.embedding_projection.weight"),
                text_hidden,
                d,
            )?,
            cfg,
        })
    }

    /// The tower's settings.
    pub fn config(&self) -> &VisionConfig {
        &self.cfg
    }

    /// Soft tokens of a `rows × cols` grid (both multiples of the pooling side).
    pub fn soft_tokens(&self, rows: usize, cols: usize) -> usize {
        (rows / self.cfg.pool) * (cols / self.cfg.pool)
    }

    /// Encodes one image's patches; returns the soft tokens `[n, text_hidden]` in the text
    /// model's embedding space (before any embedding scale), `n` = [`Self::soft_tokens`].
    pub fn encode(&self, p: &Patches) -> Result<Vec<f32>, String> {
        let c = &self.cfg;
        let n = p.rows * p.cols;
        if p.values.len() != n * 3 * c.patch * c.patch || n == 0 {
            return Err(format!(
                "{} pixel values for a {}×{} grid of {}-pixel patches",
                p.values.len(),
                p.rows,
                p.cols,
                c.patch
            ));
        }
        if !p.rows.is_multiple_of(c.pool) || !p.cols.is_multiple_of(c.pool) {
            return Err(format!(
                "a {}×{} patch grid is not a multiple of the pooling side {}",
                p.rows, p.cols, c.pool
            ));
        }
        if p.rows.max(p.cols) > c.positions {
            return Err(format!(
                "a {}×{} patch grid exceeds the {} position embeddings",
                p.rows, p.cols, c.positions
            ));
        }
        let d = c.hidden;
        let scaled: Vec<f32> = p.values.iter().map(|v| 2.0 * (v - 0.5)).collect();
        let mut x = self.patch_proj.forward(&scaled, n);
        let (tx, ty) = self.pos_table.split_at(c.positions * d);
        for (i, row) in x.chunks_exact_mut(d).enumerate() {
            let (py, px) = (i / p.cols, i % p.cols);
            let ex = &tx[px * d..(px + 1) * d];
            let ey = &ty[py * d..(py + 1) * d];
            for ((v, a), b) in row.iter_mut().zip(ex).zip(ey) {
                *v += a + b;
            }
        }
        let x = self.blocks(x, p.rows, p.cols)?;
        Ok(self.pool_and_project(&x, p.rows, p.cols))
    }

    /// The encoder layers over the embedded patches `x` (`[rows · cols, hidden]`, row-major
    /// over the grid) as one [`EncoderPlan`]: pre-norm RMS sandwich blocks without a final
    /// norm, per-head q / k / v norms, the axial rotation of the grid
    /// ([`RopeRows::axial_halves`]), scale 1, a gated GELU (tanh) MLP, clamped projections.
    fn blocks(&self, x: Vec<f32>, rows: usize, cols: usize) -> Result<Vec<f32>, String> {
        let c = &self.cfg;
        let grid = (0..rows * cols).map(|i| (i / cols, i % cols));
        let rope = [RopeRows::axial_halves(c.head_dim, c.rope_theta, grid)];
        let rope_of = Some(RopeOf::Rows(&rope));
        let layers = self
            .layers
            .iter()
            .map(|l| EncoderLayer {
                q: &l.q,
                k: &l.k,
                v: &l.v,
                o: &l.o,
                attn_norm: Some((&l.input_norm).into()),
                window: None,
                rope_of,
                gate: Some(&l.gate),
                up: &l.up,
                down: &l.down,
                ffn_norm: (&l.pre_ffn_norm).into(),
                extra_norms: ExtraNorms {
                    q: Some(&l.q_norm),
                    k: Some(&l.k_norm),
                    v: Some(&self.v_norm),
                    post_attn: Some((&l.post_attn_norm).into()),
                    post_ffn: Some((&l.post_ffn_norm).into()),
                },
            })
            .collect();
        let plan = EncoderPlan {
            layers,
            order: NormOrder::Pre { final_norm: None },
            heads: EncoderHeads {
                n_heads: c.heads,
                n_kv_heads: c.kv_heads,
                head_dim: c.head_dim,
                scale: 1.0,
                window: None,
            },
            act: EncoderAct::GeluTanh,
            dim: c.hidden,
        };
        encoder::run(&plan, x, &[rows * cols]).map_err(|e| format!("vision tower: {e}"))
    }

    /// k×k average pooling by grid position, × √hidden, standardization, the unscaled norm
    /// and the projection.
    fn pool_and_project(&self, x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        let (d, k) = (self.cfg.hidden, self.cfg.pool);
        let (pr, pc) = (rows / k, cols / k);
        let mut pooled = vec![0f32; pr * pc * d];
        if k == 1 {
            pooled.copy_from_slice(x);
        } else {
            let w = 1.0 / (k * k) as f32;
            for (i, row) in x.chunks_exact(d).enumerate() {
                let (y, xx) = (i / cols, i % cols);
                let o = (y / k) * pc + xx / k;
                for (p, v) in pooled[o * d..(o + 1) * d].iter_mut().zip(row) {
                    *p += v * w;
                }
            }
        }
        let root = (d as f64).sqrt() as f32;
        for row in pooled.chunks_exact_mut(d) {
            for (j, v) in row.iter_mut().enumerate() {
                *v *= root;
                if let Some((bias, scale)) = &self.standardize {
                    *v = (*v - bias[j]) * scale[j];
                }
            }
        }
        self.pre_proj_norm.forward_inplace(&mut pooled);
        self.proj.forward(&pooled, pr * pc)
    }
}

#[cfg(test)]
#[path = "vision_twin.rs"]
mod twin;
