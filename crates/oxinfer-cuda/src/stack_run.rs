//! One pass of a lowered plan ([`crate::stack`]) with the hidden state `[t, dim]` and every
//! sequence's keys/values resident on the device: norms (pre and post), biases, QK-norms, RoPE
//! (one table per layer kind), attention over the sequence's device KV cache
//! ([`DeviceKvCache`], attached to its [`KvCache`]), residual adds, the gated MLP and the final
//! soft-cap run as kernels, every matmul through [`gemm::linear`] (activations quantized like
//! the CPU's; quantized GEMV kernels for decode). Per pass only the embedded rows and the RoPE
//! rows go up (plus, when they changed, the packed norm gains and biases, and any cached rows a
//! CPU pass wrote since the last device pass); only the wanted logits come down.

use crate::gemm::{self, QuantPath};
use crate::gpu::{Gpu, Slot};
use crate::kv::DeviceKvCache;
use crate::matrix::DeviceMatrix;
use crate::ops::{self, add, add_bias, gated_act, head_norm, rms_norm, rope, softcap};
use crate::stack::StackDesc;
use crate::timing::Timing;
use cudarc::driver::sys::CUdeviceptr;
use oxinfer::backend::{AttentionGeom, AttnShape, Weight};
use oxinfer::plan::{KvCache, PlanInput, SeqRows};
use std::sync::{Arc, Mutex};

/// Byte offset of f32 element `i`.
fn at(p: CUdeviceptr, i: usize) -> CUdeviceptr {
    p + (i * 4) as CUdeviceptr
}

/// Small f32 vectors of one call packed into one upload; each `push` returns the element
/// offset.
#[derive(Default)]
struct Pack(Vec<f32>);

impl Pack {
    fn push(&mut self, v: &[f32]) -> usize {
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
struct LayerParams {
    attn_norm: usize,
    ffn_norm: usize,
    post_attn_norm: Option<usize>,
    post_ffn_norm: Option<usize>,
    q_bias: Option<usize>,
    k_bias: Option<usize>,
    v_bias: Option<usize>,
    q_norm: Option<usize>,
    k_norm: Option<usize>,
}

/// The norm gains and biases of every layer and the final norm, packed.
fn pack_params(d: &StackDesc) -> (Pack, Vec<LayerParams>, usize) {
    let mut pack = Pack::default();
    let lp = d
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
    (pack, lp, final_norm)
}

fn mat<'a>(w: &Weight<'a>) -> Option<&'a DeviceMatrix> {
    w.dev.downcast_ref::<DeviceMatrix>()
}

/// The cache's device mirror when it is this backend's [`DeviceKvCache`].
fn mirror(c: &mut KvCache) -> Option<&mut DeviceKvCache> {
    c.device_mut()?.as_any_mut().downcast_mut::<DeviceKvCache>()
}

