//! Gemma 4's audio tower (transformers `Gemma4AudioModel` + `Gemma4MultimodalEmbedder`), a
//! Universal-Speech-Model conformer: log-mel frames `[T, n_mel]` → two 3×3 stride-2
//! convolutions (each LayerNorm over channels, ReLU; the frame mask applied before each and
//! halved after) → a linear input projection → conformer layers (half-step feed-forward,
//! chunked local self-attention with relative positions, a light causal depthwise conv
//! module, half-step feed-forward, out norm; clippable linears) → `output_proj` (with bias) →
//! an unscaled RMS norm and the projection into the text embedding space. One soft token per
//! 4 frames (40 ms); padding positions are dropped.

use super::audio_attention::{LocalAttention, LocalAttentionConfig};
use super::audio_features::MelFrames;
use super::clipped::ClippedLinear;
use crate::backend::cpu_ref::conv::conv_geom;
use crate::error::LoadError;
use crate::loader::TensorStore;
use crate::mapped::TensorView;
use crate::nn::layer_norm::layer_norm_row;
use crate::nn::{Linear, RmsNorm};
use oxinfer_kernels::act::GateAct;
use serde_json::Value;

/// Shape and settings of the tower (`audio_config`).
#[derive(Clone, Debug, PartialEq)]
pub struct AudioConfig {
    pub hidden: usize,
    pub layers: usize,
    pub attention: LocalAttentionConfig,
    /// Kernel of the light depthwise convolution.
    pub conv_kernel: usize,
    /// Channels of the two subsampling convolutions.
    pub channels: [usize; 2],
    /// Width of `output_proj` (the embedder's input).
    pub output_dims: usize,
    /// Scale of each feed-forward half step's output (`residual_weight`).
    pub residual_weight: f32,
    /// Clamp of activations between blocks (`gradient_clipping`).
    pub clip: f32,
    pub eps: f32,
}

impl AudioConfig {
    /// Reads `audio_config` with transformers' defaults for absent fields; `err` names the
    /// field at fault.
    pub fn from_json(v: &Value, err: &dyn Fn(String) -> LoadError) -> Result<Self, LoadError> {
        let num = |k: &str, d: usize| -> Result<usize, LoadError> {
            match v.get(k) {
                None | Some(Value::Null) => Ok(d),
                Some(x) => x
                    .as_u64()
                    .map(|x| x as usize)
                    .ok_or_else(|| err(format!("audio_config.{k} must be a whole number"))),
            }
        };
        let float = |k: &str, d: f64| v.get(k).and_then(Value::as_f64).unwrap_or(d);
        if let Some(a) = v.get("hidden_act").and_then(Value::as_str) {
            if a != "silu" {
                return Err(err(format!(
                    "audio_config.hidden_act {a} is not supported (silu is)"
                )));
            }
        }
        let channels = match v.get("subsampling_conv_channels") {
            None | Some(Value::Null) => [128, 32],
            Some(Value::Array(a)) if a.len() == 2 => {
                let c = |i: usize| a[i].as_u64().unwrap_or(0) as usize;
                [c(0), c(1)]
            }
            Some(_) => {
                return Err(err(
                    "audio_config.subsampling_conv_channels must hold two numbers".into(),
                ))
            }
        };
        let hidden = num("hidden_size", 1536)?;
        let heads = num("num_attention_heads", 8)?;
        let cfg = AudioConfig {
            hidden,
            layers: num("num_hidden_layers", 12)?,
            attention: LocalAttentionConfig {
                heads,
                head_dim: hidden / heads.max(1),
                chunk: num("attention_chunk_size", 12)?,
                context_left: num("attention_context_left", 13)?,
                context_right: num("attention_context_right", 0)?,
                logit_cap: float("attention_logit_cap", 50.0) as f32,
                invalid_logit: float("attention_invalid_logits_value", -1e9) as f32,
            },
            conv_kernel: num("conv_kernel_size", 5)?,
            channels,
            output_dims: num("output_proj_dims", 1536)?,
            residual_weight: float("residual_weight", 0.5) as f32,
            clip: float("gradient_clipping", 1e10).min(f32::MAX as f64) as f32,
            eps: float("rms_norm_eps", 1e-6) as f32,
        };
        if heads == 0
            || !hidden.is_multiple_of(heads)
            || cfg.attention.chunk == 0
            || cfg.attention.context_left == 0
            || cfg.conv_kernel == 0
            || channels.contains(&0)
        {
            return Err(err(format!(
                "audio_config: hidden {hidden}, {heads} heads, chunk {}, left context {}, conv \
                 kernel {}, channels {channels:?} are not a usable shape",
                cfg.attention.chunk, cfg.attention.context_left, cfg.conv_kernel
            )));
        }
        Ok(cfg)
    }
}

