//! The decoder stack op: a whole pre-norm decoder (Llama family, Gemma 3) run by a backend with
//! the hidden state resident on the device, and its CPU twin.
//!
//! Departure from `shared/seed/backend-spec.rs.txt`, which offloads single ops (matmul,
//! attention, conv2d): with one op at a time the `[t, dim]` activations cross the bus for every
//! op and the norms, RoPE and residual adds run on the host; on an H200 that held a 7B-geometry
//! prefill at ~950 tok/s while the matmuls alone take a few ms. So a backend may take the whole
//! stack in one call ([`super::Backend::decoder_stack`]): the embedding rows go up, the logits of
//! the rows that need them and every layer's new keys and values come down.
//!
//! KV ownership: the host [`KvCache`] stays the one source of truth. The backend reads each
//! sequence's cached keys/values through [`KvStore::past`] (in position order, also for
//! ring-buffer sliding layers) and hands every layer's new rows to [`KvStore::append`] as soon
//! as they are ready, which [`run`] appends to the host cache exactly as the CPU path would
//! (a backend can overlap that copy with the next layers' compute); decode (one token per step)
//! then runs wherever it runs (on the CPU by default) over the same cache. Nothing is kept on
//! the device between calls except the weights.
//!
//! Checking: the CPU twin [`stack_cpu`] computes the same outputs with the CPU kernels (the
//! dispatching int8 matmul, the reference attention), so `OXINFER_GPU_CHECK=1` compares the
//! logits and each layer's new keys and values (a per-layer comparison: layer `l`'s keys are a
//! function of the hidden state entering layer `l`).

use super::{AttentionGeom, Backend, GateAct, Weight};
use crate::arch::batch::{self, SeqBatch, SeqSpan};
use crate::error::{Error, Result};
use crate::nn::{attention::attention_cpu, norm::rms_norm_row, KvCache, Rope};

/// One decoder layer: `x += post_attn_norm(o(attn(rope(qk_norm(q/k/v(norm(x)))))))`, then
/// `x += post_ffn_norm(down(act(gate(h)) · up(h)))` with `h = ffn_norm(x)` (the post-norms
/// only where given, as in Gemma).
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
    /// Per-head RMSNorm gains of queries and keys before RoPE (Qwen3, Gemma 3), `[head_dim]`
    /// each.
    pub q_norm: Option<&'a [f32]>,
    pub k_norm: Option<&'a [f32]>,
    /// RMSNorm gain of the attention output before its residual add (Gemma), `[dim]`.
    pub post_attn_norm: Option<&'a [f32]>,
    /// RMSNorm gain before the MLP, `[dim]`.
    pub ffn_norm: &'a [f32],
    pub gate: Weight<'a>,
    pub up: Weight<'a>,
    pub down: Weight<'a>,
    /// RMSNorm gain of the MLP output before its residual add (Gemma), `[dim]`.
    pub post_ffn_norm: Option<&'a [f32]>,
    /// Sliding attention window of this layer.
    pub window: Option<usize>,
    /// Index of this layer's RoPE table in [`StackInput::ropes`] (Gemma 3: local tables for
    /// sliding layers, global for the others).
    pub rope: usize,
}

/// The whole decoder as a backend sees it.
pub struct StackDesc<'a> {
    pub layers: Vec<StackLayer<'a>>,
    /// Final RMSNorm gain, `[dim]`.
    pub final_norm: &'a [f32],
    /// Output head `[vocab, dim]`.
    pub head: Weight<'a>,
    /// Logits become `cap · tanh(logits / cap)`.
    pub final_softcap: Option<f32>,
    pub dim: usize,
    pub eps: f32,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Factor on q·k.
    pub scale: f32,
    pub act: GateAct,
    /// Rotated dimensions per head (the first `rope_dim` of each head), the same in every table.
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

    /// Number of RoPE tables the layers use.
    pub fn n_ropes(&self) -> usize {
        self.layers.iter().map(|l| l.rope + 1).max().unwrap_or(1)
    }
}

/// One sequence of a stack call.
pub struct StackSeq {
    /// First row in the stacked input.
    pub row: usize,
    /// New tokens.
    pub len: usize,
}

/// RoPE tables of every row for one layer kind, `[t, rope_dim / 2]` each.
#[derive(Clone, Copy)]
pub struct RopeTable<'a> {
    pub cos: &'a [f32],
    pub sin: &'a [f32],
}

/// Inputs of one stack call.
pub struct StackInput<'a> {
    /// Embedded tokens `[t, dim]`, every sequence stacked.
    pub x: &'a [f32],
    pub t: usize,
    /// The RoPE tables the layers name ([`StackLayer::rope`]).
    pub ropes: &'a [RopeTable<'a>],
    pub seqs: &'a [StackSeq],
    /// Rows (into the stacked input) whose logits are wanted, in output order.
    pub logit_rows: &'a [usize],
}

