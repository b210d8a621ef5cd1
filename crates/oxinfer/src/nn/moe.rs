//! Sparse mixture of experts (Qwen 3.5 MoE, Gemma 4): a softmax router picks the top-k experts
//! per token (weights renormalised to sum to 1, optionally times a per-expert scale), each a
//! gated MLP (SwiGLU or GeGLU); plus, optionally, a shared expert scaled by
//! `sigmoid(shared_gate · x)`.

use super::{GatedMlp, Linear};
use crate::error::LoadError;
use crate::loader::{Span, TensorStore, TensorView};
use crate::plan::RowsOp;
use oxinfer_kernels::act::GateAct;

/// A routed-experts block with an optional gated shared expert.
pub struct SparseMoe {
    router: Linear,
    experts: Vec<GatedMlp>,
    top_k: usize,
    shared: Option<(GatedMlp, Linear)>,
    /// Per-expert factors on the routing weights (Gemma 4's `per_expert_scale`).
    expert_scales: Option<Vec<f32>>,
}

/// Rows `first .. first + rows` of expert `e` of a stacked `[n_experts, r, cols]` tensor, as a
/// `[rows, cols]` matrix borrowed from the same file (and, for a split format, the same rows of
/// its scales).
pub fn expert_rows(
    t: &TensorView,
    e: usize,
    first: usize,
    rows: usize,
) -> Result<TensorView, LoadError> {
    let (n, r, cols) = match t.shape[..] {
        [n, r, c] => (n, r, c),
        _ => {
            return Err(LoadError::tensor(
                t.path(),
                &t.name,
                format!("expected [experts, rows, cols], shape is {:?}", t.shape),
            ))
        }
    };
    let row_bytes = t
        .format
        .row_bytes(cols)
        .ok_or_else(|| LoadError::tensor(t.path(), &t.name, "row length is not whole blocks"))?;
    // A split format keeps each row's scales in a second buffer, rows back to back like the
    // quants: the expert's rows are one contiguous range of both.
    let scale_bytes = t.format.row_scale_bytes(cols).unwrap_or(0);
    let scales_ok = match &t.scales {
        Some(s) => t.format.is_split() && s.size == scale_bytes * r * n,
        None => !t.format.is_split(),
    };
    if e >= n || first + rows > r || row_bytes * r * n != t.size || !scales_ok {
        return Err(LoadError::tensor(
            t.path(),
            &t.name,
            format!("expert {e} rows {first}+{rows} outside shape {:?}", t.shape),
        ));
    }
    let first_row = e * r + first;
    Ok(TensorView {
        name: format!("{}[{e}]", t.name),
        format: t.format,
        shape: vec![rows, cols],
        file: t.file.clone(),
        offset: t.offset + first_row * row_bytes,
        size: rows * row_bytes,
        scales: t.scales.as_ref().map(|s| Span {
            file: s.file.clone(),
            offset: s.offset + first_row * scale_bytes,
            size: rows * scale_bytes,
        }),
    })
}

impl SparseMoe {
    /// `experts[e]` = (gate, up, down) matrices; `shared` = (shared expert, its `[1, dim]` gate).
    pub fn new(
        router: Linear,
        experts: Vec<GatedMlp>,
        top_k: usize,
        shared: Option<(GatedMlp, Linear)>,
    ) -> Result<Self, LoadError> {
        if top_k == 0 || top_k > experts.len() || router.n_out != experts.len() {
            return Err(LoadError::tensor(
                router.weight().path(),
                &router.weight().name,
                format!(
                    "router of {} outputs for {} experts, top-k {top_k}",
                    router.n_out,
                    experts.len()
                ),
            ));
        }
        Ok(SparseMoe {
            router,
            experts,
            top_k,
            shared,
            expert_scales: None,
        })
    }

    /// Multiplies each selected expert's (renormalised) routing weight by `scales[e]`.
    pub fn with_expert_scales(mut self, scales: Vec<f32>) -> Result<Self, LoadError> {
        if scales.len() != self.experts.len() {
            return Err(LoadError::tensor(
                self.router.weight().path(),
                &self.router.weight().name,
                format!(
                    "{} per-expert scales for {} experts",
                    scales.len(),
                    self.experts.len()
                ),
            ));
        }
        self.expert_scales = Some(scales);
        Ok(self)
    }

