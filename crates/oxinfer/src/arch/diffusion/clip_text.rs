//! The CLIP text transformer of Stable Diffusion (transformers' `CLIPTextModel`): token and
//! position embeddings, pre-LayerNorm layers of causal self-attention and an MLP (`quick_gelu`
//! for SD 1.x, `gelu` for SD 2.x's OpenCLIP), a final LayerNorm. Tensor names with or without
//! the `text_model.` prefix (transformers 4 and 5 spellings).

use super::config::JsonConfig;
use super::layers::{gelu_erf, Norm, Weights};
use super::DiffusionError;
use crate::backend::NormKind;
use crate::loader::{TensorStore, TensorView};
use crate::nn::{attention, AttnShape, Linear};

/// The MLP activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClipAct {
    /// `x · sigmoid(1.702 x)`.
    QuickGelu,
    /// GELU with the exact error function.
    Gelu,
}

impl ClipAct {
    fn apply(self, x: f32) -> f32 {
        match self {
            ClipAct::QuickGelu => x / (1.0 + (-1.702 * x).exp()),
            ClipAct::Gelu => gelu_erf(x),
        }
    }
}

/// The fields of `text_encoder/config.json` this model reads.
#[derive(Clone, Debug)]
pub struct ClipTextConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub max_position_embeddings: usize,
    pub layer_norm_eps: f32,
    pub act: ClipAct,
}

impl ClipTextConfig {
    /// Parses and checks `config.json`.
    pub fn parse(c: &JsonConfig) -> Result<Self, DiffusionError> {
        let act = match c.str_or("hidden_act", "quick_gelu")? {
            "quick_gelu" => ClipAct::QuickGelu,
            "gelu" => ClipAct::Gelu,
            other => {
                return Err(DiffusionError::config(
                    &c.path,
                    format!("field 'hidden_act': '{other}' is not supported (quick_gelu, gelu)"),
                ))
            }
        };
        let cfg = ClipTextConfig {
            vocab_size: c.usize("vocab_size")?,
            hidden_size: c.usize("hidden_size")?,
            intermediate_size: c.usize("intermediate_size")?,
            num_hidden_layers: c.usize("num_hidden_layers")?,
            num_attention_heads: c.usize("num_attention_heads")?,
            max_position_embeddings: c.usize_or("max_position_embeddings", 77)?,
            layer_norm_eps: c.f64_or("layer_norm_eps", 1e-5)? as f32,
            act,
        };
        if cfg.num_attention_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads)
        {
            return Err(DiffusionError::config(
                &c.path,
                "field 'num_attention_heads' does not divide 'hidden_size'",
            ));
        }
        Ok(cfg)
    }
}

struct ClipLayer {
    ln1: Norm,
    q: Linear,
    k: Linear,
    v: Linear,
    out: Linear,
    ln2: Norm,
    fc1: Linear,
    fc2: Linear,
}

/// The text encoder.
pub struct ClipTextModel {
    /// Its configuration.
    pub config: ClipTextConfig,
    token_embedding: TensorView,
    position_embedding: Vec<f32>,
    layers: Vec<ClipLayer>,
    final_ln: Norm,
}

impl ClipTextModel {
    /// Loads the encoder from `store`.
    pub fn load(cfg: ClipTextConfig, store: &dyn TensorStore) -> Result<Self, DiffusionError> {
        let prefix = if store.get("text_model.final_layer_norm.weight").is_some() {
            "text_model"
        } else {
            ""
        };
        let root = Weights { store, prefix };
        let (d, f) = (cfg.hidden_size, cfg.intermediate_size);
        let ln = |w: Weights, name: &str| {
            Norm::load(w, name, d, NormKind::Layer, cfg.layer_norm_eps, false)
        };
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| {
                let p = root.name(&format!("encoder.layers.{i}"));
                let w = Weights { store, prefix: &p };
                let lin = |name: &str, o, i| {
                    Linear::load(store, &w.name(&format!("{name}.weight")), o, i)
                };
                Ok(ClipLayer {
                    ln1: ln(w, "layer_norm1")?,
                    q: lin("self_attn.q_proj", d, d)?,
                    k: lin("self_attn.k_proj", d, d)?,
                    v: lin("self_attn.v_proj", d, d)?,
                    out: lin("self_attn.out_proj", d, d)?,
                    ln2: ln(w, "layer_norm2")?,
                    fc1: lin("mlp.fc1", f, d)?,
                    fc2: lin("mlp.fc2", d, f)?,
                })
            })
            .collect::<Result<_, DiffusionError>>()?;
        let token_embedding = store.require_shape(
            &root.name("embeddings.token_embedding.weight"),
            &[cfg.vocab_size, d],
        )?;
        token_embedding.matrix()?;
        Ok(ClipTextModel {
            token_embedding,
            position_embedding: root.vector(
                "embeddings.position_embedding.weight",
                &[cfg.max_position_embeddings, d],
            )?,
            layers,
            final_ln: ln(root, "final_layer_norm")?,
            config: cfg,
        })
    }

    /// The last hidden state `[ids.len(), hidden_size]` of `ids` (after the final LayerNorm),
    /// what Stable Diffusion conditions on.
    ///
    /// # Errors
    /// An id outside the vocabulary, more ids than positions.
    pub fn forward(&self, ids: &[u32]) -> Result<Vec<f32>, DiffusionError> {
        let c = &self.config;
        let (t, d) = (ids.len(), c.hidden_size);
        if t > c.max_position_embeddings {
            return Err(DiffusionError::Argument(format!(
                "{t} tokens, the text encoder has {} positions",
                c.max_position_embeddings
            )));
        }
        let table = self.token_embedding.matrix()?;
        let mut x = vec![0f32; t * d];
        for (p, (&id, row)) in ids.iter().zip(x.chunks_exact_mut(d)).enumerate() {
            if id as usize >= c.vocab_size {
                return Err(DiffusionError::Argument(format!(
                    "token id {id} is outside the vocabulary of {}",
                    c.vocab_size
                )));
            }
            table.dequantize_row_into(id as usize, row);
            row.iter_mut()
                .zip(&self.position_embedding[p * d..(p + 1) * d])
                .for_each(|(v, e)| *v += e);
        }
        let heads = c.num_attention_heads;
        let shape = AttnShape {
            n_heads: heads,
            n_kv_heads: heads,
            head_dim: d / heads,
            scale: 1.0 / ((d / heads) as f32).sqrt(),
            window: None,
            softcap: None,
        };
        let add = |x: &mut [f32], y: Vec<f32>| x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
        for l in &self.layers {
            let h = l.ln1.forward(&x, d)?;
            let (q, k, v) = (
                l.q.forward_wide(&h, t),
                l.k.forward_wide(&h, t),
                l.v.forward_wide(&h, t),
            );
            let o = attention(&q, &k, &v, t, 0, &shape);
            add(&mut x, l.out.forward_wide(&o, t));
            let h = l.ln2.forward(&x, d)?;
            let mut m = l.fc1.forward_wide(&h, t);
            m.iter_mut().for_each(|v| *v = c.act.apply(*v));
            add(&mut x, l.fc2.forward_wide(&m, t));
        }
        self.final_ln.forward(&x, d)
    }
}
