//! Qwen 3.5 hybrid decoder (transformers `qwen3_5` / `qwen3_5_moe` text model, llama.cpp
//! `qwen35` / `qwen35moe`): pre-norm blocks whose token mixer is either a Gated DeltaNet
//! (linear attention with a fixed-size recurrent state) or gated full attention (QK-norm,
//! partial RoPE, sigmoid output gate, GQA), followed by a SwiGLU MLP or a sparse MoE with a
//! shared expert. Norms are zero-centred (`1 + w`) in transformers' checkpoints; llama.cpp's
//! converter stores `1 + w`.

use super::CausalLm;
use crate::config::{ConfigSource, ModelConfig};
use crate::error::{LoadError, Result};
use crate::gguf::MetaArray;
use crate::loader::{Naming, TensorStore, TensorView};
use crate::nn::gated_delta::{DeltaNames, DeltaShape, GatedDeltaNet};
use crate::nn::moe::SparseMoe;
use crate::nn::{
    AttentionShape, Embedding, GateAct, GatedMlp, KvCache, Linear, MRope, RmsNorm, Rope,
    SelfAttention,
};
use crate::plan::{AttnSpec, Ffn, FfnBody, Layer as PlanLayer, Mixer, Plan};
use std::path::Path;

// One per layer, built once: the size difference between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
enum MixerBlock {
    Attention(SelfAttention),
    Delta(GatedDeltaNet),
}

#[allow(clippy::large_enum_variant)] // one per layer, built once at load
enum FfnBlock {
    Dense(GatedMlp),
    Moe(SparseMoe),
}

struct Layer {
    norm1: RmsNorm,
    mixer: MixerBlock,
    norm2: RmsNorm,
    ffn: FfnBlock,
}

/// A loaded Qwen 3.5 (dense or MoE) model.
pub struct Qwen35 {
    cfg: ModelConfig,
    embed: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    head: Linear,
    /// Multimodal rotary (plain RoPE on text positions).
    rope: MRope,
    /// Recurrent state sizes per layer (zero for attention layers).
    state_sizes: Vec<(usize, usize)>,
    /// The vision tower of a multimodal checkpoint.
    vision: Option<super::qwen_vision::Qwen35Vision>,
}

/// transformers' multimodal checkpoints keep the text model under `model.language_model.`.
struct Prefixed<'a> {
    inner: &'a dyn TensorStore,
    prefix: &'static str,
}

impl TensorStore for Prefixed<'_> {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn get(&self, name: &str) -> Option<Result<TensorView, LoadError>> {
        match name.strip_prefix("model.") {
            Some(rest) => self.inner.get(&format!("{}{rest}", self.prefix)),
            None => self.inner.get(name),
        }
    }
}

/// Per-layer tensor names in either spelling, by GGUF part name.
fn layer_name(naming: Naming, i: usize, gguf_part: &str) -> String {
    match naming {
        Naming::Gguf => match gguf_part {
            "ssm_dt" => format!("blk.{i}.ssm_dt.bias"),
            "ssm_a" => format!("blk.{i}.ssm_a"),
            p => format!("blk.{i}.{p}.weight"),
        },
        Naming::Hf => {
            let hf = match gguf_part {
                "attn_qkv" => "linear_attn.in_proj_qkv.weight",
                "attn_gate" => "linear_attn.in_proj_z.weight",
                "ssm_beta" => "linear_attn.in_proj_b.weight",
                "ssm_alpha" => "linear_attn.in_proj_a.weight",
                "ssm_conv1d" => "linear_attn.conv1d.weight",
                "ssm_dt" => "linear_attn.dt_bias",
                "ssm_a" => "linear_attn.A_log",
                "ssm_norm" => "linear_attn.norm.weight",
                "ssm_out" => "linear_attn.out_proj.weight",
                "ffn_gate_inp" => "mlp.gate.weight",
                "ffn_gate_up_exps" => "mlp.experts.gate_up_proj",
                "ffn_gate_exps" => "mlp.experts.gate_proj",
                "ffn_up_exps" => "mlp.experts.up_proj",
                "ffn_down_exps" => "mlp.experts.down_proj",
                "ffn_gate_shexp" => "mlp.shared_expert.gate_proj.weight",
                "ffn_up_shexp" => "mlp.shared_expert.up_proj.weight",
                "ffn_down_shexp" => "mlp.shared_expert.down_proj.weight",
                "ffn_gate_inp_shexp" => "mlp.shared_expert_gate.weight",
                p => return Naming::Hf.layer(i, p),
            };
            format!("model.layers.{i}.{hf}")
        }
    }
}

