//! diffusers' `UNet2DConditionModel` as Stable Diffusion 1.x / 2.x use it: a sinusoidal timestep
//! embedding, down blocks (ResNets, optional spatial transformers, a stride-2 conv), a
//! cross-attention mid block, up blocks that take the down path's outputs as skips, and a
//! GroupNorm + SiLU + conv head. Per-block head counts, conv or linear `proj_in`.

use super::attention::Transformer2D;
use super::config::JsonConfig;
use super::layers::{silu, timestep_embedding, Conv2d, FeatureMap, Norm, Weights};
use super::resnet::{Downsample, ResnetBlock, Upsample};
use super::DiffusionError;
use crate::backend::NormKind;
use crate::loader::TensorStore;
use crate::nn::Linear;

/// The fields of `unet/config.json` this implementation reads.
#[derive(Clone, Debug)]
pub struct UNetConfig {
    pub in_channels: usize,
    pub out_channels: usize,
    pub block_out_channels: Vec<usize>,
    pub layers_per_block: usize,
    /// Per down block: whether it has spatial transformers (`CrossAttnDownBlock2D`).
    pub down_attn: Vec<bool>,
    /// Per up block: whether it has spatial transformers (`CrossAttnUpBlock2D`).
    pub up_attn: Vec<bool>,
    pub cross_attention_dim: usize,
    /// Heads per down block (diffusers' `num_attention_heads`, or `attention_head_dim`, which
    /// SD configs use for the head count).
    pub heads: Vec<usize>,
    /// Transformer blocks per spatial transformer, per down block.
    pub transformer_layers: Vec<usize>,
    pub norm_num_groups: usize,
    pub norm_eps: f32,
    pub flip_sin_to_cos: bool,
    pub freq_shift: f32,
    /// The latent side the model was trained at (`sample_size`: 64 for SD 1.x, 96 for SD 2.x
    /// 768-v); times the VAE's scale it is the default image side.
    pub sample_size: usize,
    /// Width of the timestep condition (`time_cond_proj_dim`: LCM-distilled UNets take the
    /// guidance scale's embedding there), `None` for plain SD UNets.
    pub time_cond_proj_dim: Option<usize>,
}

