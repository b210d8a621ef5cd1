//! Gemma 4's family-specific settings, read from `config.json` (transformers `gemma4_text`, flat
//! or nested under `text_config`) or GGUF metadata (llama.cpp's `gemma4`): per-layer attention
//! shapes (`per_layer_config` as transformers 5.24 writes it, the hub's `global_head_dim` /
//! `num_global_key_value_heads`, or GGUF's `key_length` / `key_length_swa` and per-layer
//! `head_count_kv`), the KV-sharing plan, per-layer-type RoPE, per-layer embeddings,
//! per-layer MLP widths, the MoE block and the final soft-cap. Fields a `config.json` leaves out
//! take `Gemma4TextConfig`'s defaults ([`crate::config::gemma4_default`]).

use super::LayerKind;
use crate::config::{
    gemma4_default, ConfigSource, ModelConfig, RopeConfig, RopeScaling, RopeStyle,
};
use crate::error::LoadError;
use serde_json::Value;

/// Attention shape of one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerShape {
    pub head_dim: usize,
    pub n_kv_heads: usize,
}

/// The routed-experts block (26B-A4B style), run beside the dense MLP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeParams {
    pub n_experts: usize,
    /// Experts per token.
    pub top_k: usize,
    /// Hidden size of one expert.
    pub ffn: usize,
}

/// Everything Gemma 4 needs beyond [`ModelConfig`].
#[derive(Clone, Debug, PartialEq)]
pub struct Gemma4Params {
    pub layer_kinds: Vec<LayerKind>,
    /// Per layer: head dim and kv heads (global layers usually differ from sliding ones).
    pub shapes: Vec<LayerShape>,
    /// Per layer: the layer whose keys and values it attends to (itself, or for the top
    /// `num_kv_shared_layers` layers the last earlier unshared layer of the same kind).
    pub kv_source: Vec<usize>,
    /// Global layers use their key projection as values (`attention_k_eq_v`). GGUF files say
    /// it per layer by leaving out `attn_v`.
    pub k_eq_v: bool,
    /// RoPE of the sliding layers and of the global layers (each over that kind's head dim;
    /// a GGUF file's `rope_freqs.weight` further divides the global frequencies).
    pub local_rope: RopeConfig,
    pub global_rope: RopeConfig,
    /// Per-layer embeddings: width per layer, when the model has them.
    pub ple: Option<usize>,
    /// Per layer: hidden size of the dense MLP (KV-shared layers are twice as wide with
    /// `use_double_wide_mlp`).
    pub ffn: Vec<usize>,
    pub moe: Option<MoeParams>,
    /// Final logits become `cap · tanh(logits / cap)`.
    pub final_softcap: Option<f32>,
    /// A drafter (transformers `gemma4_assistant`): every layer reads a target model's keys
    /// and values (`kv_source` indexes the target's layers) at the positions before its own.
    pub reads_target: bool,
}

/// A `text_config` field as written (`Some(Null)` when the file says null), or the family
/// default when the file leaves it out.
fn field(src: &ConfigSource<'_>, key: &str) -> Option<Value> {
    if let ConfigSource::Json { json, .. } = src {
        let text = json.get("text_config").unwrap_or(json);
        if let Some(v) = text.get(key) {
            return Some(v.clone());
        }
    }
    gemma4_default(key)
}

fn bad(src: &ConfigSource<'_>, what: String) -> LoadError {
    LoadError::field(src.path(), what)
}

/// A non-negative integer field; null and absent-without-default are `None`.
fn int(src: &ConfigSource<'_>, key: &str) -> Result<Option<usize>, LoadError> {
    match field(src, key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(|v| Some(v as usize)).ok_or_else(|| {
            bad(
                src,
                format!("field '{key}' must be a non-negative integer, got {v}"),
            )
        }),
    }
}

fn flag(src: &ConfigSource<'_>, key: &str) -> Result<bool, LoadError> {
    match field(src, key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(b),
        Some(v) => Err(bad(src, format!("field '{key}' must be a bool, got {v}"))),
    }
}