/// Which layers are full attention: `layer_types` (config.json), GGUF
/// `attention.recurrent_layers` (one bool per layer, true = Gated DeltaNet; llama.cpp's converter
/// writes it and a `full_attention_interval` that need not agree with it), or every
/// `full_attention_interval`-th layer (default 4).
fn full_attention_layers(
    cfg: &ModelConfig,
    src: &ConfigSource<'_>,
) -> Result<Vec<bool>, LoadError> {
    if let Some(v) = src.gguf_value("attention.recurrent_layers") {
        let flags: Option<Vec<bool>> = match v.as_array() {
            Some(MetaArray::Bool(b)) => Some(b.clone()),
            Some(a) => a.to_ints().map(|i| i.into_iter().map(|x| x != 0).collect()),
            None => None,
        };
        return match flags {
            Some(f) if f.len() == cfg.n_layers => Ok(f.into_iter().map(|r| !r).collect()),
            _ => Err(LoadError::field(
                src.path(),
                format!(
                    "metadata 'attention.recurrent_layers' must be {} bools, got {v}",
                    cfg.n_layers
                ),
            )),
        };
    }
    if let Some(types) = src.json("layer_types").and_then(|v| v.as_array()) {
        if types.len() != cfg.n_layers {
            return Err(LoadError::field(
                src.path(),
                format!(
                    "layer_types has {} entries for {} layers",
                    types.len(),
                    cfg.n_layers
                ),
            ));
        }
        return types
            .iter()
            .map(|t| match t.as_str() {
                Some("full_attention") => Ok(true),
                Some("linear_attention") => Ok(false),
                _ => Err(LoadError::field(
                    src.path(),
                    format!("unknown layer type {t}"),
                )),
            })
            .collect();
    }
    let every = src
        .usize("full_attention_interval", "full_attention_interval")?
        .unwrap_or(4)
        .max(1);
    Ok((0..cfg.n_layers).map(|i| (i + 1) % every == 0).collect())
}

/// The multimodal rotary of the text model: `mrope_section` (`rope_parameters`, with
/// `mrope_interleaved`) or GGUF `rope.dimension_sections` (llama.cpp's qwen35 interleaves);
/// without either every frequency reads the time axis, which is the plain RoPE.
fn mrope(cfg: &ModelConfig, src: &ConfigSource<'_>) -> Result<MRope, LoadError> {
    let rope = Rope::new(&cfg.rope, None);
    let half = cfg.rope.dim / 2;
    let params = src.json("rope_parameters");
    let json_sections = params.and_then(|p| p.get("mrope_section"));
    let (sections, interleaved) = if let Some(v) = json_sections {
        let s: Option<Vec<usize>> = v.as_array().map(|a| {
            a.iter()
                .filter_map(|x| x.as_u64().map(|x| x as usize))
                .collect()
        });
        let interleaved = params
            .and_then(|p| p.get("mrope_interleaved"))
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        (
            s.filter(|s| s.len() == 3).ok_or_else(|| {
                LoadError::field(
                    src.path(),
                    format!("mrope_section must be 3 counts, got {v}"),
                )
            })?,
            interleaved,
        )
    } else if let Some(v) = src.gguf_value("rope.dimension_sections") {
        let s = v.as_array().and_then(|a| a.to_ints()).map(|a| {
            a.into_iter()
                .take(3)
                .map(|x| x.max(0) as usize)
                .collect::<Vec<_>>()
        });
        (
            s.filter(|s| s.len() == 3).ok_or_else(|| {
                LoadError::field(
                    src.path(),
                    format!("rope.dimension_sections must be counts, got {v}"),
                )
            })?,
            true,
        )
    } else {
        (vec![half, 0, 0], false)
    };
    MRope::new(rope, [sections[0], sections[1], sections[2]], interleaved)
        .map_err(|e| LoadError::field(src.path(), e))
}