impl UNetConfig {
    /// Parses and checks `config.json`; configurations this UNet does not implement (class or
    /// added embeddings, scale-shift time embedding, ...) are errors naming the field.
    pub fn parse(c: &JsonConfig) -> Result<Self, DiffusionError> {
        let block_out_channels = c.usizes("block_out_channels")?;
        let n = block_out_channels.len();
        if n == 0 {
            return Err(DiffusionError::config(
                &c.path,
                "field 'block_out_channels' is empty",
            ));
        }
        for key in ["class_embed_type", "addition_embed_type", "encoder_hid_dim"] {
            if c.has(key) {
                return Err(DiffusionError::config(
                    &c.path,
                    format!("field '{key}' is set: not supported (SD 1.x / 2.x UNets only)"),
                ));
            }
        }
        for key in [
            "num_class_embeds",
            "time_embedding_dim",
            "time_embedding_act_fn",
            "timestep_post_act",
            "cross_attention_norm",
        ] {
            if c.has(key) {
                return Err(DiffusionError::config(
                    &c.path,
                    format!("field '{key}' is set: not supported (SD 1.x / 2.x UNets only)"),
                ));
            }
        }
        for key in [
            "center_input_sample",
            "only_cross_attention",
            "dual_cross_attention",
        ] {
            if c.json
                .get(key)
                .is_some_and(|v| v.as_bool() != Some(false) && !v.is_null())
            {
                return Err(DiffusionError::config(
                    &c.path,
                    format!("field '{key}': only false is supported"),
                ));
            }
        }
        for (key, want) in [
            ("conv_in_kernel", 3.0),
            ("conv_out_kernel", 3.0),
            ("mid_block_scale_factor", 1.0),
            ("resnet_out_scale_factor", 1.0),
        ] {
            if c.f64_or(key, want)? != want {
                return Err(DiffusionError::config(
                    &c.path,
                    format!("field '{key}': only {want} is supported"),
                ));
            }
        }
        c.expect_str("resnet_time_scale_shift", "default", &["default"])?;
        c.expect_str("time_embedding_type", "positional", &["positional"])?;
        c.expect_str(
            "mid_block_type",
            "UNetMidBlock2DCrossAttn",
            &["UNetMidBlock2DCrossAttn"],
        )?;
        let kinds = |key: &str, attn: &str, plain: &str| -> Result<Vec<bool>, DiffusionError> {
            let v = c.strings(key)?;
            if v.len() != n {
                return Err(DiffusionError::config(
                    &c.path,
                    format!(
                        "field '{key}' has {} blocks, block_out_channels has {n}",
                        v.len()
                    ),
                ));
            }
            v.iter()
                .map(|s| match s.as_str() {
                    s if s == attn => Ok(true),
                    s if s == plain => Ok(false),
                    other => Err(DiffusionError::config(
                        &c.path,
                        format!("field '{key}': block type '{other}' is not supported ({attn}, {plain})"),
                    )),
                })
                .collect()
        };
        let head_key = if c.has("num_attention_heads") {
            "num_attention_heads"
        } else {
            "attention_head_dim"
        };
        Ok(UNetConfig {
            in_channels: c.usize_or("in_channels", 4)?,
            out_channels: c.usize_or("out_channels", 4)?,
            layers_per_block: c.usize_or("layers_per_block", 2)?,
            down_attn: kinds("down_block_types", "CrossAttnDownBlock2D", "DownBlock2D")?,
            up_attn: kinds("up_block_types", "CrossAttnUpBlock2D", "UpBlock2D")?,
            cross_attention_dim: c.usize_or("cross_attention_dim", 1280)?,
            heads: c.per_block(head_key, n, 8)?,
            transformer_layers: c.per_block("transformer_layers_per_block", n, 1)?,
            norm_num_groups: c.usize_or("norm_num_groups", 32)?,
            norm_eps: c.f64_or("norm_eps", 1e-5)? as f32,
            flip_sin_to_cos: c.bool_or("flip_sin_to_cos", true)?,
            freq_shift: c.f64_or("freq_shift", 0.0)? as f32,
            sample_size: c.usize_or("sample_size", 64)?,
            time_cond_proj_dim: if c.has("time_cond_proj_dim") {
                Some(c.usize("time_cond_proj_dim")?)
            } else {
                None
            },
            block_out_channels,
        })
    }

    /// How much smaller the deepest feature map is than the input (`2^(blocks − 1)`).
    pub fn downscale(&self) -> usize {
        1 << (self.block_out_channels.len() - 1)
    }
}

/// One down or up block: resnets, each optionally followed by a spatial transformer.
struct Block {
    resnets: Vec<ResnetBlock>,
    attns: Vec<Transformer2D>,
    down: Option<Downsample>,
    up: Option<Upsample>,
}

/// The conditional UNet.
pub struct UNet {
    /// Its configuration.
    pub config: UNetConfig,
    time_1: Linear,
    time_2: Linear,
    /// `time_embedding.cond_proj` (no bias), with `time_cond_proj_dim`.
    time_cond: Option<Linear>,
    conv_in: Conv2d,
    down: Vec<Block>,
    mid_res: [ResnetBlock; 2],
    mid_attn: Transformer2D,
    up: Vec<Block>,
    norm_out: Norm,
    conv_out: Conv2d,
}

