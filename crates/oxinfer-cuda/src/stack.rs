//! A model [`Plan`] lowered for the device ([`oxinfer::backend::plan_run`]): op by op to what
//! the kernels implement ([`lower`]; a plan with any other op is declined and runs on the CPU:
//! [`unsupported`] names the first such op). `stack_run` executes the lowered plan.

use oxinfer::backend::{device_weight, Backend, GateAct, Weight};
use oxinfer::plan::{AttnSpec, FfnBody, Layer, Mixer, Plan, ProjOp};

/// One decoder layer as the stack kernels run it: `x += post_attn_norm(o(attn(rope(
/// qk_norm(q/k/v(norm(x)) + bias)))))`, then `x += post_ffn_norm(down(act(gate(h)) · up(h)))`
/// with `h = ffn_norm(x)` (the optional parts only where the plan has them).
pub(crate) struct StackLayer<'a> {
    pub(crate) attn_norm: &'a [f32],
    pub(crate) q: Weight<'a>,
    pub(crate) k: Weight<'a>,
    pub(crate) v: Weight<'a>,
    pub(crate) o: Weight<'a>,
    pub(crate) q_bias: Option<&'a [f32]>,
    pub(crate) k_bias: Option<&'a [f32]>,
    pub(crate) v_bias: Option<&'a [f32]>,
    pub(crate) q_norm: Option<&'a [f32]>,
    pub(crate) k_norm: Option<&'a [f32]>,
    pub(crate) post_attn_norm: Option<&'a [f32]>,
    pub(crate) ffn_norm: &'a [f32],
    pub(crate) gate: Weight<'a>,
    pub(crate) up: Weight<'a>,
    pub(crate) down: Weight<'a>,
    pub(crate) post_ffn_norm: Option<&'a [f32]>,
    pub(crate) act: GateAct,
    pub(crate) spec: AttnSpec,
}

/// A plan lowered to the ops the stack kernels implement.
pub(crate) struct StackDesc<'a> {
    pub(crate) layers: Vec<StackLayer<'a>>,
    pub(crate) final_norm: &'a [f32],
    pub(crate) head: Weight<'a>,
    pub(crate) final_softcap: Option<f32>,
    pub(crate) dim: usize,
    pub(crate) eps: f32,
    pub(crate) n_heads: usize,
    pub(crate) n_kv_heads: usize,
    pub(crate) head_dim: usize,
    /// Per RoPE of the plan: rotated dimensions per head, interleaved pairs.
    pub(crate) ropes: Vec<(usize, bool)>,
}

impl StackDesc<'_> {
    /// Width of a key/value row.
    pub(crate) fn kv_row(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Width of a query row.
    pub(crate) fn q_row(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Number of layers.
    pub(crate) fn n_layers(&self) -> usize {
        self.layers.len()
    }
}

/// The first op of `plan` the stack kernels do not implement, if any (nothing is uploaded).
pub(crate) fn unsupported(plan: &Plan) -> Option<&'static str> {
    if plan.ple.is_some() {
        return Some("per-layer embeddings");
    }
    let first = plan.layers.first()?;
    let shape = |l: &Layer| match &l.mixer {
        Mixer::Attention { op, .. } => {
            let p = op.parts();
            Some((p.n_heads, p.n_kv_heads, p.head_dim))
        }
        Mixer::Recurrent(_) => None,
    };
    let geometry = shape(first);
    let eps = first.mixer_norm.eps();
    for l in &plan.layers {
        let Mixer::Attention { op, spec } = &l.mixer else {
            return Some("recurrent mixer (Gated DeltaNet)");
        };
        let p = op.parts();
        let why = if p.output_gate {
            Some("attention output gate")
        } else if p.v_norm {
            Some("value norm")
        } else if p.k.is_none() || p.kv_source.is_some() {
            Some("KV sharing")
        } else if p.v.is_none() {
            Some("values = keys")
        } else if spec.softcap.is_some() {
            Some("attention soft-cap")
        } else if spec.rope >= plan.ropes.len() {
            Some("missing RoPE table")
        } else if !matches!(l.ffn.body, FfnBody::Mlp(_)) {
            Some("routed experts")
        } else if l.ffn.side_experts.is_some() {
            Some("experts beside the MLP")
        } else if l.ple.is_some() {
            Some("per-layer embeddings")
        } else if l.scalar.is_some() {
            Some("layer scalar")
        } else if shape(l) != geometry {
            Some("per-layer head geometry")
        } else {
            None
        };
        if why.is_some() {
            return why;
        }
        let FfnBody::Mlp(m) = l.ffn.body else {
            return Some("routed experts");
        };
        let m = m.parts();
        if [p.o, m.gate, m.up, m.down]
            .iter()
            .any(|w| w.bias().is_some())
        {
            return Some("bias on the output or MLP projections");
        }
        let norms = [
            Some(l.mixer_norm),
            l.mixer_post_norm,
            Some(l.ffn.norm),
            l.ffn.post_norm,
        ];
        let qk = [p.q_norm, p.k_norm];
        if norms.iter().chain(&qk).flatten().any(|n| n.eps() != eps) {
            return Some("norms with different eps");
        }
    }
    if plan.final_norm.eps() != eps {
        return Some("norms with different eps");
    }
    None
}