impl Qwen35 {
    pub fn load(
        cfg: &ModelConfig,
        store: &dyn TensorStore,
        naming: Naming,
        src: &ConfigSource<'_>,
    ) -> Result<Self, LoadError> {
        let vision = super::qwen_vision::Qwen35Vision::load(store, src, cfg.hidden_size)?;
        let prefixed = Prefixed {
            inner: store,
            prefix: "model.language_model.",
        };
        let store: &dyn TensorStore = if naming == Naming::Hf
            && store
                .get("model.language_model.embed_tokens.weight")
                .is_some()
        {
            &prefixed
        } else {
            store
        };
        let gguf = naming == Naming::Gguf;
        // transformers stores `w` of `1 + w` norms; llama.cpp's converter stores `1 + w`.
        let offset = !gguf;
        let (d, hd, eps) = (cfg.hidden_size, cfg.head_dim, cfg.norm_eps);
        let (embed, head) = super::embedding_and_head(
            store,
            &naming.global("token_embd"),
            &naming.global("output"),
            [cfg.vocab_size, d],
            cfg.tie_embeddings,
            1.0,
        )?;
        let full = full_attention_layers(cfg, src)?;
        let req = |gk: &str, jk: &str| -> Result<usize, LoadError> {
            src.usize(gk, jk)?
                .ok_or_else(|| LoadError::field(src.path(), format!("'{jk}' / '{gk}' is missing")))
        };
        let delta = DeltaShape {
            dim: d,
            n_k_heads: req("ssm.group_count", "linear_num_key_heads")?,
            k_dim: req("ssm.state_size", "linear_key_head_dim")?,
            n_v_heads: req("ssm.time_step_rank", "linear_num_value_heads")?,
            v_dim: if gguf {
                req("ssm.inner_size", "")? / req("ssm.time_step_rank", "")?.max(1)
            } else {
                req("", "linear_value_head_dim")?
            },
            kernel: req("ssm.conv_kernel", "linear_conv_kernel_dim")?,
            norm_eps: eps,
            tiled_groups: gguf,
        };
        let attn = AttentionShape {
            dim: d,
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: hd,
            norm_eps: eps,
            qk_norm_unit_offset: offset,
            output_gate: true,
        };
        let moe = if cfg.arch == crate::config::Arch::Qwen35Moe {
            Some((
                req("expert_count", "num_experts")?,
                req("expert_used_count", "num_experts_per_tok")?,
                req(
                    "expert_shared_feed_forward_length",
                    "shared_expert_intermediate_size",
                )?,
            ))
        } else {
            None
        };
        let mut layers = Vec::with_capacity(cfg.n_layers);
        let mut state_sizes = Vec::with_capacity(cfg.n_layers);
        for (i, &is_full) in full.iter().enumerate() {
            let name = |p: &str| layer_name(naming, i, p);
            let mixer = if is_full {
                state_sizes.push((0, 0));
                MixerBlock::Attention(SelfAttention::load(store, name, attn)?)
            } else {
                state_sizes.push(delta.state_sizes());
                let names = DeltaNames {
                    qkv: name("attn_qkv"),
                    z: name("attn_gate"),
                    b: name("ssm_beta"),
                    a: name("ssm_alpha"),
                    conv: name("ssm_conv1d"),
                    dt_bias: name("ssm_dt"),
                    a_log: name("ssm_a"),
                    norm: name("ssm_norm"),
                    out: name("ssm_out"),
                    a_is_negated_exp: gguf,
                };
                MixerBlock::Delta(GatedDeltaNet::load(store, &names, delta)?)
            };
            let ffn = match moe {
                None => FfnBlock::Dense(GatedMlp::load(
                    store,
                    [&name("ffn_gate"), &name("ffn_up"), &name("ffn_down")],
                    d,
                    cfg.intermediate_size,
                    GateAct::Silu,
                )?),
                Some((n_exp, top_k, shared_ffn)) => {
                    // transformers saves one tensor per expert; GGUF stacks them.
                    let per_expert =
                        |e: usize, p: &str| format!("model.layers.{i}.mlp.experts.{e}.{p}.weight");
                    let experts = if naming == Naming::Hf
                        && store.get(&per_expert(0, "gate_proj")).is_some()
                    {
                        (0..n_exp)
                            .map(|e| {
                                GatedMlp::load(
                                    store,
                                    [
                                        &per_expert(e, "gate_proj"),
                                        &per_expert(e, "up_proj"),
                                        &per_expert(e, "down_proj"),
                                    ],
                                    d,
                                    cfg.intermediate_size,
                                    GateAct::Silu,
                                )
                            })
                            .collect::<Result<Vec<_>, _>>()?
                    } else {
                        SparseMoe::experts_from_stacked(
                            store,
                            Some(&name("ffn_gate_up_exps")),
                            [&name("ffn_gate_exps"), &name("ffn_up_exps")],
                            &name("ffn_down_exps"),
                            n_exp,
                            cfg.intermediate_size,
                        )?
                    };
                    let shared = GatedMlp::load(
                        store,
                        [
                            &name("ffn_gate_shexp"),
                            &name("ffn_up_shexp"),
                            &name("ffn_down_shexp"),
                        ],
                        d,
                        shared_ffn,
                        GateAct::Silu,
                    )?;
                    let gate_name = name("ffn_gate_inp_shexp");
                    let gate_view = store.require(&gate_name)?;
                    let gate_view = TensorView {
                        shape: vec![1, d],
                        ..gate_view
                    };
                    FfnBlock::Moe(SparseMoe::new(
                        Linear::load(store, &name("ffn_gate_inp"), n_exp, d)?,
                        experts,
                        top_k,
                        Some((shared, Linear::from_view(gate_view, None)?)),
                    )?)
                }
            };
            layers.push(Layer {
                norm1: RmsNorm::load(store, &name("attn_norm"), d, eps, offset)?,
                mixer,
                norm2: RmsNorm::load(store, &name("post_attention_norm"), d, eps, offset)?,
                ffn,
            });
        }
        Ok(Qwen35 {
            cfg: cfg.clone(),
            embed,
            layers,
            norm: RmsNorm::load(store, &naming.global("output_norm"), d, eps, offset)?,
            head,
            rope: mrope(cfg, src)?,
            state_sizes,
            vision,
        })
    }
}

