//! The parts of one Gemma 4 decoder layer: attention (QK norms with plain `w` gains, an
//! unscaled RMS norm on values, optional k = v, no score scaling, KV sharing), the feed-forward
//! block (dense GeGLU, plus routed experts in MoE layers) and the per-layer-embedding block.

use super::gemma4_config::{Gemma4Params, LayerShape, MoeParams};
use super::Names;
use crate::error::LoadError;
use crate::loader::{Naming, TensorStore};
use crate::nn::moe::SparseMoe;
use crate::nn::{attend_groups, attention_cached, AttnShape, GateAct, GatedMlp, Linear, RmsNorm};
use crate::plan::{
    AttentionOp, AttentionParts, AttnSpec, Ffn, FfnBody, NormOp, PleOp, RopeOp, RowsOp, SeqRows,
};

/// Attention of one layer.
pub struct Attention {
    q: Linear,
    q_norm: RmsNorm,
    /// Key and value projections and norms; `None` in a KV-shared layer.
    kv: Option<KvProj>,
    o: Linear,
    n_heads: usize,
    shape: LayerShape,
    /// The cache layer it reads (its own index unless KV-shared).
    kv_source: usize,
    /// A sliding layer: the soft tokens of a bidirectional media group (an image, under
    /// `use_bidirectional_attention: "vision"`) also see the later tokens of their group.
    /// transformers' `create_masks_for_vision_model` keeps the full-attention layers causal.
    media_groups: bool,
    /// A drafter's layer: its query (rotated at its own position) attends to the target's
    /// cached keys before that position, which is the cache's length.
    reads_target: bool,
}

struct KvProj {
    k: Linear,
    /// `None` when values are the key projection (k = v).
    v: Option<Linear>,
    k_norm: RmsNorm,
    /// RMS norm without gain.
    v_norm: RmsNorm,
}

impl Attention {
    /// Loads layer `i`'s attention.
    pub fn load(
        store: &dyn TensorStore,
        names: &Names,
        i: usize,
        dim: usize,
        n_heads: usize,
        eps: f32,
        p: &Gemma4Params,
    ) -> Result<Self, LoadError> {
        let s = p.shapes[i];
        let name = |part: &str| names.layer(i, part);
        let norm = |part: &str| RmsNorm::load(store, &name(part), s.head_dim, eps, false);
        let kv = if p.is_kv_shared(i) {
            None
        } else {
            let kv_out = s.n_kv_heads * s.head_dim;
            // transformers: global layers with `attention_k_eq_v` have no v projection;
            // llama.cpp: any layer without `attn_v` uses its keys as values.
            let k_eq_v = p.k_eq_v && p.layer_kinds[i] == super::LayerKind::Full;
            let v = match store.get(&name("attn_v")) {
                Some(_) if !k_eq_v => Some(Linear::load(store, &name("attn_v"), kv_out, dim)?),
                Some(_) => None,
                None if k_eq_v || names.naming() == Naming::Gguf => None,
                None => return Err(LoadError::tensor(store.path(), name("attn_v"), "missing")),
            };
            Some(KvProj {
                k: Linear::load(store, &name("attn_k"), kv_out, dim)?,
                v,
                k_norm: norm("attn_k_norm")?,
                v_norm: RmsNorm {
                    weight: vec![1.0; s.head_dim],
                    eps,
                },
            })
        };
        Ok(Attention {
            q: Linear::load(store, &name("attn_q"), n_heads * s.head_dim, dim)?,
            q_norm: norm("attn_q_norm")?,
            kv,
            o: Linear::load(store, &name("attn_output"), dim, n_heads * s.head_dim)?,
            n_heads,
            shape: s,
            kv_source: p.kv_source[i],
            media_groups: p.layer_kinds[i] == super::LayerKind::Sliding,
            reads_target: p.reads_target,
        })
    }
}

