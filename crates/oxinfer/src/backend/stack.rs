//! The decoder stack op: a whole pre-norm decoder (Llama family) run by a backend with the
//! hidden state and the keys/values resident on the device, and its CPU twin.
//!
//! Departure from `shared/seed/backend-spec.rs.txt`, which offloads single ops (matmul,
//! attention, conv2d): with one op at a time the `[t, dim]` activations cross the bus for every
//! op and the norms, RoPE and residual adds run on the host; on an H200 that held a 7B-geometry
//! prefill at ~950 tok/s while the matmuls alone take a few ms. So a backend may take the whole
//! stack in one call ([`super::Backend::decoder_stack`]): the embedding rows go up, the logits of
//! the rows that need them and every layer's new keys and values come down.
//!
//! KV consistency: the host [`KvCache`] stays the one source of truth. The call receives each
//! sequence's cached keys/values (uploaded when there are any) and returns the new rows, which
//! [`run`] appends to the host cache exactly as the CPU path would; decode (one token per step)
//! then runs wherever it runs (on the CPU by default) over the same cache. Nothing is kept on
//! the device between calls except the weights.
//!
//! Checking: the CPU twin [`stack_cpu`] computes the same outputs with the CPU kernels (the
//! dispatching int8 matmul, the reference attention), so `OXINFER_GPU_CHECK=1` compares the
//! logits and each layer's new keys and values (a per-layer comparison: layer `l`'s keys are a
//! function of the hidden state entering layer `l`).

use super::{AttentionGeom, Backend, GateAct, Weight};
use crate::arch::batch::{self, SeqBatch, SeqSpan};
use crate::nn::{attention::attention_cpu, norm::rms_norm_row, Rope};

/// One decoder layer: `x += o(attn(rope(qk_norm(q/k/v(norm(x)))))`, then
/// `x += down(act(gate(h)) · up(h))` with `h = ffn_norm(x)`.
pub struct StackLayer<'a> {
    /// RMSNorm gain before attention, `[dim]`.
    pub attn_norm: &'a [f32],
    pub q: Weight<'a>,
    pub k: Weight<'a>,
    pub v: Weight<'a>,
    pub o: Weight<'a>,
    /// Projection biases (Qwen2), `[n_out]` each.
    pub q_bias: Option<&'a [f32]>,
    pub k_bias: Option<&'a [f32]>,
    pub v_bias: Option<&'a [f32]>,
    /// Per-head RMSNorm gains of queries and keys before RoPE (Qwen3), `[head_dim]` each.
    pub q_norm: Option<&'a [f32]>,
    pub k_norm: Option<&'a [f32]>,
    /// RMSNorm gain before the MLP, `[dim]`.
    pub ffn_norm: &'a [f32],
    pub gate: Weight<'a>,
    pub up: Weight<'a>,
    pub down: Weight<'a>,
    /// Sliding attention window of this layer.
    pub window: Option<usize>,
}

/// The whole decoder as a backend sees it.
pub struct StackDesc<'a> {
    pub layers: Vec<StackLayer<'a>>,
    /// Final RMSNorm gain, `[dim]`.
    pub final_norm: &'a [f32],
    /// Output head `[vocab, dim]`.
    pub head: Weight<'a>,
    pub dim: usize,
    pub eps: f32,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Factor on q·k.
    pub scale: f32,
    pub act: GateAct,
    /// Rotated dimensions per head (the first `rope_dim` of each head).
    pub rope_dim: usize,
    /// Interleaved pairs `(2j, 2j+1)` (else `(j, j + rope_dim/2)`).
    pub rope_interleaved: bool,
}

impl StackDesc<'_> {
    /// Width of a key/value row.
    pub fn kv_row(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Width of a query row.
    pub fn q_row(&self) -> usize {
        self.n_heads * self.head_dim
    }
}

/// One sequence of a stack call.
pub struct StackSeq<'a> {
    /// First row in the stacked input.
    pub row: usize,
    /// New tokens.
    pub len: usize,
    /// Per layer, the cached keys and values before this call (`[n, kv_row]` each; `n` may
    /// be 0, and windowed layers may hold only the recent positions).
    pub past: Vec<(&'a [f32], &'a [f32])>,
}