/// A 3×3 stride-2 convolution without bias, then LayerNorm over its channels (no bias), ReLU.
struct SubsampleLayer {
    /// `[cout, 3 · 3 · cin]` (taps in `(ky, kx)` order, each `cin` values).
    conv: Linear,
    cin: usize,
    cout: usize,
    norm: Vec<f32>,
}

impl SubsampleLayer {
    fn load(
        store: &dyn TensorStore,
        stem: &str,
        cin: usize,
        cout: usize,
    ) -> Result<Self, LoadError> {
        let name = format!("{stem}.conv.weight");
        let w = store.require_shape(&name, &[cout, cin, 3, 3])?.to_f32()?;
        let mut taps = vec![0f32; w.len()];
        for o in 0..cout {
            for c in 0..cin {
                for k in 0..9 {
                    taps[(o * 9 + k) * cin + c] = w[(o * cin + c) * 9 + k];
                }
            }
        }
        let view = TensorView::from_f32(store.path(), &name, vec![cout, 9 * cin], &taps);
        Ok(SubsampleLayer {
            conv: Linear::from_view(view, None)?,
            cin,
            cout,
            norm: store
                .require_shape(&format!("{stem}.norm.weight"), &[cout])?
                .to_f32()?,
        })
    }

    /// `x` `[t, f, cin]` (rows of `valid` frames kept, the others zeroed first) →
    /// `[t', f', cout]` and the frame mask of the output (every other frame's).
    fn forward(
        &self,
        x: &mut [f32],
        t: usize,
        f: usize,
        valid: &[bool],
        eps: f32,
    ) -> Result<(Vec<f32>, usize, usize, Vec<bool>), String> {
        for (row, ok) in x.chunks_exact_mut(f * self.cin).zip(valid) {
            if !ok {
                row.fill(0.0);
            }
        }
        let g = conv_geom(t, f, self.cin, 3, 2).map_err(|e| e.to_string())?;
        let mut y = vec![0f32; g.oh * g.ow * self.cout];
        let m = self.conv.matrix();
        crate::nn::conv2d(x, &g, None, &m, None, &mut y).map_err(|e| e.to_string())?;
        let zeros = vec![0f32; self.cout];
        for px in y.chunks_exact_mut(self.cout) {
            layer_norm_row(px, &self.norm, &zeros, eps);
            px.iter_mut().for_each(|v| *v = v.max(0.0));
        }
        let mask = valid.iter().step_by(2).copied().take(g.oh).collect();
        Ok((y, g.oh, g.ow, mask))
    }
}

/// `clamp → pre norm → linear (4×) → SiLU → linear → clamp → post norm → × residual weight`,
/// added to the input.
struct FeedForward {
    pre: RmsNorm,
    up: ClippedLinear,
    down: ClippedLinear,
    post: RmsNorm,
}

/// The light conv module: `pre norm → linear (2×) → GLU → causal depthwise conv → clamp →
/// norm → SiLU → linear`, added to the input.
struct LightConv {
    pre: RmsNorm,
    start: ClippedLinear,
    /// `[hidden, kernel]`.
    depthwise: Vec<f32>,
    norm: RmsNorm,
    end: ClippedLinear,
}

struct AudioLayer {
    ffn1: FeedForward,
    norm_pre_attn: RmsNorm,
    attn: LocalAttention,
    norm_post_attn: RmsNorm,
    conv: LightConv,
    ffn2: FeedForward,
    norm_out: RmsNorm,
}

/// A loaded audio tower with its projection into the text model.
pub struct AudioTower {
    cfg: AudioConfig,
    subsample: [SubsampleLayer; 2],
    input_proj: Linear,
    layers: Vec<AudioLayer>,
    output_proj: Linear,
    /// Unscaled RMS norm before the projection.
    pre_proj_norm: RmsNorm,
    proj: Linear,
}

fn silu(v: f32) -> f32 {
    GateAct::Silu.apply(v)
}