/// One layer's cached keys and values of one sequence before a call, in position order:
/// `k[0]` then `k[1]` (two pieces so a wrapped ring buffer needs no copy), `[n, kv_row]`
/// together. They are the `n` positions just before the first new token (`n` may be 0; a
/// sliding layer may hold only its window). Attention only looks at position differences, so
/// a backend treats them as positions `0 .. n` and the new tokens as `n ..` (the keys were
/// rotated at their true positions when stored).
#[derive(Clone, Copy, Default)]
pub struct Past<'a> {
    pub k: [&'a [f32]; 2],
    pub v: [&'a [f32]; 2],
}

impl Past<'_> {
    /// Rows stored, for rows of `kv_row`.
    pub fn rows(&self, kv_row: usize) -> usize {
        (self.k[0].len() + self.k[1].len()) / kv_row.max(1)
    }
}

/// Where a stack call reads cached keys/values and stores the new ones.
pub trait KvStore {
    /// Layer `layer`'s cached keys/values of sequence `seq` (an index into
    /// [`StackInput::seqs`]) before this call.
    fn past(&self, seq: usize, layer: usize) -> Past<'_>;

    /// Layer `layer`'s new rotated keys and values, `[t, kv_row]` each with every sequence
    /// stacked. Called once per layer, in layer order, after that layer's [`Self::past`] was
    /// last read.
    fn append(&mut self, layer: usize, k: &[f32], v: &[f32]);
}

/// A [`KvStore`] in memory: owned cached rows per sequence and layer, and every appended
/// layer collected (for tests and checks).
#[derive(Default)]
pub struct KvCollect {
    /// Per sequence, per layer: cached keys and values (position order, one piece).
    pub cached: Vec<Vec<(Vec<f32>, Vec<f32>)>>,
    /// Per appended layer, the new keys / values `[t, kv_row]`.
    pub k: Vec<Vec<f32>>,
    pub v: Vec<Vec<f32>>,
}

impl KvStore for KvCollect {
    fn past(&self, seq: usize, layer: usize) -> Past<'_> {
        match self.cached.get(seq).and_then(|s| s.get(layer)) {
            Some((k, v)) => Past {
                k: [k, &[]],
                v: [v, &[]],
            },
            None => Past::default(),
        }
    }

    fn append(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        debug_assert_eq!(layer, self.k.len());
        self.k.push(k.to_vec());
        self.v.push(v.to_vec());
    }
}

/// Outputs of one stack call: logits here, keys/values into the store.
pub struct StackOutput<'a> {
    /// `[logit_rows.len(), vocab]`.
    pub logits: Vec<f32>,
    pub kv: &'a mut dyn KvStore,
}