/// Inputs of one stack call.
pub struct StackInput<'a> {
    /// Embedded tokens `[t, dim]`, every sequence stacked.
    pub x: &'a [f32],
    pub t: usize,
    /// RoPE tables of each row, `[t, rope_dim / 2]` each.
    pub rope_cos: &'a [f32],
    pub rope_sin: &'a [f32],
    pub seqs: &'a [StackSeq<'a>],
    /// Rows (into the stacked input) whose logits are wanted, in output order.
    pub logit_rows: &'a [usize],
}

/// Outputs of one stack call, sized by [`StackOutput::new`].
pub struct StackOutput {
    /// Per layer, the new rotated keys `[t, kv_row]` (every sequence stacked).
    pub k: Vec<Vec<f32>>,
    /// Per layer, the new values `[t, kv_row]`.
    pub v: Vec<Vec<f32>>,
    /// `[logit_rows.len(), vocab]`.
    pub logits: Vec<f32>,
}

impl StackOutput {
    /// Zeroed outputs for `d` and `i`.
    pub fn new(d: &StackDesc, i: &StackInput) -> Self {
        let n = i.t * d.kv_row();
        StackOutput {
            k: vec![vec![0f32; n]; d.layers.len()],
            v: vec![vec![0f32; n]; d.layers.len()],
            logits: vec![0f32; i.logit_rows.len() * d.head.w.rows],
        }
    }
}

/// `y = x · Wᵀ (+ b)` with the CPU kernels.
fn linear_cpu(w: &Weight, b: Option<&[f32]>, x: &[f32], t: usize) -> Vec<f32> {
    let mut y = vec![0f32; t * w.w.rows];
    oxinfer_kernels::matmul(&w.w, x, t, &mut y);
    if let Some(b) = b {
        for row in y.chunks_exact_mut(w.w.rows) {
            row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
        }
    }
    y
}

fn norm_rows(x: &mut [f32], w: &[f32], eps: f32) {
    for row in x.chunks_exact_mut(w.len()) {
        rms_norm_row(row, w, eps);
    }
}

/// Applies RoPE from per-row tables (`[t, half]`) to `x` `[t, heads * head_dim]`.
pub fn rope_rows(x: &mut [f32], d: &StackDesc, heads: usize, cos: &[f32], sin: &[f32]) {
    let half = d.rope_dim / 2;
    let hd = d.head_dim;
    for (i, row) in x.chunks_exact_mut(heads * hd).enumerate() {
        let (c, s) = (
            &cos[i * half..(i + 1) * half],
            &sin[i * half..(i + 1) * half],
        );
        for h in row.chunks_exact_mut(hd) {
            for j in 0..half {
                let (ia, ib) = if d.rope_interleaved {
                    (2 * j, 2 * j + 1)
                } else {
                    (j, j + half)
                };
                let (a, b) = (h[ia], h[ib]);
                h[ia] = a * c[j] - b * s[j];
                h[ib] = b * c[j] + a * s[j];
            }
        }
    }
}

/// The CPU twin of [`super::Backend::decoder_stack`]: the same outputs with the CPU kernels.
pub fn stack_cpu(d: &StackDesc, i: &StackInput) -> StackOutput {
    let mut out = StackOutput::new(d, i);
    let (t, dim) = (i.t, d.dim);
    let (q_row, kv_row) = (d.q_row(), d.kv_row());
    let mut x = i.x.to_vec();
    for (li, l) in d.layers.iter().enumerate() {
        let mut h = x.clone();
        norm_rows(&mut h, l.attn_norm, d.eps);
        let mut q = linear_cpu(&l.q, l.q_bias, &h, t);
        let mut k = linear_cpu(&l.k, l.k_bias, &h, t);
        let v = linear_cpu(&l.v, l.v_bias, &h, t);
        if let Some(w) = l.q_norm {
            norm_rows(&mut q, w, d.eps);
        }
        if let Some(w) = l.k_norm {
            norm_rows(&mut k, w, d.eps);
        }
        rope_rows(&mut q, d, d.n_heads, i.rope_cos, i.rope_sin);
        rope_rows(&mut k, d, d.n_kv_heads, i.rope_cos, i.rope_sin);
        let mut a = vec![0f32; t * q_row];
        for s in i.seqs {
            let (pk, pv) = s.past[li];
            let n_past = pk.len() / kv_row;
            let rows = s.row * kv_row..(s.row + s.len) * kv_row;
            let kk = [pk, &k[rows.clone()]].concat();
            let vv = [pv, &v[rows]].concat();
            let g = AttentionGeom {
                t: s.len,
                pos0: n_past,
                n_heads: d.n_heads,
                n_kv_heads: d.n_kv_heads,
                head_dim: d.head_dim,
                scale: d.scale,
                window: l.window,
                softcap: None,
            };
            let qs = &q[s.row * q_row..(s.row + s.len) * q_row];
            a[s.row * q_row..(s.row + s.len) * q_row]
                .copy_from_slice(&attention_cpu(qs, &kk, &vv, &g));
        }
        let o = linear_cpu(&l.o, None, &a, t);
        x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
        let mut h = x.clone();
        norm_rows(&mut h, l.ffn_norm, d.eps);
        let mut g = linear_cpu(&l.gate, None, &h, t);
        let u = linear_cpu(&l.up, None, &h, t);
        g.iter_mut()
            .zip(&u)
            .for_each(|(g, u)| *g = d.act.apply(*g) * u);
        let m = linear_cpu(&l.down, None, &g, t);
        x.iter_mut().zip(&m).for_each(|(x, m)| *x += m);
        out.k[li] = k;
        out.v[li] = v;
    }
    let mut rows: Vec<f32> = Vec::with_capacity(i.logit_rows.len() * dim);
    for &r in i.logit_rows {
        rows.extend_from_slice(&x[r * dim..(r + 1) * dim]);
    }
    norm_rows(&mut rows, d.final_norm, d.eps);
    out.logits = linear_cpu(&d.head, None, &rows, i.logit_rows.len());
    out
}

