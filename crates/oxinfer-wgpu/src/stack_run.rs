//! One pass of a lowered plan ([`crate::stack`]) with the hidden state `[t, dim]` and every
//! sequence's keys/values resident on the device: norms, biases, QK-norms, RoPE, attention
//! over each sequence's [`WgpuKv`], residual adds, the gated MLP, the final norm, head and
//! soft-cap run as kernels, recorded into one submission. Per pass only the embedded rows and
//! the constants (gains, biases, RoPE rows, logit row indices) go up, plus any cached rows a
//! CPU pass wrote since the last device pass; only the wanted logits come down.

use crate::gpu::Gpu;
use crate::kernels::Dispatch;
use crate::kernels::{self, Buf, RopeAt};
use crate::kv::WgpuKv;
use crate::matrix::{linear, DeviceMatrix, LinearIo};
use crate::stack::Stack;
use oxinfer::backend::{AttentionGeom, AttnShape};
use oxinfer::plan::{DeviceKv, KvCache, PlanInput, SeqRows};
use std::sync::Arc;

/// The activation arena and constants buffer, kept between passes and grown on demand.
#[derive(Default)]
pub(crate) struct Scratch {
    arena: Option<(Buf, usize)>,
    consts: Option<(Buf, usize)>,
    /// The decoder stack's own constants buffer (the encoder passes take `consts`).
    stack_consts: Option<(Buf, usize)>,
    /// The model constants at the start of `stack_consts`, as the last stack pass wrote them
    /// (`None` after a failed pass).
    model: Option<ModelConsts>,
}

/// A model's norm gains and biases packed at the start of the stack's constants buffer, with the
/// identity of what they were packed from ([`consts_key`]) and where each landed: a pass of the
/// same model writes only its own values after them (packing and writing a 7B's 1.3 MB every
/// decode step cost more host time than the step's dispatches).
pub(crate) struct ModelConsts {
    key: Vec<usize>,
    /// Per layer, each norm's gain offset and eps ([`crate::stack::StackLayer::norms`]' order).
    gains: Vec<[Option<(usize, f32)>; 6]>,
    /// Per layer, the q, k and v biases' offsets.
    biases: Vec<[Option<usize>; 3]>,
    final_norm: (usize, f32),
    /// f32 values the model's part takes (a multiple of 64).
    len: usize,
}

/// The identity of a stack's model constants ([`oxinfer::backend::constants_key`]): the head
/// matrix's upload id and every gain and bias [`ModelConsts`] packs, in packing order.
fn consts_key(s: &Stack) -> Vec<usize> {
    let layers = s.layers.iter().flat_map(|l| {
        let gains = l.norms().map(|n| n.map(|n| n.gain()));
        gains.into_iter().chain(l.biases())
    });
    let last = std::iter::once(Some(s.plan.final_norm.gain()));
    oxinfer::backend::constants_key(s.head.id, layers.chain(last))
}

/// Packs `s`'s model constants from offset 0.
fn pack_model(s: &Stack, key: Vec<usize>) -> (Pack, ModelConsts) {
    let mut pack = Pack::default();
    let gains = s
        .layers
        .iter()
        .map(|l| l.norms().map(|n| n.map(|n| (pack.push(n.gain()), n.eps()))))
        .collect();
    let biases = s
        .layers
        .iter()
        .map(|l| l.biases().map(|b| b.map(|b| pack.push(b))))
        .collect();
    let final_norm = (pack.push(s.plan.final_norm.gain()), s.plan.final_norm.eps());
    let len = pack.0.len();
    let model = ModelConsts {
        key,
        gains,
        biases,
        final_norm,
        len,
    };
    (pack, model)
}

impl Scratch {
    /// A buffer of at least `n` f32 in `slot`, reallocated (contents lost) when too small.
    fn get(gpu: &Gpu, slot: &mut Option<(Buf, usize)>, n: usize, label: &str) -> Buf {
        match slot {
            Some((b, cap)) if *cap >= n => b.clone(),
            _ => {
                let b = gpu.buffer(label, (n * 4) as u64);
                *slot = Some((b.clone(), n));
                b
            }
        }
    }