/// Whether every cache can run on this backend: no mirror yet, or one of this backend with
/// this geometry (a mirror of another backend makes the pass decline; the CPU then reads it).
fn mirrors_fit(
    seqs: &mut [SeqRows<'_>],
    gpu: &Arc<Mutex<Gpu>>,
    layers: usize,
    kv_row: usize,
) -> bool {
    seqs.iter_mut().all(|s| {
        s.cache.device().is_none() || mirror(s.cache).is_some_and(|m| m.fits(gpu, layers, kv_row))
    })
}

/// Rows `skip ..` of the two pieces `p` (`[n, row]` together), as at most two slices.
fn tail(p: [&[f32]; 2], skip: usize) -> [&[f32]; 2] {
    if skip <= p[0].len() {
        [&p[0][skip..], p[1]]
    } else {
        [&[], &p[1][skip - p[0].len()..]]
    }
}

/// Per layer, the device addresses of one sequence's keys and values (row 0).
type LayerBases = Vec<(CUdeviceptr, CUdeviceptr)>;

/// Gives every sequence's cache a device mirror with room for its new rows, queues the upload
/// of the rows only its host holds (written by CPU passes since the last device pass) into
/// `parts`, and returns each sequence's layer bases. The host rows of a sliding layer that
/// dropped older positions start later; those positions are outside every later query's
/// window.
fn prepare_mirrors<'c>(
    g: &Gpu,
    gpu: &Arc<Mutex<Gpu>>,
    d: &StackDesc,
    seqs: &'c mut [SeqRows<'_>],
    parts: &mut Vec<(CUdeviceptr, &'c [f32])>,
) -> Result<Vec<LayerBases>, String> {
    let (layers, kv_row) = (d.n_layers(), d.kv_row());
    let mut bases = Vec::with_capacity(seqs.len());
    let mut dev_lens = Vec::with_capacity(seqs.len());
    for s in seqs.iter_mut() {
        if s.cache.device().is_none() {
            let m = DeviceKvCache::new(gpu.clone(), layers, kv_row, s.cache.capacity());
            s.cache.set_device(Box::new(m))?;
        }
        let pos0 = s.cache.len();
        let m = mirror(s.cache).ok_or("the KV cache's mirror is not this backend's")?;
        m.reserve(g, pos0 + s.len)?;
        bases.push((0..layers).map(|li| m.layer(li)).collect::<LayerBases>());
        dev_lens.push(oxinfer::plan::DeviceKv::len(m));
    }
    for ((s, b), &dev_len) in seqs.iter().zip(&bases).zip(&dev_lens) {
        let c: &'c KvCache = s.cache;
        let host_len = c.host_len();
        if dev_len >= host_len {
            continue;
        }
        for (li, &(kb, vb)) in b.iter().enumerate() {
            let past = c.past(li);
            let first = host_len - past.rows(kv_row);
            let from = dev_len.max(first);
            let skip = (from - first) * kv_row;
            let dst = from * kv_row;
            let (k, v) = (tail(past.k, skip), tail(past.v, skip));
            parts.push((at(kb, dst), k[0]));
            parts.push((at(kb, dst + k[0].len()), k[1]));
            parts.push((at(vb, dst), v[0]));
            parts.push((at(vb, dst + v[0].len()), v[1]));
        }
    }
    Ok(bases)
}

/// The device addresses of the norm gains and biases: uploaded when they differ from the
/// last pass's (the same model's passes upload them once).
fn params_on_device(g: &mut Gpu, pack: &Pack) -> Result<CUdeviceptr, String> {
    let bytes = pack.0.len() * 4;
    let (p, fresh) = g.scratch_fresh(Slot::Params, bytes)?;
    if fresh || g.params_host != pack.0 {
        g.upload(p, &pack.0)?;
        g.params_host.clone_from(&pack.0);
    }
    Ok(p)
}