impl UNet {
    /// Loads the UNet described by `cfg` from `store` (diffusers' tensor names).
    pub fn load(cfg: UNetConfig, store: &dyn TensorStore) -> Result<Self, DiffusionError> {
        let root = Weights { store, prefix: "" };
        let ch = &cfg.block_out_channels;
        let n = ch.len();
        let temb = ch[0] * 4;
        let (groups, eps) = (cfg.norm_num_groups, cfg.norm_eps);
        let at = |p: &str| p.to_string();
        let resnet = |p: String, i, o| {
            ResnetBlock::load(Weights { store, prefix: &p }, i, o, Some(temb), groups, eps)
        };
        let transformer = |p: String, c, b: usize| {
            Transformer2D::load(
                Weights { store, prefix: &p },
                c,
                cfg.cross_attention_dim,
                cfg.heads[b],
                cfg.transformer_layers[b],
                groups,
            )
        };
        let mut down = Vec::with_capacity(n);
        for b in 0..n {
            let (cin, cout) = (if b == 0 { ch[0] } else { ch[b - 1] }, ch[b]);
            let mut blk = Block {
                resnets: Vec::new(),
                attns: Vec::new(),
                down: None,
                up: None,
            };
            for l in 0..cfg.layers_per_block {
                let i = if l == 0 { cin } else { cout };
                blk.resnets
                    .push(resnet(format!("down_blocks.{b}.resnets.{l}"), i, cout)?);
                if cfg.down_attn[b] {
                    blk.attns.push(transformer(
                        format!("down_blocks.{b}.attentions.{l}"),
                        cout,
                        b,
                    )?);
                }
            }
            if b + 1 < n {
                let p = format!("down_blocks.{b}.downsamplers.0");
                blk.down = Some(Downsample::load(Weights { store, prefix: &p }, cout)?);
            }
            down.push(blk);
        }
        let mut up = Vec::with_capacity(n);
        for u in 0..n {
            // Up block u mirrors down block n - 1 - u.
            let b = n - 1 - u;
            let (prev, cout, cin) = (
                if u == 0 { ch[n - 1] } else { ch[b + 1] },
                ch[b],
                ch[b.saturating_sub(1)],
            );
            let mut blk = Block {
                resnets: Vec::new(),
                attns: Vec::new(),
                down: None,
                up: None,
            };
            let layers = cfg.layers_per_block + 1;
            for l in 0..layers {
                let skip = if l + 1 == layers { cin } else { cout };
                let i = if l == 0 { prev } else { cout };
                blk.resnets.push(resnet(
                    format!("up_blocks.{u}.resnets.{l}"),
                    i + skip,
                    cout,
                )?);
                if cfg.up_attn[u] {
                    blk.attns.push(transformer(
                        format!("up_blocks.{u}.attentions.{l}"),
                        cout,
                        b,
                    )?);
                }
            }
            if u + 1 < n {
                let p = format!("up_blocks.{u}.upsamplers.0");
                blk.up = Some(Upsample::load(Weights { store, prefix: &p }, cout)?);
            }
            up.push(blk);
        }
        let deep = ch[n - 1];
        Ok(UNet {
            time_1: Linear::load(store, "time_embedding.linear_1.weight", temb, ch[0])?,
            time_2: Linear::load(store, "time_embedding.linear_2.weight", temb, temb)?,
            time_cond: cfg
                .time_cond_proj_dim
                .map(|d| Linear::load(store, "time_embedding.cond_proj.weight", ch[0], d))
                .transpose()?,
            conv_in: Conv2d::load(root, "conv_in", cfg.in_channels, ch[0], 3, 1)?,
            down,
            mid_res: [
                resnet(at("mid_block.resnets.0"), deep, deep)?,
                resnet(at("mid_block.resnets.1"), deep, deep)?,
            ],
            mid_attn: transformer(at("mid_block.attentions.0"), deep, n - 1)?,
            up,
            norm_out: Norm::load(
                root,
                "conv_norm_out",
                ch[0],
                NormKind::Group(groups),
                eps,
                true,
            )?,
            conv_out: Conv2d::load(root, "conv_out", ch[0], cfg.out_channels, 3, 1)?,
            config: cfg,
        })
    }

    /// The timestep embedding `[4 · block_out_channels[0]]` of timestep `t`, with the
    /// timestep condition projected and added to the sinusoids first when given.
    fn time_embedding(&self, t: f32, cond: Option<&[f32]>) -> Vec<f32> {
        let c = &self.config;
        let mut e = timestep_embedding(t, c.block_out_channels[0], c.flip_sin_to_cos, c.freq_shift);
        if let (Some(p), Some(cond)) = (&self.time_cond, cond) {
            e.iter_mut()
                .zip(p.forward(cond, 1))
                .for_each(|(v, d)| *v += d);
        }
        let h: Vec<f32> = self.time_1.forward(&e, 1).into_iter().map(silu).collect();
        self.time_2.forward(&h, 1)
    }

