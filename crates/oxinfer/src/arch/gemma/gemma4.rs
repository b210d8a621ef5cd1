//! Gemma 4 text decoder (transformers `gemma4` / `gemma4_text`): sliding-window and global
//! attention layers with their own head dims, kv head counts and RoPE (proportional, partly
//! rotating, on the global layers), QK norms and an unscaled V norm, optional k = v on the
//! global layers, KV sharing for the top layers, per-layer embeddings (PLE), norms before and
//! after attention and MLP (plain `w` gains, unlike Gemma 3's `1 + w`), a learned scalar per
//! layer, the 26B-A4B-style routed experts beside the dense MLP, a tied head and final logit
//! soft-capping.

use super::gemma4_block::{Attention, FeedForward, PleBlock};
use super::gemma4_config::Gemma4Params;
use super::gemma4_media::Gemma4Media;
use super::{LayerKind, Names};
use crate::arch::CausalLm;
use crate::config::{ConfigSource, ModelConfig};
use crate::error::{LoadError, Result};
use crate::loader::{Naming, TensorStore};
use crate::nn::{Embedding, KvCache, Linear, RmsNorm, Rope};
use crate::plan::{AttnSpec, Layer as PlanLayer, Mixer, Plan, PleInputsOp, PleOp};

struct Layer {
    kind: LayerKind,
    attn_norm: RmsNorm,
    attn: Attention,
    post_attn_norm: RmsNorm,
    ffn: FeedForward,
    ple: Option<PleBlock>,
    /// Factor on the layer's output hidden state (`layer_scalar`, 1 when absent).
    scalar: f32,
}

/// The model-level part of the per-layer embeddings: a table `[rows, layers · width]` looked up
/// by token (× √width) and a projection of the embedded token (× 1/√hidden, RMS-normed per
/// layer); each layer's input is `(projection + lookup) / √2`.
struct PleInputs {
    table: Embedding,
    model_proj: Linear,
    proj_norm: RmsNorm,
    width: usize,
}

impl PleInputsOp for PleInputs {
    /// Per-layer inputs `[t, layers · width]` of tokens `ids` whose scaled embeddings are `x`.
    fn forward(&self, ids: &[u32], x: &[f32], t: usize) -> Result<Vec<f32>> {
        let tok = self.table.forward(ids)?;
        let mut p = self.model_proj.forward(x, t);
        let s = (self.model_proj.n_in as f64).powf(-0.5) as f32;
        p.iter_mut().for_each(|v| *v *= s);
        self.proj_norm.forward_inplace(&mut p);
        let half = std::f32::consts::FRAC_1_SQRT_2;
        p.iter_mut()
            .zip(&tok)
            .for_each(|(p, e)| *p = (*p + e) * half);
        Ok(p)
    }

    /// Layer `l`'s rows `[t, width]` out of all per-layer inputs.
    fn layer(&self, all: &[f32], l: usize, t: usize) -> Vec<f32> {
        let n = all.len() / t.max(1);
        let w = self.width;
        (0..t)
            .flat_map(|i| all[i * n + l * w..i * n + (l + 1) * w].iter().copied())
            .collect()
    }
}

/// A loaded Gemma 4 text model.
pub struct Gemma4 {
    cfg: ModelConfig,
    params: Gemma4Params,
    embed: Embedding,
    ple: Option<PleInputs>,
    layers: Vec<Layer>,
    norm: RmsNorm,
    head: Linear,
    local_rope: Rope,
    global_rope: Rope,
    /// The vision tower of a multimodal checkpoint.
    media: Option<Gemma4Media>,
}

impl Gemma4 {
    /// Loads every tensor from `store` (borrowed from the mapped file).
    pub fn load(
        cfg: &ModelConfig,
        store: &dyn TensorStore,
        naming: Naming,
        src: &ConfigSource<'_>,
    ) -> Result<Self, LoadError> {
        Self::load_with(cfg, store, naming, src, Gemma4Params::read(cfg, src)?)
    }