/// Runs the lowered plan on `g` (the device state behind `gpu`, locked by the caller), the
/// keys/values in each sequence's device mirror; `Ok(false)` when a weight is not a device
/// matrix or a cache has another backend's mirror (nothing changed then).
pub(crate) fn run(
    gpu: &Arc<Mutex<Gpu>>,
    g: &mut Gpu,
    path: QuantPath,
    d: &StackDesc,
    i: &PlanInput,
    seqs: &mut [SeqRows<'_>],
    logits: &mut [f32],
) -> Result<bool, String> {
    let mut mats = Vec::with_capacity(d.layers.len());
    for l in &d.layers {
        let m = [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down].map(mat);
        let [Some(q), Some(k), Some(v), Some(o), Some(ga), Some(up), Some(dn)] = m else {
            return Ok(false);
        };
        mats.push([q, k, v, o, ga, up, dn]);
    }
    let Some(head) = mat(&d.head) else {
        return Ok(false);
    };
    if i.rope_tables.len() != d.ropes.len() || !mirrors_fit(seqs, gpu, d.n_layers(), d.kv_row()) {
        return Ok(false);
    }
    let (t, dim) = (i.t(), d.dim);
    let (q_row, kv_row, hd) = (d.q_row(), d.kv_row(), d.head_dim);
    let ffn = mats.first().map_or(0, |m| m[4].rows);
    let n_logit = i.logit_rows.len();
    let vocab = head.rows;

    let (params, lp, final_norm) = pack_params(d);
    // Per pass: RoPE rows of every table, then the logit row indices (as i32 bits).
    let mut per_pass = Pack::default();
    let rope_o: Vec<(usize, usize)> = i
        .rope_tables
        .iter()
        .map(|r| (per_pass.push(&r.cos), per_pass.push(&r.sin)))
        .collect();
    let idx: Vec<f32> = i
        .logit_rows
        .iter()
        .map(|&r| f32::from_bits(r as u32))
        .collect();
    let idx_o = per_pass.push(&idx);
    let widest = [dim, ffn, q_row].into_iter().max().unwrap_or(dim);
    let biggest_w = mats
        .iter()
        .flat_map(|m| m.iter().map(|w| w.rows * w.cols))
        .chain([head.rows * head.cols])
        .max()
        .unwrap_or(0);
    // Partials of the split decode attention: the most any sequence of the pass needs.
    let part_len = seqs
        .iter()
        .filter(|s| s.len <= ops::SPLIT_ATTN_MAX_ROWS)
        .map(|s| {
            let a = geom(d, s.len, s.cache.len(), None);
            ops::attention_part_len(&a, ops::attention_splits(&a))
        })
        .max()
        .unwrap_or(0);

    g.bind()?;
    let timing = Timing::start(g)?;
    // Every scratch buffer at its final size first (growing one later would free memory that
    // queued kernels still read).
    let xp = g.scratch(Slot::X, t * dim * 4)?;
    let np = g.scratch(Slot::Norm, t * dim * 4)?;
    let qp = g.scratch(Slot::Q, t * q_row * 4)?;
    let ap = g.scratch(Slot::Att, t * q_row * 4)?;
    let kn = g.scratch(Slot::KNew, t * kv_row * 4)?;
    let vn = g.scratch(Slot::VNew, t * kv_row * 4)?;
    let gp = g.scratch(Slot::G, t * ffn * 4)?;
    let up = g.scratch(Slot::U, t * ffn * 4)?;
    let yp = g.scratch(Slot::Y, t * dim * 4)?;
    let dp = g.scratch(Slot::PerPass, per_pass.0.len() * 4)?;
    let rp = g.scratch(Slot::Rows, n_logit * dim * 4)?;
    let lg = g.scratch(Slot::Logits, n_logit * vocab * 4)?;
    let part = g.scratch(Slot::AttPart, part_len * 4)?;
    g.scratch(Slot::X16, t * widest * 4)?;
    g.scratch(Slot::XScale, t * widest.div_ceil(32) * 4)?;
    g.scratch(Slot::W16, biggest_w * path.elem_bytes())?;
    let pp = params_on_device(g, &params)?;
    let bases = {
        let mut parts: Vec<(CUdeviceptr, &[f32])> = vec![(xp, i.x), (dp, &per_pass.0)];
        let bases = prepare_mirrors(g, gpu, d, seqs, &mut parts)?;
        parts.retain(|(_, p)| !p.is_empty());
        g.upload_many(&parts)?;
        bases
    };
    let pos0: Vec<usize> = seqs.iter().map(|s| s.cache.len()).collect();

    for (li, (l, m)) in d.layers.iter().zip(&mats).enumerate() {
        let p = &lp[li];
        let [wq, wk, wv, wo, wg, wu, wd] = *m;
        let (cos, sin) = (at(dp, rope_o[l.spec.rope].0), at(dp, rope_o[l.spec.rope].1));
        let (rope_dim, interleaved) = d.ropes[l.spec.rope];
        let half = rope_dim / 2;
        rms_norm(g, xp, at(pp, p.attn_norm), np, t, dim, d.eps)?;
        // One sequence: its new keys/values are written straight into its cache rows (no
        // copies); several: into the scratch rows, then copied per sequence.
        let direct = seqs.len() == 1;
        let (kn, vn) = if direct {
            let (kb, vb) = bases[0][li];
            (at(kb, pos0[0] * kv_row), at(vb, pos0[0] * kv_row))
        } else {
            (kn, vn)
        };
        let mut ready = None;
        gemm::linear(g, wq, np, t, qp, path, &mut ready)?;
        gemm::linear(g, wk, np, t, kn, path, &mut ready)?;
        gemm::linear(g, wv, np, t, vn, path, &mut ready)?;
        for (b, y, n) in [
            (p.q_bias, qp, q_row),
            (p.k_bias, kn, kv_row),
            (p.v_bias, vn, kv_row),
        ] {
            if let Some(b) = b {
                add_bias(g, y, at(pp, b), t, n)?;
            }
        }
        if let Some(w) = p.q_norm {
            head_norm(g, qp, at(pp, w), t, d.n_heads, hd, d.eps)?;
        }
        if let Some(w) = p.k_norm {
            head_norm(g, kn, at(pp, w), t, d.n_kv_heads, hd, d.eps)?;
        }
        rope(g, qp, cos, sin, t, d.n_heads, hd, half, interleaved)?;
        rope(g, kn, cos, sin, t, d.n_kv_heads, hd, half, interleaved)?;
        for (si, s) in seqs.iter().enumerate() {
            let (kb, vb) = bases[si][li];
            let dst = pos0[si] * kv_row;
            let bytes = s.len * kv_row * 4;
            if !direct {
                g.copy(at(kb, dst), at(kn, s.row * kv_row), bytes)?;
                g.copy(at(vb, dst), at(vn, s.row * kv_row), bytes)?;
            }
            let a = geom(d, s.len, pos0[si], l.spec.window);
            let a = AttentionGeom {
                shape: AttnShape {
                    scale: l.spec.scale,
                    ..a.shape
                },
                ..a
            };
            let (q, out) = (at(qp, s.row * q_row), at(ap, s.row * q_row));
            if s.len <= ops::SPLIT_ATTN_MAX_ROWS {
                let splits = ops::attention_splits(&a);
                ops::attention_split(g, q, kb, vb, out, part, &a, splits)?;
            } else {
                ops::attention(g, q, kb, vb, out, &a)?;
            }
        }
        let mut ready = None;
        gemm::linear(g, wo, ap, t, yp, path, &mut ready)?;
        if let Some(w) = p.post_attn_norm {
            rms_norm(g, yp, at(pp, w), yp, t, dim, d.eps)?;
        }
        add(g, xp, yp, t * dim)?;
        rms_norm(g, xp, at(pp, p.ffn_norm), np, t, dim, d.eps)?;
        let mut ready = None;
        gemm::linear(g, wg, np, t, gp, path, &mut ready)?;
        gemm::linear(g, wu, np, t, up, path, &mut ready)?;
        gated_act(g, gp, up, t * ffn, l.act)?;
        let mut ready = None;
        gemm::linear(g, wd, gp, t, yp, path, &mut ready)?;
        if let Some(w) = p.post_ffn_norm {
            rms_norm(g, yp, at(pp, w), yp, t, dim, d.eps)?;
        }
        add(g, xp, yp, t * dim)?;
    }
    if n_logit > 0 {
        ops::gather_rows(g, xp, at(dp, idx_o), rp, n_logit, dim)?;
        rms_norm(g, rp, at(pp, final_norm), rp, n_logit, dim, d.eps)?;
        let mut ready = None;
        gemm::linear(g, head, rp, n_logit, lg, path, &mut ready)?;
        if let Some(cap) = d.final_softcap {
            softcap(g, lg, n_logit * vocab, cap)?;
        }
    }
    if let Some(tm) = &timing {
        tm.launched(g)?;
    }
    if n_logit > 0 {
        g.download(logits, lg)?;
    } else {
        g.sync()?;
    }
    if let Some(tm) = timing {
        tm.report(g, t)?;
    }
    // Everything landed: the mirrors now hold the new rows.
    for (s, &p0) in seqs.iter_mut().zip(&pos0) {
        if let Some(m) = mirror(s.cache) {
            m.set_len(p0 + s.len);
        }
    }
    Ok(true)
}

/// The attention geometry of `t` queries after `pos0` cached positions (scale 1, no soft-cap:
/// the caller sets the layer's).
fn geom(d: &StackDesc, t: usize, pos0: usize, window: Option<usize>) -> AttentionGeom {
    AttentionGeom {
        t,
        pos0,
        shape: AttnShape {
            n_heads: d.n_heads,
            n_kv_heads: d.n_kv_heads,
            head_dim: d.head_dim,
            scale: 1.0,
            window,
            softcap: None,
        },
    }
}
