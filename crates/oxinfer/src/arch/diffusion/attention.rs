//! Bidirectional attention and the spatial transformer of the UNet (diffusers'
//! `Transformer2DModel` with `BasicTransformerBlock`s: self-attention, cross-attention over the
//! text embeddings, GEGLU feed-forward), plus the VAE's single-head attention block.
//!
//! Image tokens and text tokens see each other in full: [`attention_full_seqs`], the shared
//! non-causal attention, over all images of a batch at once.

use super::layers::{concat_images, map_rows, zip_apply, Conv2d, FeatureMap, Norm, Weights};
use super::DiffusionError;
use crate::backend::NormKind;
use crate::nn::encoder_math;
use crate::nn::full_attention::attention_full_seqs;
use crate::nn::Linear;
use oxinfer_kernels::attention::AttnShape;

/// diffusers' `Attention` without norms: `to_q`, `to_k`, `to_v`, `to_out.0`.
pub struct Attention {
    to_q: Linear,
    to_k: Linear,
    to_v: Linear,
    to_out: Linear,
    heads: usize,
    head_dim: usize,
}

impl Attention {
    /// Loads an attention of `heads` heads over `dim` query features and `kv_dim` key/value
    /// features (the text embedding width for cross-attention); inner width `dim`.
    pub fn load(
        w: Weights,
        dim: usize,
        kv_dim: usize,
        heads: usize,
    ) -> Result<Self, DiffusionError> {
        if heads == 0 || !dim.is_multiple_of(heads) {
            return Err(DiffusionError::Argument(format!(
                "{}: {heads} attention heads do not divide {dim} channels",
                w.prefix
            )));
        }
        let lin = |name: &str, o: usize, i: usize| Linear::load(w.store, &w.name(name), o, i);
        Ok(Attention {
            to_q: lin("to_q.weight", dim, dim)?,
            to_k: lin("to_k.weight", dim, kv_dim)?,
            to_v: lin("to_v.weight", dim, kv_dim)?,
            to_out: lin("to_out.0.weight", dim, dim)?,
            heads,
            head_dim: dim / heads,
        })
    }

    /// `x` `[images][n][dim]` attends, image by image, to that image's `ctx` `[images][m][kv_dim]`
    /// (to itself when `ctx` is `None`); returns `[images][n][dim]`. The projections run over the
    /// rows of all images at once.
    pub fn forward(
        &self,
        x: &[f32],
        n: usize,
        images: usize,
        ctx: Option<(&[f32], usize)>,
    ) -> Vec<f32> {
        let (c, m) = ctx.unwrap_or((x, n));
        let q = self.to_q.forward_wide(x, images * n);
        let k = self.to_k.forward_wide(c, images * m);
        let v = self.to_v.forward_wide(c, images * m);
        let scale = 1.0 / (self.head_dim as f32).sqrt();
        let shape = AttnShape {
            n_heads: self.heads,
            n_kv_heads: self.heads,
            head_dim: self.head_dim,
            scale,
            window: None,
            softcap: None,
        };
        // Every image's queries over its own keys, in one batch.
        let o = attention_full_seqs(&q, &k, &v, &vec![(n, m); images], &shape);
        self.to_out.forward_wide(&o, images * n)
    }
}

/// diffusers' `BasicTransformerBlock` (pre-LayerNorm self-attention, cross-attention, GEGLU
/// feed-forward, each with a residual).
pub struct TransformerBlock {
    norm1: Norm,
    attn1: Attention,
    norm2: Norm,
    attn2: Attention,
    norm3: Norm,
    ff_in: Linear,
    ff_out: Linear,
    dim: usize,
}

impl TransformerBlock {
    /// Loads a block of width `dim`, `heads` heads, attending to text of width `ctx_dim`.
    pub fn load(
        w: Weights,
        dim: usize,
        ctx_dim: usize,
        heads: usize,
    ) -> Result<Self, DiffusionError> {
        let (a1, a2) = (w.name("attn1"), w.name("attn2"));
        let ln = |name: &str| Norm::load(w, name, dim, NormKind::Layer, 1e-5, false);
        let inner = dim * 4;
        Ok(TransformerBlock {
            norm1: ln("norm1")?,
            attn1: Attention::load(
                Weights {
                    store: w.store,
                    prefix: &a1,
                },
                dim,
                dim,
                heads,
            )?,
            norm2: ln("norm2")?,
            attn2: Attention::load(
                Weights {
                    store: w.store,
                    prefix: &a2,
                },
                dim,
                ctx_dim,
                heads,
            )?,
            norm3: ln("norm3")?,
            ff_in: Linear::load(w.store, &w.name("ff.net.0.proj.weight"), 2 * inner, dim)?,
            ff_out: Linear::load(w.store, &w.name("ff.net.2.weight"), dim, inner)?,
            dim,
        })
    }