    /// Loads a drafter's text model (transformers `gemma4_assistant`'s `model.*`): layers that
    /// read `target`'s cache ([`Gemma4Params::read_drafter`]), no soft-cap.
    pub fn load_drafter(
        cfg: &ModelConfig,
        store: &dyn TensorStore,
        src: &ConfigSource<'_>,
        target: &Gemma4Params,
    ) -> Result<Self, LoadError> {
        let mut params = Gemma4Params::read_drafter(cfg, src, target)?;
        params.final_softcap = None;
        Self::load_with(cfg, store, Naming::Hf, src, params)
    }

    fn load_with(
        cfg: &ModelConfig,
        store: &dyn TensorStore,
        naming: Naming,
        src: &ConfigSource<'_>,
        params: Gemma4Params,
    ) -> Result<Self, LoadError> {
        let names = Names::detect(store, naming);
        let (d, eps) = (cfg.hidden_size, cfg.norm_eps);
        let (embed, head) =
            super::embedding_and_head(store, &names, cfg.vocab_size, d, cfg.tie_embeddings)?;
        let n = cfg.n_layers;
        let ple = match params.ple {
            Some(width) => {
                let table = store
                    .require(&names.global("per_layer_token_embd", "embed_tokens_per_layer"))?;
                if table.shape.len() != 2 || table.shape[1] != n * width {
                    return Err(LoadError::tensor(
                        store.path(),
                        &table.name,
                        format!("shape {:?}, expected [rows, {}]", table.shape, n * width),
                    ));
                }
                Some(PleInputs {
                    table: Embedding::new(table, (width as f64).sqrt() as f32)?,
                    model_proj: Linear::load(
                        store,
                        &names.global("per_layer_model_proj", "per_layer_model_projection"),
                        n * width,
                        d,
                    )?,
                    proj_norm: RmsNorm::load(
                        store,
                        &names.global("per_layer_proj_norm", "per_layer_projection_norm"),
                        width,
                        eps,
                        false,
                    )?,
                    width,
                })
            }
            None => None,
        };
        let mut layers = Vec::with_capacity(n);
        for (i, &kind) in params.layer_kinds.iter().enumerate() {
            let norm = |part: &str| RmsNorm::load(store, &names.layer(i, part), d, eps, false);
            let scalar_name = names.layer_param(i, "layer_output_scale", "weight", "layer_scalar");
            let scalar = match store.get(&scalar_name) {
                Some(t) => {
                    let v = t?.to_f32()?;
                    match v[..] {
                        [s] => s,
                        _ => {
                            return Err(LoadError::tensor(
                                store.path(),
                                scalar_name,
                                format!("{} values, expected 1", v.len()),
                            ))
                        }
                    }
                }
                None => 1.0,
            };
            layers.push(Layer {
                kind,
                attn_norm: norm("attn_norm")?,
                attn: Attention::load(store, &names, i, d, cfg.n_heads, eps, &params)?,
                post_attn_norm: norm("post_attention_norm")?,
                ffn: FeedForward::load(store, &names, i, d, eps, &params)?,
                ple: match &ple {
                    Some(p) => Some(PleBlock::load(store, &names, i, d, p.width, eps)?),
                    None => None,
                },
                scalar,
            });
        }
        // llama.cpp's converter expresses proportional RoPE as per-pair divisors of the global
        // frequencies: 1 for the rotating pairs, 1e30 for the others.
        let freq_factors = match store.get("rope_freqs.weight") {
            Some(t) if naming == Naming::Gguf => {
                let t = t?;
                let f = t.to_f32()?;
                if f.len() != params.global_rope.dim / 2 {
                    return Err(LoadError::tensor(
                        store.path(),
                        &t.name,
                        format!(
                            "{} values for {} rotary pairs",
                            f.len(),
                            params.global_rope.dim / 2
                        ),
                    ));
                }
                Some(f)
            }
            _ => None,
        };
        Ok(Gemma4 {
            cfg: cfg.clone(),
            embed,
            ple,
            layers,
            norm: RmsNorm::load(store, &names.global("output_norm", ""), d, eps, false)?,
            head,
            local_rope: Rope::new(&params.local_rope, None),
            global_rope: Rope::new(&params.global_rope, freq_factors.as_deref()),
            media: Gemma4Media::load(store, src, d)?,
            params,
        })
    }