/// RoPE of one layer kind from its `rope_parameters` entry.
fn rope_of(
    src: &ConfigSource<'_>,
    params: &Value,
    kind: &str,
    head_dim: usize,
) -> Result<RopeConfig, LoadError> {
    let p = params
        .get(kind)
        .filter(|p| p.is_object())
        .ok_or_else(|| bad(src, format!("rope_parameters has no '{kind}' entry")))?;
    let theta = p
        .get("rope_theta")
        .and_then(Value::as_f64)
        .filter(|t| t.is_finite() && *t > 0.0)
        .ok_or_else(|| {
            bad(
                src,
                format!("rope_parameters.{kind}.rope_theta must be positive"),
            )
        })?;
    let num = |k: &str, default: f64| -> Result<f64, LoadError> {
        match p.get(k) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_f64()
                .ok_or_else(|| bad(src, format!("rope_parameters.{kind}.{k} must be a number"))),
        }
    };
    let kind_name = p
        .get("rope_type")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let scaling = match kind_name {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear {
            factor: num("factor", 1.0)? as f32,
        },
        "proportional" => {
            let partial = num("partial_rotary_factor", 1.0)?;
            if !(0.0..=1.0).contains(&partial) {
                return Err(bad(
                    src,
                    format!(
                        "rope_parameters.{kind}.partial_rotary_factor {partial} is not in [0, 1]"
                    ),
                ));
            }
            RopeScaling::Proportional {
                factor: num("factor", 1.0)? as f32,
                partial_rotary_factor: partial,
            }
        }
        other => {
            return Err(bad(
                src,
                format!("rope type '{other}' ({kind} layers) is not supported for Gemma 4"),
            ))
        }
    };
    Ok(RopeConfig {
        theta: theta as f32,
        dim: head_dim,
        style: RopeStyle::Half,
        scaling,
    })
}

/// Checks that every layer's heads divide into its kv heads.
fn check_shapes(
    src: &ConfigSource<'_>,
    cfg: &ModelConfig,
    shapes: &[LayerShape],
) -> Result<(), LoadError> {
    for (i, s) in shapes.iter().enumerate() {
        if s.head_dim == 0 || s.n_kv_heads == 0 || !cfg.n_heads.is_multiple_of(s.n_kv_heads) {
            return Err(bad(
                src,
                format!(
                    "layer {i}: {} heads over {} kv heads of dim {}",
                    cfg.n_heads, s.n_kv_heads, s.head_dim
                ),
            ));
        }
    }
    Ok(())
}

/// The KV-sharing plan: the top `shared` layers read the last unshared layer of their kind.
fn kv_sources(
    src: &ConfigSource<'_>,
    layer_kinds: &[LayerKind],
    shapes: &[LayerShape],
    shared: usize,
) -> Result<Vec<usize>, LoadError> {
    let n = layer_kinds.len();
    if shared >= n && shared > 0 {
        return Err(bad(
            src,
            format!("{shared} KV-shared layers leave no layer computing keys ({n} layers)"),
        ));
    }
    let first_shared = n - shared;
    let mut kv_source: Vec<usize> = (0..n).collect();
    for i in first_shared..n {
        let kind = layer_kinds[i];
        kv_source[i] = (0..first_shared)
            .rev()
            .find(|&j| layer_kinds[j] == kind)
            .ok_or_else(|| {
                bad(
                    src,
                    format!("KV-shared layer {i} has no earlier {kind:?} layer to share with"),
                )
            })?;
        if shapes[kv_source[i]] != shapes[i] {
            return Err(bad(
                src,
                format!(
                    "KV-shared layer {i} and its source {} differ in shape",
                    kv_source[i]
                ),
            ));
        }
    }
    Ok(kv_source)
}

/// A drafter's KV plan: each layer reads `target`'s last unshared layer of its kind (the layer
/// transformers' target stores in `shared_kv_states`).
fn target_sources(
    src: &ConfigSource<'_>,
    layer_kinds: &[LayerKind],
    shapes: &[LayerShape],
    target: &Gemma4Params,
) -> Result<Vec<usize>, LoadError> {
    let n_target = target.layer_kinds.len();
    layer_kinds
        .iter()
        .enumerate()
        .map(|(i, &kind)| {
            let j = (0..n_target)
                .rev()
                .find(|&j| target.layer_kinds[j] == kind && !target.is_kv_shared(j))
                .ok_or_else(|| {
                    bad(
                        src,
                        format!("drafter layer {i} is {kind:?}, but the target has no such layer"),
                    )
                })?;
            if target.shapes[j] != shapes[i] {
                return Err(bad(
                    src,
                    format!(
                        "drafter layer {i} has head dim {} and {} kv heads, the target's layer \
                         {j} it reads {} and {}",
                        shapes[i].head_dim,
                        shapes[i].n_kv_heads,
                        target.shapes[j].head_dim,
                        target.shapes[j].n_kv_heads
                    ),
                ));
            }
            Ok(j)
        })
        .collect()
}