/// Unscaled queries (`scale` 1), QK norms with plain gains, an RMS norm without gain on values,
/// k = v where the layer has no v projection, and KV sharing: `skipped[k]` positions of sequence
/// `k` may be left out of a KV-shared layer, whose keys are all in the source layer's cache. In
/// sliding layers the queries of a sequence's media groups see their whole group
/// ([`attend_groups`]). A drafter's layers (all KV-shared) read the target's cache: one row
/// at position `cache.len()` attends to the keys before it.
impl AttentionOp for Attention {
    fn parts(&self) -> AttentionParts<'_> {
        AttentionParts {
            q: &self.q,
            k: self.kv.as_ref().map(|p| &p.k as _),
            v: self.kv.as_ref().and_then(|p| p.v.as_ref().map(|v| v as _)),
            o: &self.o,
            q_norm: Some(&self.q_norm),
            k_norm: self.kv.as_ref().map(|p| &p.k_norm as _),
            v_norm: true,
            output_gate: false,
            n_heads: self.n_heads,
            n_kv_heads: self.shape.n_kv_heads,
            head_dim: self.shape.head_dim,
            kv_source: self.kv.is_none().then_some(self.kv_source),
        }
    }

    fn forward(
        &self,
        h: &[f32],
        t: usize,
        layer: usize,
        seqs: &mut [SeqRows<'_>],
        skipped: &[usize],
        rope: &dyn RopeOp,
        spec: &AttnSpec,
    ) -> Vec<f32> {
        let (hd, nh, nkv) = (self.shape.head_dim, self.n_heads, self.shape.n_kv_heads);
        let (q_row, kv_row) = (nh * hd, nkv * hd);
        let mut q = self.q.forward(h, t);
        self.q_norm.forward_inplace(&mut q);
        let kv = self.kv.as_ref().map(|p| {
            let mut k = p.k.forward(h, t);
            let mut v = match &p.v {
                Some(v) => v.forward(h, t),
                None => k.clone(),
            };
            p.k_norm.forward_inplace(&mut k);
            p.v_norm.forward_inplace(&mut v);
            (k, v)
        });
        let params = AttnShape {
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            scale: spec.scale,
            window: spec.window,
            softcap: spec.softcap,
        };
        let mut a = vec![0f32; t * q_row];
        let mut kv = kv;
        debug_assert!(self.kv.is_none() || skipped.iter().all(|&s| s == 0));
        for (si, sq) in seqs.iter_mut().enumerate() {
            let rows = sq.row..sq.row + sq.len;
            let pos0 = sq.cache.len() + skipped.get(si).copied().unwrap_or(0);
            let q = &mut q[rows.start * q_row..rows.end * q_row];
            rope.apply(q, sq.len, nh, hd, pos0);
            if let Some((k, v)) = kv.as_mut() {
                let k = &mut k[rows.start * kv_row..rows.end * kv_row];
                rope.apply(k, sq.len, nkv, hd, pos0);
                sq.cache
                    .store(layer, k, &v[rows.start * kv_row..rows.end * kv_row], hd);
            }
            let lc = &sq.cache.layers[self.kv_source];
            // A drafter's row attends as the cache's last position does (keys up to pos0 - 1).
            let pos0 = pos0.saturating_sub(usize::from(self.reads_target));
            let mut out =
                attention_cached(q, lc.k.view(), lc.v.view(), lc.ring, sq.len, pos0, &params);
            let groups = match sq.media.as_deref() {
                Some(m) if self.media_groups => m.groups(),
                _ => Vec::new(),
            };
            if !groups.is_empty() {
                let (k, v) = (lc.k.view(), lc.v.view());
                attend_groups(q, k, v, lc.ring, sq.len, pos0, &groups, &params, &mut out);
            }
            a[rows.start * q_row..rows.end * q_row].copy_from_slice(&out);
        }
        self.o.forward(&a, t)
    }
}

/// The routed experts of an MoE layer with their own norms: the router reads the residual
/// stream through an RMS norm whose gain is `scale / √dim`, the experts read it through
/// `pre_ffw_norm_2`, and their sum goes through `post_ffw_norm_2`.
pub struct Experts {
    router_norm: RmsNorm,
    pre_norm: RmsNorm,
    post_norm: RmsNorm,
    moe: SparseMoe,
}

impl Experts {
    /// Loads layer `i`'s router and experts.
    pub fn load(
        store: &dyn TensorStore,
        names: &Names,
        i: usize,
        dim: usize,
        eps: f32,
        m: &MoeParams,
    ) -> Result<Self, LoadError> {
        let name = |part: &str| names.layer(i, part);
        let scale = store
            .require_shape(
                &names.layer_param(i, "ffn_gate_inp", "scale", "router.scale"),
                &[dim],
            )?
            .to_f32()?;
        let root = (dim as f64).powf(-0.5) as f32;
        let per_expert = store
            .require_shape(
                &names.layer_param(i, "ffn_down_exps", "scale", "router.per_expert_scale"),
                &[m.n_experts],
            )?
            .to_f32()?;
        let gate_up = names.layer_param(i, "ffn_gate_up_exps", "weight", "experts.gate_up_proj");
        let down = names.layer_param(i, "ffn_down_exps", "weight", "experts.down_proj");
        let gate = names.layer_param(i, "ffn_gate_exps", "weight", "experts.gate_proj");
        let up = names.layer_param(i, "ffn_up_exps", "weight", "experts.up_proj");
        let experts = SparseMoe::experts_from_stacked_act(
            store,
            Some(&gate_up),
            [&gate, &up],
            &down,
            m.n_experts,
            m.ffn,
            GateAct::GeluTanh,
        )?;
        let router = Linear::load(store, &name("ffn_gate_inp"), m.n_experts, dim)?;
        let norm = |part: &str| RmsNorm::load(store, &name(part), dim, eps, false);
        Ok(Experts {
            router_norm: RmsNorm {
                weight: scale.iter().map(|s| s * root).collect(),
                eps,
            },
            pre_norm: norm("pre_ffw_norm_2")?,
            post_norm: norm("post_ffw_norm_2")?,
            moe: SparseMoe::new(router, experts, m.top_k, None)?.with_expert_scales(per_expert)?,
        })
    }