    /// The family-specific settings in use.
    pub fn params(&self) -> &Gemma4Params {
        &self.params
    }

    /// A sliding layer's window. A drafter's sliding layers see one key more: transformers
    /// masks them with the bidirectional window `|q − k| ≤ window` over the target's keys
    /// before the query, so the `window + 1` last of them.
    fn window(&self, kind: LayerKind) -> Option<usize> {
        match kind {
            LayerKind::Sliding => self
                .cfg
                .sliding_window
                .map(|w| w + usize::from(self.params.reads_target)),
            LayerKind::Full => None,
        }
    }

    /// The scaled embeddings (× √hidden) of `ids`, `[ids, hidden]`: what a drafter reads of
    /// the last token.
    pub fn embed_rows(&self, ids: &[u32]) -> Result<Vec<f32>> {
        self.embed.forward(ids)
    }
}

impl CausalLm for Gemma4 {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn media(&self) -> Option<&dyn crate::arch::multimodal::MediaTowers> {
        self.media.as_ref().map(|m| m as _)
    }

    fn as_gemma4(&self) -> Option<&Gemma4> {
        Some(self)
    }

    fn attach_mmproj(
        &mut self,
        mm: &crate::arch::mmproj::Mmproj,
    ) -> std::result::Result<(), LoadError> {
        let media = Gemma4Media::load(mm, &mm.source(), self.cfg.hidden_size)?;
        self.media = Some(media.ok_or_else(|| {
            LoadError::malformed(mm.path(), "holds no Gemma 4 vision or audio tower")
        })?);
        Ok(())
    }

    /// Sliding layers keep only about two windows of positions; each layer's rows have its own
    /// width; KV-shared layers store nothing.
    fn new_cache(&self, capacity: usize) -> KvCache {
        let windows: Vec<Option<usize>> = self.layers.iter().map(|l| self.window(l.kind)).collect();
        let widths: Vec<usize> = (0..self.layers.len())
            .map(|i| {
                if self.params.is_kv_shared(i) {
                    0
                } else {
                    self.params.shapes[i].n_kv_heads * self.params.shapes[i].head_dim
                }
            })
            .collect();
        KvCache::new(
            self.cfg.n_layers,
            self.cfg.n_kv_heads * self.cfg.head_dim,
            capacity,
        )
        .with_windows(&windows)
        .with_row_widths(&widths)
    }

    /// When no sequence wants the logits of every position, the KV-shared layers (which store
    /// nothing) run on each sequence's last position only, as transformers does in generation.
    fn plan(&self) -> Plan<'_> {
        let layers = self
            .layers
            .iter()
            .map(|l| {
                let spec = AttnSpec {
                    rope: match l.kind {
                        LayerKind::Full => 0,
                        LayerKind::Sliding => 1,
                    },
                    scale: 1.0,
                    window: self.window(l.kind),
                    softcap: None,
                };
                let mixer = Mixer::Attention { op: &l.attn, spec };
                let mut layer = PlanLayer::new(&l.attn_norm, mixer, l.ffn.plan());
                layer.mixer_post_norm = Some(&l.post_attn_norm);
                layer.ple = l.ple.as_ref().map(|p| p as &dyn PleOp);
                layer.scalar = (l.scalar != 1.0).then_some(l.scalar);
                layer
            })
            .collect();
        let ropes = vec![&self.global_rope as _, &self.local_rope as _];
        let mut plan = Plan::new(&self.embed, layers, &self.norm, &self.head, ropes);
        plan.ple = self.ple.as_ref().map(|p| p as &dyn PleInputsOp);
        plan.final_softcap = self.params.final_softcap;
        plan.last_rows_from = (0..self.layers.len()).find(|&i| self.params.is_kv_shared(i));
        plan
    }
}