impl Gemma4Params {
    /// Reads the settings from GGUF metadata or a `config.json`.
    pub fn read(cfg: &ModelConfig, src: &ConfigSource<'_>) -> Result<Self, LoadError> {
        if src.gguf().is_some() {
            return Self::read_gguf(cfg, src);
        }
        Self::read_json(cfg, src, None)
    }

    /// Reads the text settings of a drafter's `config.json` (transformers `gemma4_assistant`,
    /// nested under `text_config`) for `target`: every layer reads the keys and values of the
    /// target's last unshared layer of its kind, which must have its head dim and kv heads.
    /// transformers' `validate_architecture` rules hold: no per-layer embeddings, no experts,
    /// no double-wide MLP, every layer KV-shared.
    pub fn read_drafter(
        cfg: &ModelConfig,
        src: &ConfigSource<'_>,
        target: &Gemma4Params,
    ) -> Result<Self, LoadError> {
        if src.gguf().is_some() {
            return Err(bad(
                src,
                "a Gemma 4 drafter is read from a config.json".into(),
            ));
        }
        let n = cfg.n_layers;
        match int(src, "num_kv_shared_layers")? {
            None | Some(0) => {}
            Some(s) if s == n => {}
            Some(s) => {
                return Err(bad(
                    src,
                    format!("num_kv_shared_layers is {s}; a drafter shares all {n} layers"),
                ))
            }
        }
        for key in ["enable_moe_block", "use_double_wide_mlp"] {
            if flag(src, key)? {
                return Err(bad(src, format!("a drafter cannot have '{key}'")));
            }
        }
        let p = Self::read_json(cfg, src, Some(target))?;
        if p.ple.is_some() {
            return Err(bad(
                src,
                "a drafter cannot have per-layer inputs (hidden_size_per_layer_input)".into(),
            ));
        }
        Ok(p)
    }

