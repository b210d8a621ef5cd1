//! The attention half of a decoder block, shared by the families that compose it: q/k/v
//! projections (biases loaded when present), optional per-head QK RMSNorm before RoPE (Qwen3,
//! Qwen 3.5), optional sigmoid output gate carried by the q projection (Qwen 3.5), RoPE, cached
//! GQA attention per sequence (or, for encoders run bidirectionally, every new row of a sequence
//! with every other), output projection.

use super::full_attention::attention_full_seqs;
use super::{attention_cached, AttnShape, Linear, RmsNorm};
use crate::error::LoadError;
use crate::loader::TensorStore;
use crate::plan::{AttentionOp, AttentionParts, AttnSpec, RopeOp, SeqRows};

/// New tokens of a sequence up to which its attention runs as one task beside the other
/// sequences' (decode steps of a batch) instead of being split over the threads by itself.
const SMALL_SEQ: usize = 4;

/// Shape and variant of an attention block.
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    pub dim: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub norm_eps: f32,
    /// QK norms store `w` and compute with `1 + w` (zero-centred, Qwen 3.5 in transformers'
    /// spelling).
    pub qk_norm_unit_offset: bool,
    /// The q projection yields, per head, `head_dim` query values then `head_dim` gate values;
    /// the attention output is multiplied by `sigmoid(gate)` before the output projection.
    pub output_gate: bool,
}

/// Projections and norms of one attention block.
pub struct SelfAttention {
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    /// Per-head RMSNorm of queries and keys before RoPE, when the checkpoint has them.
    pub q_norm: Option<RmsNorm>,
    pub k_norm: Option<RmsNorm>,
    pub shape: AttentionShape,
}

impl SelfAttention {
    /// Loads the block of one layer; `name(part)` maps a GGUF part name (`attn_q`, `attn_q_norm`,
    /// ...) to the tensor's name in `store`. QK norms are loaded when present.
    pub fn load(
        store: &dyn TensorStore,
        name: impl Fn(&str) -> String,
        s: AttentionShape,
    ) -> Result<Self, LoadError> {
        let hd = s.head_dim;
        let q_out = s.n_heads * hd * if s.output_gate { 2 } else { 1 };
        let norm = |part: &str| -> Result<Option<RmsNorm>, LoadError> {
            let n = name(part);
            match store.get(&n) {
                None => Ok(None),
                Some(_) => {
                    RmsNorm::load(store, &n, hd, s.norm_eps, s.qk_norm_unit_offset).map(Some)
                }
            }
        };
        Ok(SelfAttention {
            q: Linear::load(store, &name("attn_q"), q_out, s.dim)?,
            k: Linear::load(store, &name("attn_k"), s.n_kv_heads * hd, s.dim)?,
            v: Linear::load(store, &name("attn_v"), s.n_kv_heads * hd, s.dim)?,
            o: Linear::load(store, &name("attn_output"), s.dim, s.n_heads * hd)?,
            q_norm: norm("attn_q_norm")?,
            k_norm: norm("attn_k_norm")?,
            shape: s,
        })
    }

    /// Queries (QK-normed; `[t, n_heads · head_dim]`), keys (QK-normed), values and the output
    /// gate (when the block has one) of the normed input `h` (`[t, dim]`), before RoPE.
    fn project(&self, h: &[f32], t: usize) -> [Option<Vec<f32>>; 4] {
        let s = &self.shape;
        let hd = s.head_dim;
        let q_row = s.n_heads * hd;
        let mut qkv = Linear::forward_shared(&[&self.q, &self.k, &self.v], h, t);
        let v = qkv.pop().unwrap_or_default();
        let mut k = qkv.pop().unwrap_or_default();
        let q_all = qkv.pop().unwrap_or_default();
        let (mut q, gate) = if s.output_gate {
            // Per head: [query (hd) | gate (hd)].
            let mut q = vec![0f32; t * q_row];
            let mut g = vec![0f32; t * q_row];
            for (i, row) in q_all.chunks_exact(2 * q_row).enumerate() {
                for (hh, pair) in row.chunks_exact(2 * hd).enumerate() {
                    let at = i * q_row + hh * hd;
                    q[at..at + hd].copy_from_slice(&pair[..hd]);
                    g[at..at + hd].copy_from_slice(&pair[hd..]);
                }
            }
            (q, Some(g))
        } else {
            (q_all, None)
        };
        if let Some(n) = &self.q_norm {
            n.forward_inplace(&mut q);
        }
        if let Some(n) = &self.k_norm {
            n.forward_inplace(&mut k);
        }
        [Some(q), Some(k), Some(v), gate]
    }

