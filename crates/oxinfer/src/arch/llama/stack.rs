//! The Llama decoder as one backend op ([`crate::backend::stack`]): the whole pass runs on the
//! device when the installed backend takes it.

use super::{Block, Llama};
use crate::arch::batch::{SeqBatch, SeqSpan};
use crate::backend::stack::{self, StackDesc, StackLayer};
use crate::backend::{self, Backend, GateAct};
use crate::nn::{Activation, Linear};

impl Llama {
    /// Runs the pass through the backend's decoder stack when one is installed, wants a pass of
    /// this many rows and takes every weight; `None` (nothing changed) otherwise. `x` is the
    /// embedded input `[t, dim]`; an error when the device failed mid-pass.
    pub(super) fn forward_on_device(
        &self,
        x: &[f32],
        batch: &mut [SeqBatch<'_>],
        spans: &[SeqSpan],
    ) -> Option<crate::error::Result<Vec<Vec<f32>>>> {
        let b = backend::active()?;
        let d = self.cfg.hidden_size;
        if !b.wants(d, d, x.len() / d) {
            return None;
        }
        let desc = self.stack_desc(b)?;
        stack::run(b, &desc, x, batch, spans, &[&self.rope])
    }

    /// The model as a [`StackDesc`], uploading weights on first use; `None` when a weight stays
    /// on the CPU or a layer has a part the stack does not model.
    fn stack_desc<'a>(&'a self, b: &dyn Backend) -> Option<StackDesc<'a>> {
        let w = |l: &'a Linear| l.device_weight(b);
        let layer = |(blk, &window): (&'a Block, &Option<usize>)| -> Option<StackLayer<'a>> {
            let (a, m) = (&blk.attn, &blk.mlp);
            let plain = [&a.o, &m.gate, &m.up, &m.down];
            if a.shape.output_gate || plain.iter().any(|l| l.has_bias()) {
                return None;
            }
            Some(StackLayer {
                attn_norm: &blk.attn_norm.weight,
                q: w(&a.q)?,
                k: w(&a.k)?,
                v: w(&a.v)?,
                o: w(&a.o)?,
                q_bias: a.q.bias(),
                k_bias: a.k.bias(),
                v_bias: a.v.bias(),
                q_norm: a.q_norm.as_ref().map(|n| &n.weight[..]),
                k_norm: a.k_norm.as_ref().map(|n| &n.weight[..]),
                post_attn_norm: None,
                ffn_norm: &blk.ffn_norm.weight,
                gate: w(&m.gate)?,
                up: w(&m.up)?,
                down: w(&m.down)?,
                post_ffn_norm: None,
                window,
                rope: 0,
            })
        };
        let layers = self
            .blocks
            .iter()
            .zip(&self.windows)
            .map(layer)
            .collect::<Option<Vec<_>>>()?;
        let act = match self.blocks.first()?.mlp.act {
            Activation::Silu => GateAct::Silu,
            Activation::GeluTanh => GateAct::GeluTanh,
        };
        Some(StackDesc {
            layers,
            final_norm: &self.norm.weight,
            head: w(&self.head)?,
            final_softcap: None,
            dim: self.cfg.hidden_size,
            eps: self.norm.eps,
            n_heads: self.cfg.n_heads,
            n_kv_heads: self.cfg.n_kv_heads,
            head_dim: self.cfg.head_dim,
            scale: self.attn_params(0).scale,
            act,
            rope_dim: self.rope.dim(),
            rope_interleaved: self.rope.interleaved(),
        })
    }
}