/// `plan` lowered for the stack kernels, uploading weights on first use; `None` when it has an
/// op they do not implement ([`unsupported`]) or a weight stays on the CPU.
pub(crate) fn lower<'a>(b: &dyn Backend, plan: &Plan<'a>) -> Option<StackDesc<'a>> {
    if unsupported(plan).is_some() {
        return None;
    }
    let w = |p: &'a dyn ProjOp| device_weight(b, p);
    let mut layers = Vec::with_capacity(plan.layers.len());
    let mut geometry = (0, 0, 0);
    for l in &plan.layers {
        let (Mixer::Attention { op, spec }, FfnBody::Mlp(m)) = (&l.mixer, l.ffn.body) else {
            return None;
        };
        let (a, m) = (op.parts(), m.parts());
        geometry = (a.n_heads, a.n_kv_heads, a.head_dim);
        let (k, v) = (a.k?, a.v?);
        layers.push(StackLayer {
            attn_norm: l.mixer_norm.gain(),
            q: w(a.q)?,
            k: w(k)?,
            v: w(v)?,
            o: w(a.o)?,
            q_bias: a.q.bias(),
            k_bias: k.bias(),
            v_bias: v.bias(),
            q_norm: a.q_norm.map(|n| n.gain()),
            k_norm: a.k_norm.map(|n| n.gain()),
            post_attn_norm: l.mixer_post_norm.map(|n| n.gain()),
            ffn_norm: l.ffn.norm.gain(),
            gate: w(m.gate)?,
            up: w(m.up)?,
            down: w(m.down)?,
            post_ffn_norm: l.ffn.post_norm.map(|n| n.gain()),
            act: m.act,
            spec: *spec,
        });
    }
    let (n_heads, n_kv_heads, head_dim) = geometry;
    Some(StackDesc {
        layers,
        final_norm: plan.final_norm.gain(),
        head: w(plan.head)?,
        final_softcap: plan.final_softcap,
        dim: plan.dim,
        eps: plan.final_norm.eps(),
        n_heads,
        n_kv_heads,
        head_dim,
        ropes: plan
            .ropes
            .iter()
            .map(|r| (r.dim(), r.interleaved()))
            .collect(),
    })
}

/// Whether the kernels handle this geometry.
pub(crate) fn supported(d: &StackDesc) -> bool {
    d.head_dim.is_multiple_of(32)
        && d.head_dim <= 256
        && d.n_kv_heads > 0
        && d.n_heads.is_multiple_of(d.n_kv_heads)
        && d.dim <= crate::ops::RMS_MAX_DIM
        && d.ropes
            .iter()
            .all(|&(dim, _)| dim.is_multiple_of(2) && dim <= d.head_dim)
}

#[cfg(test)]
mod tests {
    use super::unsupported;

    /// The first op each tiny fixture's plan has that the stack kernels lack (`None`: the
    /// whole plan runs on the device). Needs no GPU.
    #[test]
    fn plans_are_declined_by_op() {
        let fixtures =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        for (name, want) in [
            ("llama-tiny-a", None),
            ("qwen2-tiny", None),
            ("qwen3-tiny", None),
            ("gemma3-tiny-b", None),
            ("gemma4-tiny-dense", Some("per-layer embeddings")),
            ("gemma4-tiny-moe", Some("value norm")),
            ("qwen35-tiny", Some("recurrent mixer (Gated DeltaNet)")),
        ] {
            let model = oxinfer::Model::load(fixtures.join(name)).expect("fixture");
            assert_eq!(unsupported(&model.lm().plan()), want, "{name}");
        }
    }
}