impl AudioTower {
    /// Loads the tower under `prefix` (`model.audio_tower.`) and the projection
    /// `{embed}.embedding_projection.weight` to `text_hidden`. `n_mel` is the extractor's
    /// mel bins, which the input projection's width must match.
    pub fn load(
        store: &dyn TensorStore,
        cfg: AudioConfig,
        prefix: &str,
        embed: &str,
        text_hidden: usize,
        n_mel: usize,
    ) -> Result<Self, LoadError> {
        let d = cfg.hidden;
        let norm = |name: String, dim| RmsNorm::load(store, &name, dim, cfg.eps, false);
        let sub = format!("{prefix}subsample_conv_projection.");
        let [c0, c1] = cfg.channels;
        let proj_in = n_mel.div_ceil(2).div_ceil(2) * c1;
        let input_proj_name = format!("{sub}input_proj_linear.weight");
        let stored = store.require(&input_proj_name)?.shape.clone();
        if stored != [d, proj_in] {
            return Err(LoadError::tensor(
                store.path(),
                &input_proj_name,
                format!(
                    "shape {stored:?}, expected [{d}, {proj_in}] for {n_mel} mel bins \
                     (the feature extractor's feature_size)"
                ),
            ));
        }
        let mut layers = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            let p = format!("{prefix}layers.{i}.");
            let lin = |part: &str, o, n| ClippedLinear::load(store, &format!("{p}{part}"), o, n);
            let ffn = |part: &str| -> Result<FeedForward, LoadError> {
                Ok(FeedForward {
                    pre: norm(format!("{p}{part}.pre_layer_norm.weight"), d)?,
                    up: lin(&format!("{part}.ffw_layer_1"), 4 * d, d)?,
                    down: lin(&format!("{part}.ffw_layer_2"), d, 4 * d)?,
                    post: norm(format!("{p}{part}.post_layer_norm.weight"), d)?,
                })
            };
            let k = cfg.conv_kernel;
            layers.push(AudioLayer {
                ffn1: ffn("feed_forward1")?,
                norm_pre_attn: norm(format!("{p}norm_pre_attn.weight"), d)?,
                attn: LocalAttention::load(store, &format!("{p}self_attn"), &cfg.attention, d)?,
                norm_post_attn: norm(format!("{p}norm_post_attn.weight"), d)?,
                conv: LightConv {
                    pre: norm(format!("{p}lconv1d.pre_layer_norm.weight"), d)?,
                    start: lin("lconv1d.linear_start", 2 * d, d)?,
                    depthwise: store
                        .require_shape(&format!("{p}lconv1d.depthwise_conv1d.weight"), &[d, 1, k])?
                        .to_f32()?,
                    norm: norm(format!("{p}lconv1d.conv_norm.weight"), d)?,
                    end: lin("lconv1d.linear_end", d, d)?,
                },
                ffn2: ffn("feed_forward2")?,
                norm_out: norm(format!("{p}norm_out.weight"), d)?,
            });
        }
        Ok(AudioTower {
            subsample: [
                SubsampleLayer::load(store, &format!("{sub}layer0"), 1, c0)?,
                SubsampleLayer::load(store, &format!("{sub}layer1"), c0, c1)?,
            ],
            input_proj: Linear::load(store, &input_proj_name, d, proj_in)?,
            layers,
            output_proj: Linear::load(
                store,
                &format!("{prefix}output_proj.weight"),
                cfg.output_dims,
                d,
            )?,
            pre_proj_norm: RmsNorm {
                weight: vec![1.0; cfg.output_dims],
                eps: cfg.eps,
            },
            proj: Linear::load(
                store,
                &format!("{embed}.embedding_projection.weight"),
                text_hidden,
                cfg.output_dims,
            )?,
            cfg,
        })
    }

    /// The tower's settings.
    pub fn config(&self) -> &AudioConfig {
        &self.cfg
    }

    /// Soft tokens of `mel`: the frames left valid by both subsampling steps.
    pub fn soft_tokens(valid: &[bool]) -> usize {
        valid.iter().step_by(2).step_by(2).filter(|v| **v).count()
    }

    /// The conformer's output `[n, output_dims]` (after `output_proj`) of the valid
    /// positions, `n` = [`Self::soft_tokens`].
    pub fn encode_hidden(&self, mel: &MelFrames) -> Result<Vec<f32>, String> {
        let t = mel.valid.len();
        if mel.values.len() != t * mel.n_mel || t == 0 {
            return Err(format!(
                "{} mel values for {t} frames of {} bins",
                mel.values.len(),
                mel.n_mel
            ));
        }
        let eps = self.cfg.eps;
        let mut x = mel.values.clone();
        let (mut y, t1, f1, m1) =
            self.subsample[0].forward(&mut x, t, mel.n_mel, &mel.valid, eps)?;
        let (z, _, f2, m2) = self.subsample[1].forward(&mut y, t1, f1, &m1, eps)?;
        // Valid positions are a prefix; later blocks never mix a position with later ones
        // except through attention and convolution windows that end at it, so the padding
        // rows are dropped here.
        let n = m2.iter().take_while(|v| **v).count();
        if n == 0 {
            return Err("the audio is too short for one soft token".into());
        }
        let width = f2 * self.cfg.channels[1];
        let mut h = self.input_proj.forward(&z[..n * width], n);
        for l in &self.layers {
            self.layer(l, &mut h, n);
        }
        Ok(self.output_proj.forward(&h, n))
    }

    /// Encodes `mel`; returns the soft tokens `[n, text_hidden]` in the text model's
    /// embedding space, `n` = [`Self::soft_tokens`].
    pub fn encode(&self, mel: &MelFrames) -> Result<Vec<f32>, String> {
        let mut h = self.encode_hidden(mel)?;
        let n = h.len() / self.cfg.output_dims;
        self.pre_proj_norm.forward_inplace(&mut h);
        Ok(self.proj.forward(&h, n))
    }

    fn clamp(&self, x: &mut [f32]) {
        let c = self.cfg.clip;
        x.iter_mut().for_each(|v| *v = v.clamp(-c, c));
    }

    fn feed_forward(&self, f: &FeedForward, x: &mut [f32], n: usize) {
        let mut h = x.to_vec();
        self.clamp(&mut h);
        f.pre.forward_inplace(&mut h);
        let mut u = f.up.forward(&h, n);
        u.iter_mut().for_each(|v| *v = silu(*v));
        let mut y = f.down.forward(&u, n);
        self.clamp(&mut y);
        f.post.forward_inplace(&mut y);
        let w = self.cfg.residual_weight;
        x.iter_mut().zip(&y).for_each(|(x, y)| *x += y * w);
    }

    fn light_conv(&self, c: &LightConv, x: &mut [f32], n: usize) {
        let d = self.cfg.hidden;
        let k = self.cfg.conv_kernel;
        let h = c.pre.forward(x);
        let s = c.start.forward(&h, n);
        let glu: Vec<f32> = s
            .chunks_exact(2 * d)
            .flat_map(|r| {
                let (a, b) = r.split_at(d);
                a.iter()
                    .zip(b)
                    .map(|(a, b)| a / (1.0 + (-b).exp()))
                    .collect::<Vec<_>>()
            })
            .collect();
        // Causal depthwise convolution: output t reads inputs t − k + 1 ..= t.
        let mut y = vec![0f32; n * d];
        for t in 0..n {
            for j in 0..k {
                let Some(src) = (t + j).checked_sub(k - 1) else {
                    continue;
                };
                for ch in 0..d {
                    y[t * d + ch] += c.depthwise[ch * k + j] * glu[src * d + ch];
                }
            }
        }
        self.clamp(&mut y);
        c.norm.forward_inplace(&mut y);
        y.iter_mut().for_each(|v| *v = silu(*v));
        let out = c.end.forward(&y, n);
        x.iter_mut().zip(&out).for_each(|(x, o)| *x += o);
    }

    fn layer(&self, l: &AudioLayer, x: &mut [f32], n: usize) {
        self.feed_forward(&l.ffn1, x, n);
        let mut h = x.to_vec();
        self.clamp(&mut h);
        l.norm_pre_attn.forward_inplace(&mut h);
        let mut a = l.attn.forward(&h, n);
        self.clamp(&mut a);
        l.norm_post_attn.forward_inplace(&mut a);
        x.iter_mut().zip(&a).for_each(|(x, a)| *x += a);
        self.light_conv(&l.conv, x, n);
        self.feed_forward(&l.ffn2, x, n);
        self.clamp(x);
        l.norm_out.forward_inplace(x);
    }
}