    fn read_json(
        cfg: &ModelConfig,
        src: &ConfigSource<'_>,
        target: Option<&Gemma4Params>,
    ) -> Result<Self, LoadError> {
        super::check_activation(src)?;
        let n = cfg.n_layers;
        if let Some(Value::String(b)) = field(src, "use_bidirectional_attention") {
            if b == "all" {
                return Err(bad(
                    src,
                    "use_bidirectional_attention 'all' (an encoder) is not supported".into(),
                ));
            }
        }
        // transformers' default pattern is 5 sliding : 1 full; the last layer is always full.
        let mut layer_kinds = super::layer_kinds(src, n, 6)?;
        if let Some(last) = layer_kinds.last_mut() {
            *last = LayerKind::Full;
        }

        let k_eq_v = flag(src, "attention_k_eq_v")?;
        let base = LayerShape {
            head_dim: cfg.head_dim,
            n_kv_heads: cfg.n_kv_heads,
        };
        let mut shapes = vec![base; n];
        match field(src, "per_layer_config") {
            Some(Value::Object(per_layer)) => {
                for (idx, over) in &per_layer {
                    let i: usize = idx.trim().parse().ok().filter(|&i| i < n).ok_or_else(|| {
                        bad(
                            src,
                            format!("per_layer_config key '{idx}' is not a layer index"),
                        )
                    })?;
                    let over = over.as_object().ok_or_else(|| {
                        bad(src, format!("per_layer_config.{idx} must be an object"))
                    })?;
                    for (k, v) in over {
                        let v = v
                            .as_u64()
                            .map(|v| v as usize)
                            .filter(|&v| v > 0)
                            .ok_or_else(|| {
                                bad(
                                    src,
                                    format!(
                                        "per_layer_config.{idx}.{k} must be a positive integer"
                                    ),
                                )
                            })?;
                        match k.as_str() {
                            "head_dim" => shapes[i].head_dim = v,
                            "num_key_value_heads" => shapes[i].n_kv_heads = v,
                            other => {
                                return Err(bad(
                                    src,
                                    format!("per_layer_config.{idx}.{other} is not supported"),
                                ))
                            }
                        }
                    }
                }
            }
            None | Some(Value::Null) => {
                // Hub spelling: global layers take `global_head_dim` and, with k = v,
                // `num_global_key_value_heads`.
                let global = LayerShape {
                    head_dim: int(src, "global_head_dim")?.unwrap_or(base.head_dim),
                    n_kv_heads: match int(src, "num_global_key_value_heads")? {
                        Some(h) if k_eq_v => h,
                        _ => base.n_kv_heads,
                    },
                };
                for (s, k) in shapes.iter_mut().zip(&layer_kinds) {
                    if *k == LayerKind::Full {
                        *s = global;
                    }
                }
            }
            Some(v) => {
                return Err(bad(
                    src,
                    format!("per_layer_config must be an object, got {v}"),
                ))
            }
        }
        check_shapes(src, cfg, &shapes)?;
        let kv_source = match target {
            Some(t) => target_sources(src, &layer_kinds, &shapes, t)?,
            None => {
                let shared = int(src, "num_kv_shared_layers")?.unwrap_or(0);
                kv_sources(src, &layer_kinds, &shapes, shared)?
            }
        };
        let double_wide = flag(src, "use_double_wide_mlp")?;
        let ffn = (0..n)
            .map(|i| {
                if double_wide && kv_source[i] != i {
                    2 * cfg.intermediate_size
                } else {
                    cfg.intermediate_size
                }
            })
            .collect();

        let rope_params = field(src, "rope_parameters")
            .filter(Value::is_object)
            .ok_or_else(|| bad(src, "rope_parameters must be an object".into()))?;
        let head_of = |kind: LayerKind| {
            layer_kinds
                .iter()
                .position(|&k| k == kind)
                .map_or(base.head_dim, |i| shapes[i].head_dim)
        };
        let local_rope = if layer_kinds.contains(&LayerKind::Sliding) {
            rope_of(
                src,
                &rope_params,
                "sliding_attention",
                head_of(LayerKind::Sliding),
            )?
        } else {
            cfg.rope.clone()
        };
        let global_rope = rope_of(
            src,
            &rope_params,
            "full_attention",
            head_of(LayerKind::Full),
        )?;
        for kind in [LayerKind::Sliding, LayerKind::Full] {
            let dims: Vec<usize> = (0..n)
                .filter(|&i| layer_kinds[i] == kind)
                .map(|i| shapes[i].head_dim)
                .collect();
            if dims.windows(2).any(|w| w[0] != w[1]) {
                return Err(bad(
                    src,
                    format!("{kind:?} layers have different head dims {dims:?}"),
                ));
            }
        }

        let ple = int(src, "hidden_size_per_layer_input")?.filter(|&p| p > 0);
        let moe = if flag(src, "enable_moe_block")? {
            let need = |k: &str| -> Result<usize, LoadError> {
                int(src, k)?
                    .filter(|&v| v > 0)
                    .ok_or_else(|| bad(src, format!("enable_moe_block needs a positive '{k}'")))
            };
            let m = MoeParams {
                n_experts: need("num_experts")?,
                top_k: need("top_k_experts")?,
                ffn: need("moe_intermediate_size")?,
            };
            if m.top_k > m.n_experts {
                return Err(bad(
                    src,
                    format!(
                        "top_k_experts {} exceeds num_experts {}",
                        m.top_k, m.n_experts
                    ),
                ));
            }
            Some(m)
        } else {
            None
        };
        let final_softcap = match field(src, "final_logit_softcapping") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let c = v.as_f64().ok_or_else(|| {
                    bad(
                        src,
                        format!("final_logit_softcapping must be a number, got {v}"),
                    )
                })?;
                (c > 0.0).then_some(c as f32)
            }
        };
        Ok(Gemma4Params {
            layer_kinds,
            shapes,
            kv_source,
            k_eq_v,
            local_rope,
            global_rope,
            ple,
            ffn,
            moe,
            final_softcap,
            reads_target: target.is_some(),
        })
    }

    /// Reads the settings from llama.cpp's `gemma4` GGUF metadata.
    fn read_gguf(cfg: &ModelConfig, src: &ConfigSource<'_>) -> Result<Self, LoadError> {
        let n = cfg.n_layers;
        let mut layer_kinds = super::layer_kinds(src, n, 6)?;
        if let Some(last) = layer_kinds.last_mut() {
            *last = LayerKind::Full;
        }
        // A per-layer array or one value for every layer.
        let per_layer = |k: &str, default: usize| -> Result<Vec<usize>, LoadError> {
            match src.gguf_value(k) {
                None => Ok(vec![default; n]),
                Some(v) => match v.as_array() {
                    Some(a) => {
                        let xs: Vec<usize> = a
                            .to_ints()
                            .filter(|xs| xs.len() == n && xs.iter().all(|&x| x > 0))
                            .ok_or_else(|| {
                                bad(
                                    src,
                                    format!("metadata '{k}' must hold {n} positive integers"),
                                )
                            })?
                            .into_iter()
                            .map(|x| x as usize)
                            .collect();
                        Ok(xs)
                    }
                    None => Ok(vec![src.usize(k, "")?.unwrap_or(default); n]),
                },
            }
        };
        let kv_heads = per_layer("attention.head_count_kv", cfg.n_kv_heads)?;
        let full_dim = src
            .usize("attention.key_length", "")?
            .unwrap_or(cfg.head_dim);
        let swa_dim = src
            .usize("attention.key_length_swa", "")?
            .unwrap_or(full_dim);
        let shapes: Vec<LayerShape> = (0..n)
            .map(|i| LayerShape {
                head_dim: match layer_kinds[i] {
                    LayerKind::Sliding => swa_dim,
                    LayerKind::Full => full_dim,
                },
                n_kv_heads: kv_heads[i],
            })
            .collect();
        check_shapes(src, cfg, &shapes)?;
        let shared = src.usize("attention.shared_kv_layers", "")?.unwrap_or(0);
        let kv_source = kv_sources(src, &layer_kinds, &shapes, shared)?;
        let local_rope = RopeConfig {
            theta: src.f64("rope.freq_base_swa", "")?.unwrap_or(10_000.0) as f32,
            dim: src
                .usize("rope.dimension_count_swa", "")?
                .unwrap_or(swa_dim),
            style: RopeStyle::Half,
            scaling: RopeScaling::None,
        };
        let global_rope = RopeConfig {
            theta: cfg.rope.theta,
            dim: src.usize("rope.dimension_count", "")?.unwrap_or(full_dim),
            style: RopeStyle::Half,
            scaling: RopeScaling::None,
        };
        for (r, d) in [(&local_rope, swa_dim), (&global_rope, full_dim)] {
            if r.dim > d || r.dim % 2 != 0 || !(r.theta.is_finite() && r.theta > 0.0) {
                return Err(bad(
                    src,
                    format!(
                        "rope dimension {} (θ {}) must be even and ≤ {d}",
                        r.dim, r.theta
                    ),
                ));
            }
        }
        let moe = match src.usize("expert_count", "")? {
            Some(e) if e > 0 => {
                let need = |k: &str| -> Result<usize, LoadError> {
                    src.usize(k, "")?
                        .filter(|&v| v > 0 && (k != "expert_used_count" || v <= e))
                        .ok_or_else(|| {
                            bad(src, format!("metadata '{k}' is missing or out of range"))
                        })
                };
                Some(MoeParams {
                    n_experts: e,
                    top_k: need("expert_used_count")?,
                    ffn: need("expert_feed_forward_length")?,
                })
            }
            _ => None,
        };
        Ok(Gemma4Params {
            layer_kinds,
            shapes,
            kv_source,
            k_eq_v: false,
            local_rope,
            global_rope,
            ple: src
                .usize("embedding_length_per_layer_input", "")?
                .filter(|&p| p > 0),
            ffn: per_layer("feed_forward_length", cfg.intermediate_size)?,
            moe,
            final_softcap: super::softcap(src, "final_logit_softcapping", "")?,
            reads_target: false,
        })
    }

    /// Whether layer `i` reads another layer's keys and values (a drafter's layers all do).
    pub fn is_kv_shared(&self, i: usize) -> bool {
        self.reads_target || self.kv_source[i] != i
    }
}