impl CausalLm for Qwen35 {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn new_cache(&self, capacity: usize) -> KvCache {
        KvCache::new(
            self.cfg.n_layers,
            self.cfg.n_kv_heads * self.cfg.head_dim,
            capacity,
        )
        .with_recurrent(&self.state_sizes)
    }

    fn media(&self) -> Option<&dyn super::multimodal::MediaTowers> {
        self.vision
            .as_ref()
            .map(|v| v as &dyn super::multimodal::MediaTowers)
    }

    fn attach_mmproj(&mut self, mm: &super::mmproj::Mmproj) -> std::result::Result<(), LoadError> {
        let vision =
            super::qwen_vision::Qwen35Vision::load(mm, &mm.source(), self.cfg.hidden_size)?;
        self.vision =
            Some(vision.ok_or_else(|| {
                LoadError::malformed(mm.path(), "holds no Qwen 3.5 vision tower")
            })?);
        Ok(())
    }

    fn plan(&self) -> Plan<'_> {
        let spec = AttnSpec {
            rope: 0,
            scale: 1.0 / (self.cfg.head_dim as f32).sqrt(),
            window: None,
            softcap: None,
        };
        let layers = self
            .layers
            .iter()
            .map(|l| {
                let mixer = match &l.mixer {
                    MixerBlock::Attention(a) => Mixer::Attention { op: a, spec },
                    MixerBlock::Delta(g) => Mixer::Recurrent(g),
                };
                let body = match &l.ffn {
                    FfnBlock::Dense(m) => FfnBody::Mlp(m),
                    FfnBlock::Moe(m) => FfnBody::Experts(m),
                };
                PlanLayer::new(&l.norm1, mixer, Ffn::new(&l.norm2, body))
            })
            .collect();
        Plan::new(
            &self.embed,
            layers,
            &self.norm,
            &self.head,
            vec![&self.rope],
        )
    }
}