    /// The arena with room for `n` f32.
    pub(crate) fn arena(&mut self, gpu: &Gpu, n: usize) -> Buf {
        Self::get(gpu, &mut self.arena, n, "arena")
    }

    /// The constants buffer with room for `n` f32.
    pub(crate) fn consts(&mut self, gpu: &Gpu, n: usize) -> Buf {
        Self::get(gpu, &mut self.consts, n, "constants")
    }

    /// The decoder stack's constants buffer with room for `n` f32.
    fn stack_consts(&mut self, gpu: &Gpu, n: usize) -> Buf {
        Self::get(gpu, &mut self.stack_consts, n, "stack constants")
    }

    /// Whether the stack's constants buffer holds `n` f32 without being reallocated.
    fn stack_consts_fit(&self, n: usize) -> bool {
        self.stack_consts.as_ref().is_some_and(|(_, cap)| *cap >= n)
    }
}

/// Offsets handed out one after another in a flat f32 buffer.
#[derive(Default)]
pub(crate) struct Layout(pub(crate) usize);

impl Layout {
    /// `n` elements; returns their offset (kept 64-aligned).
    pub(crate) fn take(&mut self, n: usize) -> usize {
        let at = self.0;
        self.0 = (self.0 + n).next_multiple_of(64);
        at
    }
}

/// Small f32 vectors packed into the constants buffer; each `push` returns its offset.
#[derive(Default)]
pub(crate) struct Pack(pub(crate) Vec<f32>);

impl Pack {
    pub(crate) fn push(&mut self, v: &[f32]) -> usize {
        let at = self.0.len();
        self.0.extend_from_slice(v);
        self.0.resize(self.0.len().next_multiple_of(64), 0.0);
        at
    }
}

/// The cache's mirror when it is this backend's.
fn mirror(c: &mut KvCache) -> Option<&mut WgpuKv> {
    c.device_mut()?.as_any_mut().downcast_mut::<WgpuKv>()
}

