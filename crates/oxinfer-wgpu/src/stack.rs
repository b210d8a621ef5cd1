//! A model [`Plan`] as the kernels run it ([`oxinfer::backend::plan_run`]): the plan's own
//! layer description, read through its op traits, with every weight resolved to its
//! [`DeviceMatrix`]. A plan with an op the kernels lack is declined ([`unsupported`] names the
//! first) and runs on the CPU; `stack_run` executes the rest.

use crate::kernels::MAX_HEAD_DIM;
use crate::matrix::DeviceMatrix;
use oxinfer::backend::{device_weight, Backend};
use oxinfer::plan::{
    AttentionParts, AttnSpec, FfnBody, Layer, Mixer, MlpParts, NormOp, Plan, ProjOp,
};

/// One decoder layer: its plan entry, the attention and MLP parts, and the device weights
/// `[q, k, v, o, gate, up, down]`.
pub(crate) struct StackLayer<'a> {
    pub(crate) layer: &'a Layer<'a>,
    pub(crate) attn: AttentionParts<'a>,
    pub(crate) spec: AttnSpec,
    pub(crate) mlp: MlpParts<'a>,
    pub(crate) mats: [&'a DeviceMatrix; 7],
}

impl<'a> StackLayer<'a> {
    /// The layer's norms with a gain, in the order the constants pack them: mixer norm, FFN
    /// norm, then the optional post-mixer, post-FFN, q and k norms.
    pub(crate) fn norms(&self) -> [Option<&'a dyn NormOp>; 6] {
        let l = self.layer;
        [
            Some(l.mixer_norm),
            Some(l.ffn.norm),
            l.mixer_post_norm,
            l.ffn.post_norm,
            self.attn.q_norm,
            self.attn.k_norm,
        ]
    }

    /// Biases of the q, k and v projections.
    pub(crate) fn biases(&self) -> [Option<&'a [f32]>; 3] {
        [
            self.attn.q.bias(),
            self.attn.k.and_then(|k| k.bias()),
            self.attn.v.and_then(|v| v.bias()),
        ]
    }
}

/// A plan with every weight on the device.
pub(crate) struct Stack<'a> {
    pub(crate) plan: &'a Plan<'a>,
    pub(crate) layers: Vec<StackLayer<'a>>,
    pub(crate) head: &'a DeviceMatrix,
    pub(crate) n_heads: usize,
    pub(crate) n_kv_heads: usize,
    pub(crate) head_dim: usize,
}

impl Stack<'_> {
    /// Width of a key/value row.
    pub(crate) fn kv_row(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Width of a query row.
    pub(crate) fn q_row(&self) -> usize {
        self.n_heads * self.head_dim
    }
}

/// Why a layer cannot run on the kernels, if it cannot.
fn layer_unsupported(l: &Layer, n_ropes: usize) -> Option<&'static str> {
    let Mixer::Attention { op, spec } = &l.mixer else {
        return Some("recurrent mixer (Gated DeltaNet)");
    };
    let p = op.parts();
    let FfnBody::Mlp(m) = l.ffn.body else {
        return Some("routed experts");
    };
    let m = m.parts();
    let why = [
        (p.output_gate, "attention output gate"),
        (p.v_norm, "value norm"),
        (p.k.is_none() || p.kv_source.is_some(), "KV sharing"),
        (p.v.is_none(), "values = keys"),
        (spec.rope >= n_ropes, "missing RoPE table"),
        (l.ffn.side_experts.is_some(), "experts beside the MLP"),
        (l.ple.is_some(), "per-layer embeddings"),
        (l.scalar.is_some(), "layer scalar"),
        (
            [p.o, m.gate, m.up, m.down]
                .iter()
                .any(|w| w.bias().is_some()),
            "bias on the output or MLP projections",
        ),
        (
            p.head_dim > MAX_HEAD_DIM
                || p.n_kv_heads == 0
                || !p.n_heads.is_multiple_of(p.n_kv_heads),
            "attention head geometry",
        ),
    ];
    why.into_iter().find_map(|(bad, what)| bad.then_some(what))
}

/// The first op of `plan` the wgpu kernels do not implement, if any (`None`: the whole plan
/// runs on the device); nothing is uploaded.
pub fn unsupported_op(plan: &Plan) -> Option<&'static str> {
    if plan.ple.is_some() {
        return Some("per-layer embeddings");
    }
    let geometry = |l: &Layer| match &l.mixer {
        Mixer::Attention { op, .. } => {
            let p = op.parts();
            Some((p.n_heads, p.n_kv_heads, p.head_dim))
        }
        Mixer::Recurrent(_) => None,
    };
    let first = geometry(plan.layers.first()?);
    for l in &plan.layers {
        if let Some(why) = layer_unsupported(l, plan.ropes.len()) {
            return Some(why);
        }
        if geometry(l) != first {
            return Some("per-layer head geometry");
        }
    }
    let rope_ok = plan.ropes.iter().all(|r| {
        let d = r.dim();
        d.is_multiple_of(2) && first.is_some_and(|(_, _, hd)| d <= hd)
    });
    (!rope_ok).then_some("RoPE wider than a head")
}

/// `plan` with its weights on `b`'s device (uploaded on first use); `None` when it has an op
/// the kernels lack or a weight the device declined.
pub(crate) fn lower<'a>(b: &dyn Backend, plan: &'a Plan<'a>) -> Option<Stack<'a>> {
    if unsupported_op(plan).is_some() {
        return None;
    }
    let mat = |p: &'a dyn ProjOp| -> Option<&'a DeviceMatrix> {
        device_weight(b, p)?.dev.downcast_ref::<DeviceMatrix>()
    };
    let mut layers = Vec::with_capacity(plan.layers.len());
    for layer in &plan.layers {
        let (Mixer::Attention { op, spec }, FfnBody::Mlp(m)) = (&layer.mixer, layer.ffn.body)
        else {
            return None;
        };
        let (attn, mlp) = (op.parts(), m.parts());
        let mats = [
            mat(attn.q)?,
            mat(attn.k?)?,
            mat(attn.v?)?,
            mat(attn.o)?,
            mat(mlp.gate)?,
            mat(mlp.up)?,
            mat(mlp.down)?,
        ];
        layers.push(StackLayer {
            layer,
            attn,
            spec: *spec,
            mlp,
            mats,
        });
    }
    let a = &layers.first()?.attn;
    let (n_heads, n_kv_heads, head_dim) = (a.n_heads, a.n_kv_heads, a.head_dim);
    Some(Stack {
        plan,
        head: mat(plan.head)?,
        layers,
        n_heads,
        n_kv_heads,
        head_dim,
    })
}

#[cfg(test)]
mod tests {
    use super::unsupported_op;

    /// The first op each tiny fixture's plan has that the kernels lack (`None`: the whole plan
    /// runs on the device). Needs no GPU.
    #[test]
    fn plans_are_declined_by_op() {
        let fixtures =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        for (name, want) in [
            ("llama-tiny-a", None),
            ("qwen2-tiny", None),
            ("qwen2-tiny-swa", None),
            ("qwen3-tiny", None),
            ("gemma3-tiny-a", None),
            ("gemma3-tiny-b", None),
            ("gemma4-tiny-dense", Some("per-layer embeddings")),
            ("gemma4-tiny-moe", Some("value norm")),
            ("qwen35-tiny", Some("recurrent mixer (Gated DeltaNet)")),
        ] {
            let model = oxinfer::Model::load(fixtures.join(name)).expect("fixture");
            assert_eq!(unsupported_op(&model.lm().plan()), want, "{name}");
        }
    }
}