    /// `x` `[images][n][dim]` in place; `ctx` is each image's text, `[images][m][ctx_dim]`.
    pub fn forward(
        &self,
        x: &mut [f32],
        n: usize,
        images: usize,
        ctx: &[f32],
        m: usize,
    ) -> Result<(), DiffusionError> {
        let add = |x: &mut [f32], y: Vec<f32>| zip_apply(x, &y, |a, b| *a += b);
        let rows = images * n;
        // LayerNorms are per row, so they run over all images at once.
        let h = self.norm1.forward(x, self.dim)?;
        add(x, self.attn1.forward(&h, n, images, None));
        let h = self.norm2.forward(x, self.dim)?;
        add(x, self.attn2.forward(&h, n, images, Some((ctx, m))));
        let h = self.norm3.forward(x, self.dim)?;
        let proj = self.ff_in.forward_wide(&h, rows);
        let inner = self.ff_in.n_out / 2;
        let mut act = vec![0f32; rows * inner];
        map_rows(&mut act, inner, &proj, 2 * inner, |out, row| {
            let (a, gate) = row.split_at(inner);
            for (o, (&a, &g)) in out.iter_mut().zip(a.iter().zip(gate)) {
                *o = a * encoder_math::gelu_erf(g);
            }
        });
        add(x, self.ff_out.forward_wide(&act, rows));
        Ok(())
    }
}

/// diffusers' `Transformer2DModel` over a feature map: GroupNorm, `proj_in` (1 × 1 conv or
/// linear: the same per-pixel product), transformer blocks, `proj_out`, residual.
pub struct Transformer2D {
    norm: Norm,
    proj_in: Conv2d,
    blocks: Vec<TransformerBlock>,
    proj_out: Conv2d,
}

impl Transformer2D {
    /// Loads a spatial transformer over `c` channels with `heads` heads and `layers` blocks.
    pub fn load(
        w: Weights,
        c: usize,
        ctx_dim: usize,
        heads: usize,
        layers: usize,
        groups: usize,
    ) -> Result<Self, DiffusionError> {
        let blocks = (0..layers)
            .map(|i| {
                let p = w.name(&format!("transformer_blocks.{i}"));
                TransformerBlock::load(
                    Weights {
                        store: w.store,
                        prefix: &p,
                    },
                    c,
                    ctx_dim,
                    heads,
                )
            })
            .collect::<Result<_, _>>()?;
        Ok(Transformer2D {
            norm: Norm::load(w, "norm", c, NormKind::Group(groups), 1e-6, false)?,
            proj_in: Conv2d::load(w, "proj_in", c, c, 1, 1)?,
            blocks,
            proj_out: Conv2d::load(w, "proj_out", c, c, 1, 1)?,
        })
    }

    /// Each image of `x` attends over itself and to its own text in `ctx`
    /// (`[x.images][m][ctx_dim]`).
    pub fn forward(
        &self,
        x: &FeatureMap,
        ctx: &[f32],
        m: usize,
    ) -> Result<FeatureMap, DiffusionError> {
        let mut h = self.proj_in.forward(x, Some(&self.norm))?;
        let n = h.pixels();
        for b in &self.blocks {
            b.forward(&mut h.data, n, h.images, ctx, m)?;
        }
        let mut out = self.proj_out.forward(&h, None)?;
        out.add_assign(x);
        Ok(out)
    }
}

/// The VAE's attention block: GroupNorm, one head over all channels (`to_q`, `to_k`, `to_v`,
/// `to_out.0`, all with bias), residual.
pub struct VaeAttention {
    norm: Norm,
    attn: Attention,
    c: usize,
}

impl VaeAttention {
    /// Loads the block over `c` channels.
    pub fn load(w: Weights, c: usize, groups: usize, eps: f32) -> Result<Self, DiffusionError> {
        Ok(VaeAttention {
            norm: Norm::load(w, "group_norm", c, NormKind::Group(groups), eps, false)?,
            attn: Attention::load(w, c, c, 1)?,
            c,
        })
    }

    /// `x + attn(norm(x))`, image by image.
    pub fn forward(&self, x: &FeatureMap) -> Result<FeatureMap, DiffusionError> {
        let len = x.pixels() * self.c;
        let h = concat_images(x.images, |i| {
            self.norm.forward(&x.data[i * len..(i + 1) * len], self.c)
        })?;
        let mut out = FeatureMap {
            data: self.attn.forward(&h, x.pixels(), x.images, None),
            ..*x
        };
        out.add_assign(x);
        Ok(out)
    }
}