    /// The model's output (noise or velocity) for latents `x` (`in_channels` channels) at
    /// timestep `t`, conditioned on text embeddings `ctx` (`[m, cross_attention_dim]`). `x`
    /// may be a batch of images (`x.images`, e.g. classifier-free guidance's two branches), each
    /// with its own text: `ctx` is then `[x.images][m][cross_attention_dim]`, and the output a
    /// batch of as many images. Every convolution and linear layer runs over the rows of all
    /// images at once; norms and attention stay per image.
    ///
    /// # Errors
    /// `x` with the wrong channel count, `ctx` not a whole number of rows; a UNet with
    /// `time_cond_proj_dim` (use [`Self::forward_cond`]).
    pub fn forward(
        &self,
        x: &FeatureMap,
        t: f32,
        ctx: &[f32],
    ) -> Result<FeatureMap, DiffusionError> {
        self.forward_cond(x, t, ctx, None)
    }

    /// [`Self::forward`] with the timestep condition `cond` (`[time_cond_proj_dim]`, the
    /// guidance-scale embedding of LCM-distilled UNets; see
    /// [`super::layers::guidance_embedding`]).
    ///
    /// # Errors
    /// As [`Self::forward`]; `cond` missing or of the wrong length for this UNet's
    /// `time_cond_proj_dim`, or given to a UNet without one.
    pub fn forward_cond(
        &self,
        x: &FeatureMap,
        t: f32,
        ctx: &[f32],
        cond: Option<&[f32]>,
    ) -> Result<FeatureMap, DiffusionError> {
        let cfg = &self.config;
        if cfg.time_cond_proj_dim != cond.map(<[f32]>::len) {
            return Err(DiffusionError::Argument(format!(
                "UNet timestep condition: the config says time_cond_proj_dim = {:?}, given {:?} values",
                cfg.time_cond_proj_dim,
                cond.map(<[f32]>::len)
            )));
        }
        if x.c != cfg.in_channels {
            return Err(DiffusionError::Argument(format!(
                "UNet input has {} channels, the config says in_channels = {}",
                x.c, cfg.in_channels
            )));
        }
        let d = cfg.cross_attention_dim;
        if x.images == 0 || ctx.is_empty() || !ctx.len().is_multiple_of(d * x.images) {
            return Err(DiffusionError::Argument(format!(
                "text embeddings have {} values, not {} image(s) of a whole number of rows of \
                 cross_attention_dim = {d}",
                ctx.len(),
                x.images
            )));
        }
        let m = ctx.len() / d / x.images;
        let temb = self.time_embedding(t, cond);
        let mut h = self.conv_in.forward(x, None)?;
        let mut skips = vec![h.clone()];
        for blk in &self.down {
            for (l, r) in blk.resnets.iter().enumerate() {
                h = r.forward(&h, Some(&temb))?;
                if let Some(a) = blk.attns.get(l) {
                    h = a.forward(&h, ctx, m)?;
                }
                skips.push(h.clone());
            }
            if let Some(ds) = &blk.down {
                h = ds.forward(&h)?;
                skips.push(h.clone());
            }
        }
        h = self.mid_res[0].forward(&h, Some(&temb))?;
        h = self.mid_attn.forward(&h, ctx, m)?;
        h = self.mid_res[1].forward(&h, Some(&temb))?;
        for blk in &self.up {
            for (l, r) in blk.resnets.iter().enumerate() {
                let skip = skips.pop().expect("one skip per up-block resnet");
                h = r.forward(&h.concat_channels(&skip), Some(&temb))?;
                if let Some(a) = blk.attns.get(l) {
                    h = a.forward(&h, ctx, m)?;
                }
            }
            if let Some(us) = &blk.up {
                let size = skips.last().map(|s| (s.h, s.w));
                h = us.forward(&h, size)?;
            }
        }
        self.conv_out.forward(&h, Some(&self.norm_out))
    }
}