    /// The output projection of the mixed values `a` (`[t, n_heads · head_dim]`), gated by
    /// `sigmoid(gate)` first when the block has an output gate.
    fn output(&self, mut a: Vec<f32>, gate: Option<Vec<f32>>, t: usize) -> Vec<f32> {
        if let Some(g) = gate {
            for (a, g) in a.iter_mut().zip(&g) {
                *a *= 1.0 / (1.0 + (-g).exp());
            }
        }
        self.o.forward(&a, t)
    }

    /// `h` is the normed input `[t, dim]` of every sequence stacked; appends each sequence's
    /// keys and values to layer `layer` of its cache and returns the block output `[t, dim]`
    /// (before the residual add).
    pub fn forward(
        &self,
        h: &[f32],
        t: usize,
        layer: usize,
        seqs: &mut [SeqRows<'_>],
        rope: &dyn RopeOp,
        params: &AttnShape,
    ) -> Vec<f32> {
        let s = &self.shape;
        let (q_row, kv_row) = (s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim);
        let ([q, k, v], gate) = self.rotated_qkv(h, t, seqs, rope);
        let mut a = vec![0f32; t * q_row];
        let mut pos0s = Vec::with_capacity(seqs.len());
        for sq in seqs.iter_mut() {
            let rows = sq.row * kv_row..(sq.row + sq.len) * kv_row;
            pos0s.push(sq.cache.len());
            sq.cache
                .store(layer, &k[rows.clone()], &v[rows], s.head_dim);
        }
        let seqs: &[SeqRows<'_>] = seqs;
        let attend = |i: usize| {
            let sq = &seqs[i];
            let q = &q[sq.row * q_row..(sq.row + sq.len) * q_row];
            let lc = &sq.cache.layers[layer];
            attention_cached(
                q,
                lc.k.view(),
                lc.v.view(),
                lc.ring,
                sq.len,
                pos0s[i],
                params,
            )
        };
        // Each sequence's output rows, in order.
        let mut outs: Vec<(usize, &mut [f32])> = Vec::with_capacity(seqs.len());
        let mut rest = a.as_mut_slice();
        for (i, sq) in seqs.iter().enumerate() {
            let (mine, tail) = rest.split_at_mut(sq.len * q_row);
            outs.push((i, mine));
            rest = tail;
        }
        // Sequences of a few new tokens (decoding) are too small to split over the threads one
        // by one: they run side by side, one per task. Longer ones (prefill) split themselves.
        // (An installed device backend keeps the calls on this thread.)
        let side_by_side = seqs.len() > 1 && crate::backend::active().is_none();
        let (mut small, big): (Vec<_>, Vec<_>) = outs
            .into_iter()
            .partition(|(i, _)| side_by_side && seqs[*i].len <= SMALL_SEQ);
        for (i, out) in big {
            out.copy_from_slice(&attend(i));
        }
        oxinfer_kernels::pool::for_each_mut(&mut small, |_, (i, out)| {
            out.copy_from_slice(&attend(*i));
        });
        self.output(a, gate, t)
    }

    /// As [`forward`](Self::forward) but without the causal mask: each sequence's new rows
    /// (positions from its cache's length) attend to each other, all of them (`params.window`:
    /// those at distance `< window`, [`attention_full_seqs`]); the caches are left as they are.
    pub fn forward_bidirectional(
        &self,
        h: &[f32],
        t: usize,
        seqs: &[SeqRows<'_>],
        rope: &dyn RopeOp,
        params: &AttnShape,
    ) -> Vec<f32> {
        let ([q, k, v], gate) = self.rotated_qkv(h, t, seqs, rope);
        // The sequences' rows are stacked in order (plan::batch), as the batched attention
        // takes them.
        debug_assert!(seqs
            .iter()
            .scan(0, |r, s| {
                let ok = s.row == *r;
                *r += s.len;
                Some(ok)
            })
            .all(|ok| ok));
        let lens: Vec<(usize, usize)> = seqs.iter().map(|s| (s.len, s.len)).collect();
        let a = attention_full_seqs(&q, &k, &v, &lens, params);
        self.output(a, gate, t)
    }

    /// The projections of `h` (`[t, dim]`, [`project`](Self::project); absent ones empty) with
    /// each sequence's new query and key rows rotated to their positions (from its cache's
    /// length, or its media's rotary positions): `([q, k, v], output gate)`.
    fn rotated_qkv(
        &self,
        h: &[f32],
        t: usize,
        seqs: &[SeqRows<'_>],
        rope: &dyn RopeOp,
    ) -> ([Vec<f32>; 3], Option<Vec<f32>>) {
        let s = &self.shape;
        let hd = s.head_dim;
        let (q_row, kv_row) = (s.n_heads * hd, s.n_kv_heads * hd);
        let [q, k, v, gate] = self.project(h, t);
        let (mut q, mut k, v) = (
            q.unwrap_or_default(),
            k.unwrap_or_default(),
            v.unwrap_or_default(),
        );
        for sq in seqs {
            let (r0, n) = (sq.row, sq.len);
            let q = &mut q[r0 * q_row..(r0 + n) * q_row];
            let k = &mut k[r0 * kv_row..(r0 + n) * kv_row];
            rope.apply_rows(q, n, s.n_heads, hd, sq.positions());
            rope.apply_rows(k, n, s.n_kv_heads, hd, sq.positions());
        }
        ([q, k, v], gate)
    }
}

impl AttentionOp for SelfAttention {
    fn parts(&self) -> AttentionParts<'_> {
        let s = &self.shape;
        AttentionParts {
            q: &self.q,
            k: Some(&self.k),
            v: Some(&self.v),
            o: &self.o,
            q_norm: self.q_norm.as_ref().map(|n| n as _),
            k_norm: self.k_norm.as_ref().map(|n| n as _),
            v_norm: false,
            output_gate: s.output_gate,
            n_heads: s.n_heads,
            n_kv_heads: s.n_kv_heads,
            head_dim: s.head_dim,
            kv_source: None,
        }
    }

    fn forward(
        &self,
        h: &[f32],
        t: usize,
        layer: usize,
        seqs: &mut [SeqRows<'_>],
        _skipped: &[usize],
        rope: &dyn RopeOp,
        spec: &AttnSpec,
    ) -> Vec<f32> {
        let s = &self.shape;
        let params = AttnShape {
            n_heads: s.n_heads,
            n_kv_heads: s.n_kv_heads,
            head_dim: s.head_dim,
            scale: spec.scale,
            window: spec.window,
            softcap: spec.softcap,
        };
        SelfAttention::forward(self, h, t, layer, seqs, rope, &params)
    }

    fn forward_bidirectional(
        &self,
        h: &[f32],
        t: usize,
        seqs: &[SeqRows<'_>],
        rope: &dyn RopeOp,
        spec: &AttnSpec,
    ) -> Option<Vec<f32>> {
        let s = &self.shape;
        let params = AttnShape {
            n_heads: s.n_heads,
            n_kv_heads: s.n_kv_heads,
            head_dim: s.head_dim,
            scale: spec.scale,
            window: spec.window,
            softcap: spec.softcap,
        };
        Some(SelfAttention::forward_bidirectional(
            self, h, t, seqs, rope, &params,
        ))
    }
}