/// Runs a forward pass of `batch` through `b`'s decoder stack: `x` holds the embedded tokens
/// (`[t, dim]`). Appends the new keys/values to each sequence's cache, advances the caches and
/// returns the logits per sequence, as [`batch::finish`] does; `None` when `b` declines (or
/// when uploading the cached keys would cost more than the pass, e.g. many-sequence decode),
/// with nothing changed.
pub fn run(
    b: &dyn Backend,
    d: &StackDesc,
    x: &[f32],
    batch: &mut [SeqBatch<'_>],
    spans: &[SeqSpan],
    rope: &Rope,
) -> Option<Vec<Vec<f32>>> {
    let t = x.len() / d.dim;
    let past_rows: usize = batch
        .iter()
        .map(|s| s.cache.layers.first().map_or(0, |l| l.k.len()) / d.kv_row().max(1))
        .sum();
    if past_rows > 4 * t || rope.dim() != d.rope_dim {
        return None;
    }
    let half = d.rope_dim / 2;
    let (mut cos, mut sin) = (vec![0f32; t * half], vec![0f32; t * half]);
    for sp in spans {
        let r = sp.row * half..(sp.row + sp.len) * half;
        rope.tables(sp.pos0, sp.len, &mut cos[r.clone()], &mut sin[r]);
    }
    let mut logit_rows = Vec::new();
    let mut counts = Vec::with_capacity(spans.len());
    for (s, sp) in batch.iter().zip(spans) {
        let first = if s.all_logits {
            sp.row
        } else {
            sp.row + sp.len - 1
        };
        logit_rows.extend(first..sp.row + sp.len);
        counts.push(sp.row + sp.len - first);
    }
    let out = {
        let seqs: Vec<StackSeq> = batch
            .iter()
            .zip(spans)
            .map(|(s, sp)| StackSeq {
                row: sp.row,
                len: sp.len,
                past: s
                    .cache
                    .layers
                    .iter()
                    .map(|l| (&l.k[..], &l.v[..]))
                    .collect(),
            })
            .collect();
        let input = StackInput {
            x,
            t,
            rope_cos: &cos,
            rope_sin: &sin,
            seqs: &seqs,
            logit_rows: &logit_rows,
        };
        let mut out = StackOutput::new(d, &input);
        if !b.decoder_stack(d, &input, &mut out) {
            return None;
        }
        out
    };
    let kv_row = d.kv_row();
    for (s, sp) in batch.iter_mut().zip(spans) {
        let rows = sp.row * kv_row..(sp.row + sp.len) * kv_row;
        for (li, (k, v)) in out.k.iter().zip(&out.v).enumerate() {
            s.cache.append(li, &k[rows.clone()], &v[rows.clone()]);
        }
        s.cache.advance(sp.len);
    }
    Some(batch::split_logits(out.logits, d.head.w.rows, &counts))
}