/// Gives every sequence's cache a mirror with room for its new rows, queues the upload of the
/// rows only its host holds (written by CPU passes since the last device pass), and returns
/// each sequence's buffer. A sliding layer's host rows may start later (a ring that dropped
/// old positions); those positions are outside every later query's window.
fn prepare_mirrors(
    gpu: &Arc<Gpu>,
    s: &Stack,
    seqs: &mut [SeqRows<'_>],
) -> Result<Vec<Buf>, String> {
    let (layers, kv_row) = (s.layers.len(), s.kv_row());
    let mut bufs = Vec::with_capacity(seqs.len());
    for sq in seqs.iter_mut() {
        if sq.cache.device().is_none() {
            let m = WgpuKv::new(gpu.clone(), layers, kv_row, sq.cache.capacity());
            sq.cache.set_device(Box::new(m))?;
        }
        let end = sq.cache.len() + sq.len;
        let m = mirror(sq.cache).ok_or("the KV cache's mirror is not this backend's")?;
        let buf = m.reserve(end)?;
        let dev_len = m.len();
        let offsets: Vec<(usize, usize)> = (0..layers)
            .map(|l| (m.at(l, false), m.at(l, true)))
            .collect();
        let c: &KvCache = sq.cache;
        let host_len = c.host_len();
        for (li, &(ko, vo)) in offsets.iter().enumerate().filter(|_| dev_len < host_len) {
            let past = c.past(li);
            let first = host_len - past.rows(kv_row);
            let from = dev_len.max(first);
            let mut skip = (from - first) * kv_row;
            let mut at = from * kv_row;
            for (k, v) in past.k.iter().zip(past.v) {
                let take = skip.min(k.len());
                skip -= take;
                gpu.write(&buf, ko + at, &k[take..]);
                gpu.write(&buf, vo + at, &v[take..]);
                at += k.len() - take;
            }
        }
        bufs.push(buf);
    }
    Ok(bufs)
}

/// Runs the lowered plan; `Ok(false)` when a cache has another backend's mirror or the RoPE
/// tables do not match (nothing changed then).
pub(crate) fn run(
    gpu: &Arc<Gpu>,
    scratch: &mut Scratch,
    s: &Stack,
    i: &PlanInput,
    seqs: &mut [SeqRows<'_>],
    logits: &mut [f32],
) -> Result<bool, String> {
    let (layers, kv_row, q_row) = (s.layers.len(), s.kv_row(), s.q_row());
    let mirrors_ok = seqs.iter_mut().all(|sq| {
        sq.cache.device().is_none() || mirror(sq.cache).is_some_and(|m| m.fits(gpu, layers, kv_row))
    });
    if i.rope_tables.len() != s.plan.ropes.len() || !mirrors_ok {
        return Ok(false);
    }
    let (t, dim, hd) = (i.t(), s.plan.dim, s.head_dim);
    let ffn = s.layers.iter().map(|l| l.mats[4].rows).max().unwrap_or(0);
    let n_logit = i.logit_rows.len();
    let vocab = s.head.rows;

    // The constants: the model's (every layer's gains and biases, the final norm), written
    // once per model (`ModelConsts`), then this pass's (RoPE rows, row indices) after them.
    let mut pass = Pack::default();
    let rope_at: Vec<(usize, usize)> = i
        .rope_tables
        .iter()
        .map(|tb| (pass.push(&tb.cos), pass.push(&tb.sin)))
        .collect();
    let idx: Vec<f32> = i
        .logit_rows
        .iter()
        .map(|&r| f32::from_bits(r as u32))
        .collect();
    let idx_in_pass = pass.push(&idx);
    let key = consts_key(s);
    let kept = scratch
        .model
        .take()
        .filter(|m| m.key == key && scratch.stack_consts_fit(m.len + pass.0.len()));
    let (model_pack, model) = match kept {
        Some(m) => (None, m),
        None => {
            let (p, m) = pack_model(s, key);
            (Some(p), m)
        }
    };
    let base = model.len;
    let ropes: Vec<RopeAt> = rope_at
        .iter()
        .zip(&s.plan.ropes)
        .map(|(&(cos, sin), r)| RopeAt {
            cos: base + cos,
            sin: base + sin,
            half: r.dim() / 2,
            interleaved: r.interleaved(),
        })
        .collect();
    let idx_at = base + idx_in_pass;

    let mut lay = Layout::default();
    let widest = dim.max(q_row).max(ffn);
    let [x, nrm, q, kn, vn, att, g, up, y, xq, rows, lg] = [
        t * dim,
        t * dim,
        t * q_row,
        t * kv_row,
        t * kv_row,
        t * q_row,
        t * ffn,
        t * ffn,
        t * dim,
        t * widest,
        n_logit * dim,
        n_logit * vocab,
    ]
    .map(|n| lay.take(n));
    if !gpu.fits((lay.0 * 4) as u64) {
        return Err(format!(
            "{t} rows need {} bytes of activations, over the device's buffer limit",
            lay.0 * 4
        ));
    }
    let a = scratch.arena(gpu, lay.0);
    let c = scratch.stack_consts(gpu, base + pass.0.len());
    gpu.write(&a, x, i.x);
    if let Some(p) = &model_pack {
        gpu.write(&c, 0, &p.0);
    }
    gpu.write(&c, base, &pass.0);
    let (gains, biases, final_norm) = (&model.gains, &model.biases, model.final_norm);
    let kv = prepare_mirrors(gpu, s, seqs)?;
    let pos0: Vec<usize> = seqs.iter().map(|sq| sq.cache.len()).collect();
    let kv_at: Vec<Vec<(usize, usize)>> = seqs
        .iter_mut()
        .map(|sq| {
            let m = mirror(sq.cache).expect("prepared above");
            (0..layers)
                .map(|l| (m.at(l, false), m.at(l, true)))
                .collect()
        })
        .collect();

    let mut d: Vec<Dispatch> = Vec::new();
    // Products of one input share its int8 rounding (`ready`, cleared for each new input).
    type Ready = Option<(usize, usize)>;
    let mm = |d: &mut Vec<Dispatch>, r: &mut Ready, m: &DeviceMatrix, x: usize, y: usize, n| {
        let io = LinearIo {
            a: &a,
            x,
            xq,
            out: &a,
            y,
            ld: m.rows,
        };
        linear(m, &io, n, r, d)
    };
    for (li, l) in s.layers.iter().enumerate() {
        let [wq, wk, wv, wo, wg, wu, wd] = l.mats;
        let [attn_norm, ffn_norm, post_attn, post_ffn, q_norm, k_norm] = gains[li];
        let norm = |d: &mut Vec<Dispatch>, n: Option<(usize, f32)>, from: usize, to: usize| {
            if let Some((gain, eps)) = n {
                d.push(kernels::rms_norm(&a, &c, from, to, dim, t, gain, eps));
            }
        };
        norm(&mut d, attn_norm, x, nrm);
        let mut ready = None;
        mm(&mut d, &mut ready, wq, nrm, q, t);
        mm(&mut d, &mut ready, wk, nrm, kn, t);
        mm(&mut d, &mut ready, wv, nrm, vn, t);
        for ((b, at), w) in biases[li]
            .iter()
            .zip([q, kn, vn])
            .zip([q_row, kv_row, kv_row])
        {
            if let Some(b) = b {
                d.push(kernels::add_bias(&a, &c, at, *b, w, t));
            }
        }
        for (n, at, heads) in [(q_norm, q, s.n_heads), (k_norm, kn, s.n_kv_heads)] {
            if let Some((gain, eps)) = n {
                d.push(kernels::rms_norm(&a, &c, at, at, hd, t * heads, gain, eps));
            }
        }
        let rope = ropes[l.spec.rope];
        d.push(kernels::rope(&a, &c, q, t, s.n_heads, hd, rope));
        d.push(kernels::rope(&a, &c, kn, t, s.n_kv_heads, hd, rope));
        for (si, sq) in seqs.iter().enumerate() {
            let (ko, vo) = kv_at[si][li];
            let (rows_kv, new) = (sq.row * kv_row, sq.len * kv_row);
            d.push(kernels::copy(
                &a,
                kn + rows_kv,
                &kv[si],
                ko + pos0[si] * kv_row,
                new,
            ));
            d.push(kernels::copy(
                &a,
                vn + rows_kv,
                &kv[si],
                vo + pos0[si] * kv_row,
                new,
            ));
            let geom = AttentionGeom {
                t: sq.len,
                pos0: pos0[si],
                shape: AttnShape {
                    n_heads: s.n_heads,
                    n_kv_heads: s.n_kv_heads,
                    head_dim: hd,
                    scale: l.spec.scale,
                    window: l.spec.window,
                    softcap: l.spec.softcap,
                },
            };
            let (qa, oa) = (q + sq.row * q_row, att + sq.row * q_row);
            d.push(kernels::attention(&a, &kv[si], qa, oa, ko, vo, &geom));
        }
        mm(&mut d, &mut None, wo, att, y, t);
        norm(&mut d, post_attn, y, y);
        d.push(kernels::add(&a, y, x, t * dim));
        norm(&mut d, ffn_norm, x, nrm);
        let mut ready = None;
        mm(&mut d, &mut ready, wg, nrm, g, t);
        mm(&mut d, &mut ready, wu, nrm, up, t);
        d.push(kernels::gated_act(&a, g, up, t * wg.rows, l.mlp.act));
        mm(&mut d, &mut None, wd, g, y, t);
        norm(&mut d, post_ffn, y, y);
        d.push(kernels::add(&a, y, x, t * dim));
    }
    if n_logit > 0 {
        d.push(kernels::gather_rows(&a, &c, x, rows, dim, n_logit, idx_at));
        let (gain, eps) = final_norm;
        d.push(kernels::rms_norm(
            &a, &c, rows, rows, dim, n_logit, gain, eps,
        ));
        mm(&mut d, &mut None, s.head, rows, lg, n_logit);
        if let Some(cap) = s.plan.final_softcap {
            d.push(kernels::softcap(&a, lg, n_logit * vocab, cap));
        }
    }
    gpu.run(&d, &mut [(&a, lg, logits)])?;
    for (sq, &p0) in seqs.iter_mut().zip(&pos0) {
        if let Some(m) = mirror(sq.cache) {
            m.set_len(p0 + sq.len);
        }
    }
    // The buffer now holds them for the next pass of this model.
    scratch.model = Some(model);
    Ok(true)
}