impl<'a> StackOutput<'a> {
    /// Zeroed logits for `d` and `i`, keys/values through `kv`.
    pub fn new(d: &StackDesc, i: &StackInput, kv: &'a mut dyn KvStore) -> Self {
        StackOutput {
            logits: vec![0f32; i.logit_rows.len() * d.head.w.rows],
            kv,
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

/// `cap · tanh(x / cap)` on every value.
pub fn softcap(x: &mut [f32], cap: f32) {
    x.iter_mut().for_each(|v| *v = cap * (*v / cap).tanh());
}

/// Applies RoPE from per-row tables (`[t, half]`) to `x` `[t, heads * head_dim]`.
pub fn rope_rows(x: &mut [f32], d: &StackDesc, heads: usize, r: &RopeTable) {
    let half = d.rope_dim / 2;
    let hd = d.head_dim;
    for (i, row) in x.chunks_exact_mut(heads * hd).enumerate() {
        let (c, s) = (
            &r.cos[i * half..(i + 1) * half],
            &r.sin[i * half..(i + 1) * half],
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
pub fn stack_cpu(d: &StackDesc, i: &StackInput, out: &mut StackOutput) {
    let (t, dim) = (i.t, d.dim);
    let (q_row, kv_row) = (d.q_row(), d.kv_row());
    let mut x = i.x.to_vec();
    for (li, l) in d.layers.iter().enumerate() {
        let rope = &i.ropes[l.rope];
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
        rope_rows(&mut q, d, d.n_heads, rope);
        rope_rows(&mut k, d, d.n_kv_heads, rope);
        let mut a = vec![0f32; t * q_row];
        for (si, s) in i.seqs.iter().enumerate() {
            let p = out.kv.past(si, li);
            let n_past = p.rows(kv_row);
            let rows = s.row * kv_row..(s.row + s.len) * kv_row;
            let kk = [p.k[0], p.k[1], &k[rows.clone()]].concat();
            let vv = [p.v[0], p.v[1], &v[rows]].concat();
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
        let mut o = linear_cpu(&l.o, None, &a, t);
        if let Some(w) = l.post_attn_norm {
            norm_rows(&mut o, w, d.eps);
        }
        x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
        let mut h = x.clone();
        norm_rows(&mut h, l.ffn_norm, d.eps);
        let mut g = linear_cpu(&l.gate, None, &h, t);
        let u = linear_cpu(&l.up, None, &h, t);
        g.iter_mut()
            .zip(&u)
            .for_each(|(g, u)| *g = d.act.apply(*g) * u);
        let mut m = linear_cpu(&l.down, None, &g, t);
        if let Some(w) = l.post_ffn_norm {
            norm_rows(&mut m, w, d.eps);
        }
        x.iter_mut().zip(&m).for_each(|(x, m)| *x += m);
        out.kv.append(li, &k, &v);
    }
    let mut rows: Vec<f32> = Vec::with_capacity(i.logit_rows.len() * dim);
    for &r in i.logit_rows {
        rows.extend_from_slice(&x[r * dim..(r + 1) * dim]);
    }
    norm_rows(&mut rows, d.final_norm, d.eps);
    out.logits = linear_cpu(&d.head, None, &rows, i.logit_rows.len());
    if let Some(cap) = d.final_softcap {
        softcap(&mut out.logits, cap);
    }
}

/// A layer's stored rows in position order: the whole buffer, or, for a ring that has wrapped,
/// its oldest rows (from `len % ring`) then the rest.
fn layer_past<'c>(c: &'c KvCache, layer: usize) -> Past<'c> {
    let l = &c.layers[layer];
    let row = c.row_width(layer);
    if l.ring == 0 || c.len() <= l.ring {
        return Past {
            k: [&l.k, &[]],
            v: [&l.v, &[]],
        };
    }
    let at = (c.len() % l.ring) * row;
    Past {
        k: [&l.k[at..], &l.k[..at]],
        v: [&l.v[at..], &l.v[..at]],
    }
}

/// The [`KvStore`] of a batch's host caches.
struct CacheStore<'b> {
    caches: Vec<&'b mut KvCache>,
    spans: &'b [SeqSpan],
    kv_row: usize,
    /// Layers appended so far.
    appended: usize,
}

impl KvStore for CacheStore<'_> {
    fn past(&self, seq: usize, layer: usize) -> Past<'_> {
        layer_past(self.caches[seq], layer)
    }

    fn append(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        for (c, sp) in self.caches.iter_mut().zip(self.spans) {
            let rows = sp.row * self.kv_row..(sp.row + sp.len) * self.kv_row;
            c.append(layer, &k[rows.clone()], &v[rows]);
        }
        self.appended = layer + 1;
    }
}

/// Runs a forward pass of `batch` through `b`'s decoder stack: `x` holds the embedded tokens
/// (`[t, dim]`), `ropes` the RoPE of each table the layers name. Appends the new keys/values to
/// each sequence's cache, advances the caches and returns the logits per sequence, as
/// [`batch::finish`] does. `None` when `b` declines (or when uploading the cached keys would
/// cost more than the pass, e.g. many-sequence decode), with nothing changed; an error when
/// the device failed after part of the keys were stored (those caches are then emptied).
pub fn run(
    b: &dyn Backend,
    d: &StackDesc,
    x: &[f32],
    batch: &mut [SeqBatch<'_>],
    spans: &[SeqSpan],
    ropes: &[&Rope],
) -> Option<Result<Vec<Vec<f32>>>> {
    let t = x.len() / d.dim;
    // Rows every layer would upload, against the pass's own work.
    let past_rows: usize = batch.iter().map(|s| s.cache.len()).sum();
    if past_rows > 4 * t
        || ropes.len() < d.n_ropes()
        || ropes
            .iter()
            .any(|r| r.dim() != d.rope_dim || r.interleaved() != d.rope_interleaved)
    {
        return None;
    }
    let half = d.rope_dim / 2;
    let tables: Vec<(Vec<f32>, Vec<f32>)> = ropes
        .iter()
        .map(|rope| {
            let (mut cos, mut sin) = (vec![0f32; t * half], vec![0f32; t * half]);
            for sp in spans {
                let r = sp.row * half..(sp.row + sp.len) * half;
                rope.tables(sp.pos0, sp.len, &mut cos[r.clone()], &mut sin[r]);
            }
            (cos, sin)
        })
        .collect();
    let ropes: Vec<RopeTable> = tables
        .iter()
        .map(|(cos, sin)| RopeTable { cos, sin })
        .collect();
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
    let seqs: Vec<StackSeq> = spans
        .iter()
        .map(|sp| StackSeq {
            row: sp.row,
            len: sp.len,
        })
        .collect();
    let input = StackInput {
        x,
        t,
        ropes: &ropes,
        seqs: &seqs,
        logit_rows: &logit_rows,
    };
    let mut store = CacheStore {
        caches: batch.iter_mut().map(|s| &mut *s.cache).collect(),
        spans,
        kv_row: d.kv_row(),
        appended: 0,
    };
    let mut out = StackOutput::new(d, &input, &mut store);
    let done = b.decoder_stack(d, &input, &mut out);
    let logits = std::mem::take(&mut out.logits);
    drop(out);
    if !done || store.appended < d.layers.len() {
        if store.appended == 0 {
            return None;
        }
        for c in store.caches.iter_mut() {
            c.reset();
        }
        return Some(Err(Error::Device(format!(
            "{} failed after storing {} of {} layers' keys; the KV cache was emptied",
            b.name(),
            store.appended,
            d.layers.len()
        ))));
    }
    for (c, sp) in store.caches.iter_mut().zip(spans) {
        c.advance(sp.len);
    }
    Some(Ok(batch::split_logits(logits, d.head.w.rows, &counts)))
}