    /// `x` is the residual stream `[t, dim]`; returns the normed expert mixture.
    pub fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        let r = self.router_norm.forward(x);
        let h = self.pre_norm.forward(x);
        let mut y = self.moe.forward_routed(&r, &h, t);
        self.post_norm.forward_inplace(&mut y);
        y
    }
}

/// Feed-forward block: `post_ffw_norm(mlp)`, or in MoE layers
/// `post_ffw_norm(post_ffw_norm_1(mlp) + experts)`.
pub struct FeedForward {
    pre_norm: RmsNorm,
    mlp: GatedMlp,
    /// `post_ffw_norm_1` and the experts, in MoE layers.
    moe: Option<(RmsNorm, Experts)>,
    post_norm: RmsNorm,
}

impl FeedForward {
    /// Loads layer `i`'s feed-forward block.
    pub fn load(
        store: &dyn TensorStore,
        names: &Names,
        i: usize,
        dim: usize,
        eps: f32,
        p: &Gemma4Params,
    ) -> Result<Self, LoadError> {
        let name = |part: &str| names.layer(i, part);
        let norm = |part: &str| RmsNorm::load(store, &name(part), dim, eps, false);
        let ffn = p.ffn[i];
        let moe = match &p.moe {
            Some(m) => Some((
                norm("post_ffw_norm_1")?,
                Experts::load(store, names, i, dim, eps, m)?,
            )),
            None => None,
        };
        Ok(FeedForward {
            pre_norm: norm("ffn_norm")?,
            mlp: GatedMlp::load(
                store,
                [&name("ffn_gate"), &name("ffn_up"), &name("ffn_down")],
                dim,
                ffn,
                GateAct::GeluTanh,
            )?,
            moe,
            post_norm: norm("post_ffw_norm")?,
        })
    }

    /// The block as a plan step: `post_norm(mlp(pre_norm(x)))`, in MoE layers with
    /// `post_ffw_norm_1(mlp) + experts(x)` before the post-norm.
    pub fn plan(&self) -> Ffn<'_> {
        Ffn {
            norm: &self.pre_norm,
            body: FfnBody::Mlp(&self.mlp),
            side_experts: self
                .moe
                .as_ref()
                .map(|(n, e)| (n as &dyn NormOp, e as &dyn RowsOp)),
            post_norm: Some(&self.post_norm),
        }
    }
}

/// The per-layer-embedding block of one layer: `post_norm(proj(gelu(gate(x)) ⊙ ple))`.
pub struct PleBlock {
    gate: Linear,
    proj: Linear,
    post_norm: RmsNorm,
}

impl PleBlock {
    /// Loads layer `i`'s PLE block (`width` values per token for this layer).
    pub fn load(
        store: &dyn TensorStore,
        names: &Names,
        i: usize,
        dim: usize,
        width: usize,
        eps: f32,
    ) -> Result<Self, LoadError> {
        let name = |part: &str| names.layer(i, part);
        Ok(PleBlock {
            gate: Linear::load(store, &name("inp_gate"), width, dim)?,
            proj: Linear::load(store, &name("proj"), dim, width)?,
            post_norm: RmsNorm::load(store, &name("post_norm"), dim, eps, false)?,
        })
    }
}

impl PleOp for PleBlock {
    fn forward(&self, x: &[f32], ple: &[f32], t: usize) -> Vec<f32> {
        let mut g = self.gate.forward(x, t);
        for (g, &e) in g.iter_mut().zip(ple) {
            *g = GateAct::GeluTanh.apply(*g) * e;
        }
        let mut y = self.proj.forward(&g, t);
        self.post_norm.forward_inplace(&mut y);
        y
    }
}

impl RowsOp for Experts {
    fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        Experts::forward(self, x, t)
    }
}
