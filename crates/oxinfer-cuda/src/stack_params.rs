//! The decoder stack's per-model values (every layer's norm gains and biases, the final norm)
//! packed into one device buffer, and what a pass needs to find them there again: their offsets
//! ([`StackParams`]) and the identity of what was packed ([`key`]; both kept in the `Gpu`
//! between passes).

use crate::stack::StackDesc;

/// Small f32 vectors of one call packed into one upload; each `push` returns the element
/// offset.
#[derive(Default)]
pub(crate) struct Pack(pub(crate) Vec<f32>);

impl Pack {
    pub(crate) fn push(&mut self, v: &[f32]) -> usize {
        let o = self.0.len();
        self.0.extend_from_slice(v);
        // Keep every vector 16-byte aligned.
        self.0.resize(self.0.len().next_multiple_of(4), 0.0);
        o
    }

    fn opt(&mut self, v: Option<&[f32]>) -> Option<usize> {
        v.map(|v| self.push(v))
    }
}

/// Offsets into the packed parameters of one layer.
#[derive(Clone, Copy)]
pub(crate) struct LayerParams {
    pub(crate) attn_norm: usize,
    pub(crate) ffn_norm: usize,
    pub(crate) post_attn_norm: Option<usize>,
    pub(crate) post_ffn_norm: Option<usize>,
    pub(crate) q_bias: Option<usize>,
    pub(crate) k_bias: Option<usize>,
    pub(crate) v_bias: Option<usize>,
    pub(crate) q_norm: Option<usize>,
    pub(crate) k_norm: Option<usize>,
}

/// Where a model's packed values lie (f32 offsets).
#[derive(Clone)]
pub(crate) struct StackParams {
    pub(crate) layers: Vec<LayerParams>,
    pub(crate) final_norm: usize,
    /// Bytes of the packed values.
    pub(crate) bytes: usize,
}

/// The identity of what [`pack`] packs for `d` ([`oxinfer::backend::constants_key`]):
/// `head_id` (the head matrix's upload id) and every gain and bias, in packing order.
pub(crate) fn key(d: &StackDesc, head_id: u64) -> Vec<usize> {
    let layers = d.layers.iter().flat_map(|l| {
        [
            Some(l.attn_norm),
            Some(l.ffn_norm),
            l.post_attn_norm,
            l.post_ffn_norm,
            l.q_bias,
            l.k_bias,
            l.v_bias,
            l.q_norm,
            l.k_norm,
        ]
    });
    let last = std::iter::once(Some(d.final_norm));
    oxinfer::backend::constants_key(head_id, layers.chain(last))
}

/// The norm gains and biases of every layer and the final norm of `d`, packed, and where each
/// landed.
pub(crate) fn pack(d: &StackDesc) -> (Pack, StackParams) {
    let mut pack = Pack::default();
    let layers = d
        .layers
        .iter()
        .map(|l| LayerParams {
            attn_norm: pack.push(l.attn_norm),
            ffn_norm: pack.push(l.ffn_norm),
            post_attn_norm: pack.opt(l.post_attn_norm),
            post_ffn_norm: pack.opt(l.post_ffn_norm),
            q_bias: pack.opt(l.q_bias),
            k_bias: pack.opt(l.k_bias),
            v_bias: pack.opt(l.v_bias),
            q_norm: pack.opt(l.q_norm),
            k_norm: pack.opt(l.k_norm),
        })
        .collect();
    let final_norm = pack.push(d.final_norm);
    let bytes = pack.0.len() * 4;
    let params = StackParams {
        layers,
        final_norm,
        bytes,
    };
    (pack, params)
}
