//! Gemma 3 as one backend op ([`crate::backend::stack`]): post-attention and post-MLP norms
//! (`1 + w` already folded into the gains at load), QK-norms, tanh-GELU gated MLP, local RoPE on
//! the sliding layers and global RoPE on the others, optional final logit soft-cap. The input
//! rows arrive already scaled by √hidden (the embedding does it).

use super::{Gemma3, Layer};
use crate::arch::batch::{SeqBatch, SeqSpan};
use crate::arch::gemma::LayerKind;
use crate::backend::stack::{self, StackDesc, StackLayer};
use crate::backend::{self, Backend, GateAct};
use crate::error::Result;
use crate::nn::Linear;

impl Gemma3 {
    /// Runs the pass through the backend's decoder stack when one is installed, wants a pass of
    /// this many rows and takes every weight; `None` (nothing changed) otherwise, an error when
    /// the device failed mid-pass. `x` is the embedded input `[t, dim]`.
    pub(super) fn forward_on_device(
        &self,
        x: &[f32],
        batch: &mut [SeqBatch<'_>],
        spans: &[SeqSpan],
    ) -> Option<Result<Vec<Vec<f32>>>> {
        let b = backend::active()?;
        let d = self.cfg.hidden_size;
        if !b.wants(d, d, x.len() / d) {
            return None;
        }
        let desc = self.stack_desc(b)?;
        stack::run(
            b,
            &desc,
            x,
            batch,
            spans,
            &[&self.global_rope, &self.local_rope],
        )
    }

    /// The model as a [`StackDesc`] (RoPE table 0 global, 1 local), uploading weights on first
    /// use; `None` when a weight stays on the CPU or a layer has a part the stack does not model.
    fn stack_desc<'a>(&'a self, b: &dyn Backend) -> Option<StackDesc<'a>> {
        let w = |l: &'a Linear| l.device_weight(b);
        let layer = |l: &'a Layer| -> Option<StackLayer<'a>> {
            let (a, m) = (&l.attn, &l.mlp);
            let all = [&a.q, &a.k, &a.v, &a.o, &m.gate, &m.up, &m.down];
            if a.shape.output_gate || all.iter().any(|l| l.has_bias()) {
                return None;
            }
            Some(StackLayer {
                attn_norm: &l.attn_norm.weight,
                q: w(&a.q)?,
                k: w(&a.k)?,
                v: w(&a.v)?,
                o: w(&a.o)?,
                q_bias: None,
                k_bias: None,
                v_bias: None,
                q_norm: a.q_norm.as_ref().map(|n| &n.weight[..]),
                k_norm: a.k_norm.as_ref().map(|n| &n.weight[..]),
                post_attn_norm: Some(&l.post_attn_norm.weight),
                ffn_norm: &l.ffn_norm.weight,
                gate: w(&m.gate)?,
                up: w(&m.up)?,
                down: w(&m.down)?,
                post_ffn_norm: Some(&l.post_ffn_norm.weight),
                window: self.attn_params(l.kind).window,
                rope: match l.kind {
                    LayerKind::Full => 0,
                    LayerKind::Sliding => 1,
                },
            })
        };
        let layers = self.layers.iter().map(layer).collect::<Option<Vec<_>>>()?;
        let params = self.attn_params(LayerKind::Full);
        Some(StackDesc {
            layers,
            final_norm: &self.norm.weight,
            head: w(&self.head)?,
            final_softcap: self.params.final_softcap,
            dim: self.cfg.hidden_size,
            eps: self.norm.eps,
            n_heads: params.n_heads,
            n_kv_heads: params.n_kv_heads,
            head_dim: params.head_dim,
            scale: params.scale,
            act: GateAct::GeluTanh,
            rope_dim: self.global_rope.dim(),
            rope_interleaved: self.global_rope.interleaved(),
        })
    }
}