    /// Number of routed experts.
    pub fn n_experts(&self) -> usize {
        self.experts.len()
    }

    /// Loads stacked experts: `gate_up` `[E, 2·ffn, dim]` (gate rows then up rows) or separate
    /// `gate`/`up` `[E, ffn, dim]`, and `down` `[E, dim, ffn]`.
    pub fn experts_from_stacked(
        store: &dyn TensorStore,
        gate_up: Option<&str>,
        gate_and_up: [&str; 2],
        down: &str,
        n_experts: usize,
        ffn: usize,
    ) -> Result<Vec<GatedMlp>, LoadError> {
        Self::experts_from_stacked_act(
            store,
            gate_up,
            gate_and_up,
            down,
            n_experts,
            ffn,
            GateAct::Silu,
        )
    }

    /// [`SparseMoe::experts_from_stacked`] with the experts' activation `act`.
    pub fn experts_from_stacked_act(
        store: &dyn TensorStore,
        gate_up: Option<&str>,
        gate_and_up: [&str; 2],
        down: &str,
        n_experts: usize,
        ffn: usize,
        act: GateAct,
    ) -> Result<Vec<GatedMlp>, LoadError> {
        let down = store.require(down)?;
        let (g, u, fused) = match gate_up.and_then(|n| store.get(n)) {
            Some(gu) => {
                let gu = gu?;
                (gu.clone(), gu, true)
            }
            None => (
                store.require(gate_and_up[0])?,
                store.require(gate_and_up[1])?,
                false,
            ),
        };
        (0..n_experts)
            .map(|e| {
                let up_first = if fused { ffn } else { 0 };
                Ok(GatedMlp {
                    gate: Linear::from_view(expert_rows(&g, e, 0, ffn)?, None)?,
                    up: Linear::from_view(expert_rows(&u, e, up_first, ffn)?, None)?,
                    down: Linear::from_view(expert_rows(&down, e, 0, down.shape[1])?, None)?,
                    act,
                })
            })
            .collect()
    }

    /// `x` is `[t, dim]`; returns `[t, dim]`.
    pub fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        self.forward_routed(x, x, t)
    }

    /// The router reads `router_in` and the experts (and shared expert) read `x`, both
    /// `[t, dim]`; returns `[t, dim]`.
    pub fn forward_routed(&self, router_in: &[f32], x: &[f32], t: usize) -> Vec<f32> {
        let dim = self.router.n_in;
        let n = self.experts.len();
        let logits = self.router.forward(router_in, t);
        // Per expert: (token, weight) pairs.
        let mut routed: Vec<Vec<(usize, f32)>> = vec![Vec::new(); n];
        for (ti, l) in logits.chunks_exact(n).enumerate() {
            let max = l.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let p: Vec<f32> = l.iter().map(|v| (v - max).exp()).collect();
            let sum: f32 = p.iter().sum();
            let mut idx: Vec<usize> = (0..n).collect();
            idx.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
            let top = &idx[..self.top_k];
            let tot: f32 = top.iter().map(|&e| p[e] / sum).sum();
            for &e in top {
                let s = self.expert_scales.as_ref().map_or(1.0, |s| s[e]);
                routed[e].push((ti, p[e] / sum / tot * s));
            }
        }
        let mut out = match &self.shared {
            Some((mlp, gate)) => {
                let mut s = mlp.forward(x, t);
                let g = gate.forward(x, t);
                for (row, &gv) in s.chunks_exact_mut(dim).zip(&g) {
                    let f = 1.0 / (1.0 + (-gv).exp());
                    row.iter_mut().for_each(|v| *v *= f);
                }
                s
            }
            None => vec![0f32; t * dim],
        };
        for (e, toks) in routed.iter().enumerate() {
            if toks.is_empty() {
                continue;
            }
            let mut xs = Vec::with_capacity(toks.len() * dim);
            for &(ti, _) in toks {
                xs.extend_from_slice(&x[ti * dim..(ti + 1) * dim]);
            }
            let y = self.experts[e].forward(&xs, toks.len());
            for (&(ti, w), yr) in toks.iter().zip(y.chunks_exact(dim)) {
                for (o, &v) in out[ti * dim..(ti + 1) * dim].iter_mut().zip(yr) {
                    *o += w * v;
                }
            }
        }
        out
    }
}

impl RowsOp for SparseMoe {
    fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        SparseMoe::forward(self, x, t)
    }
}
