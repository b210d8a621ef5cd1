//! A model [`Plan`] on the device ([`oxinfer::backend::plan_run`]): the plan is lowered op by op
//! to what these kernels implement ([`lower`]; a plan with any other op is declined and runs on
//! the CPU: [`unsupported`] names the first such op), then the hidden state `[t, dim]` stays in
//! device memory for the whole pass; norms (pre and post), biases, QK-norms, RoPE (one table
//! per layer kind), attention over the uploaded cached keys plus the new ones, residual adds,
//! the gated MLP and the final soft-cap run as kernels, every matmul through [`gemm::linear`]
//! (activations quantized like the CPU's). Only the embedded rows, one packed parameter buffer
//! and the cached keys/values go up; the wanted logits come down, and each layer's new
//! keys/values come down on a second stream while later layers compute and are appended to the
//! sequences' caches as they land (the host-side cache append overlaps the device work).

use crate::gemm::{self, QuantPath};
use crate::gpu::{Gpu, Slot};
use crate::matrix::DeviceMatrix;
use crate::ops::{self, add, add_bias, gated_act, head_norm, rms_norm, rope, softcap};
use cudarc::driver::result;
use cudarc::driver::sys::{self, CUdeviceptr};
use oxinfer::backend::{device_weight, Backend, GateAct, Weight};
use oxinfer::plan::{AttnSpec, FfnBody, Layer, Mixer, Plan, PlanInput, ProjOp, SeqRows};

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

fn mat<'a>(w: &Weight<'a>) -> Option<&'a DeviceMatrix> {
    w.dev.downcast_ref::<DeviceMatrix>()
}

/// One decoder layer as the stack kernels run it: `x += post_attn_norm(o(attn(rope(
/// qk_norm(q/k/v(norm(x)) + bias)))))`, then `x += post_ffn_norm(down(act(gate(h)) · up(h)))`
/// with `h = ffn_norm(x)` (the optional parts only where the plan has them).
pub(crate) struct StackLayer<'a> {
    attn_norm: &'a [f32],
    q: Weight<'a>,
    k: Weight<'a>,
    v: Weight<'a>,
    o: Weight<'a>,
    q_bias: Option<&'a [f32]>,
    k_bias: Option<&'a [f32]>,
    v_bias: Option<&'a [f32]>,
    q_norm: Option<&'a [f32]>,
    k_norm: Option<&'a [f32]>,
    post_attn_norm: Option<&'a [f32]>,
    ffn_norm: &'a [f32],
    gate: Weight<'a>,
    up: Weight<'a>,
    down: Weight<'a>,
    post_ffn_norm: Option<&'a [f32]>,
    act: GateAct,
    spec: AttnSpec,
}

/// A plan lowered to the ops the stack kernels implement.
pub(crate) struct StackDesc<'a> {
    layers: Vec<StackLayer<'a>>,
    final_norm: &'a [f32],
    head: Weight<'a>,
    final_softcap: Option<f32>,
    pub(crate) dim: usize,
    eps: f32,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    /// Per RoPE of the plan: rotated dimensions per head, interleaved pairs.
    ropes: Vec<(usize, bool)>,
}

impl StackDesc<'_> {
    /// Width of a key/value row.
    pub(crate) fn kv_row(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Width of a query row.
    fn q_row(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Number of layers.
    pub(crate) fn n_layers(&self) -> usize {
        self.layers.len()
    }
}

/// The first op of `plan` the stack kernels do not implement, if any (nothing is uploaded).
pub(crate) fn unsupported(plan: &Plan) -> Option<&'static str> {
    if plan.ple.is_some() {
        return Some("per-layer embeddings");
    }
    let first = plan.layers.first()?;
    let shape = |l: &Layer| match &l.mixer {
        Mixer::Attention { op, .. } => {
            let p = op.parts();
            Some((p.n_heads, p.n_kv_heads, p.head_dim))
        }
        Mixer::Recurrent(_) => None,
    };
    let geometry = shape(first);
    let eps = first.mixer_norm.eps();
    for l in &plan.layers {
        let Mixer::Attention { op, spec } = &l.mixer else {
            return Some("recurrent mixer (Gated DeltaNet)");
        };
        let p = op.parts();
        let why = if p.output_gate {
            Some("attention output gate")
        } else if p.v_norm {
            Some("value norm")
        } else if p.k.is_none() || p.kv_source.is_some() {
            Some("KV sharing")
        } else if p.v.is_none() {
            Some("values = keys")
        } else if spec.softcap.is_some() {
            Some("attention soft-cap")
        } else if spec.rope >= plan.ropes.len() {
            Some("missing RoPE table")
        } else if !matches!(l.ffn.body, FfnBody::Mlp(_)) {
            Some("routed experts")
        } else if l.ffn.side_experts.is_some() {
            Some("experts beside the MLP")
        } else if l.ple.is_some() {
            Some("per-layer embeddings")
        } else if l.scalar.is_some() {
            Some("layer scalar")
        } else if shape(l) != geometry {
            Some("per-layer head geometry")
        } else {
            None
        };
        if why.is_some() {
            return why;
        }
        let FfnBody::Mlp(m) = l.ffn.body else {
            return Some("routed experts");
        };
        let m = m.parts();
        if [p.o, m.gate, m.up, m.down]
            .iter()
            .any(|w| w.bias().is_some())
        {
            return Some("bias on the output or MLP projections");
        }
        let norms = [
            Some(l.mixer_norm),
            l.mixer_post_norm,
            Some(l.ffn.norm),
            l.ffn.post_norm,
        ];
        let qk = [p.q_norm, p.k_norm];
        if norms.iter().chain(&qk).flatten().any(|n| n.eps() != eps) {
            return Some("norms with different eps");
        }
    }
    if plan.final_norm.eps() != eps {
        return Some("norms with different eps");
    }
    None
}

/// `plan` lowered for the stack kernels, uploading weights on first use; `None` when it has an
/// op they do not implement ([`unsupported`]) or a weight stays on the CPU.
pub(crate) fn lower<'a>(b: &dyn Backend, plan: &Plan<'a>) -> Option<StackDesc<'a>> {
    if unsupported(plan).is_some() {
        return None;
    }
    let w = |p: &'a dyn ProjOp| device_weight(b, p);
    let mut layers = Vec::with_capacity(plan.layers.len());
    let mut geometry = (0, 0, 0);
    for l in &plan.layers {
        let (Mixer::Attention { op, spec }, FfnBody::Mlp(m)) = (&l.mixer, l.ffn.body) else {
            return None;
        };
        let (a, m) = (op.parts(), m.parts());
        geometry = (a.n_heads, a.n_kv_heads, a.head_dim);
        let (k, v) = (a.k?, a.v?);
        layers.push(StackLayer {
            attn_norm: l.mixer_norm.gain(),
            q: w(a.q)?,
            k: w(k)?,
            v: w(v)?,
            o: w(a.o)?,
            q_bias: a.q.bias(),
            k_bias: k.bias(),
            v_bias: v.bias(),
            q_norm: a.q_norm.map(|n| n.gain()),
            k_norm: a.k_norm.map(|n| n.gain()),
            post_attn_norm: l.mixer_post_norm.map(|n| n.gain()),
            ffn_norm: l.ffn.norm.gain(),
            gate: w(m.gate)?,
            up: w(m.up)?,
            down: w(m.down)?,
            post_ffn_norm: l.ffn.post_norm.map(|n| n.gain()),
            act: m.act,
            spec: *spec,
        });
    }
    let (n_heads, n_kv_heads, head_dim) = geometry;
    Some(StackDesc {
        layers,
        final_norm: plan.final_norm.gain(),
        head: w(plan.head)?,
        final_softcap: plan.final_softcap,
        dim: plan.dim,
        eps: plan.final_norm.eps(),
        n_heads,
        n_kv_heads,
        head_dim,
        ropes: plan
            .ropes
            .iter()
            .map(|r| (r.dim(), r.interleaved()))
            .collect(),
    })
}

/// Whether the kernels handle this geometry.
pub(crate) fn supported(d: &StackDesc) -> bool {
    d.head_dim.is_multiple_of(32)
        && d.head_dim <= 256
        && d.n_kv_heads > 0
        && d.n_heads.is_multiple_of(d.n_kv_heads)
        && d.ropes
            .iter()
            .all(|&(dim, _)| dim.is_multiple_of(2) && dim <= d.head_dim)
}

/// Appends one layer's new keys/values (`[t, kv_row]`, every sequence stacked) to each
/// sequence's cache.
fn append(seqs: &mut [SeqRows<'_>], layer: usize, kv_row: usize, k: &[f32], v: &[f32]) {
    for s in seqs.iter_mut() {
        let rows = s.row * kv_row..(s.row + s.len) * kv_row;
        s.cache.append(layer, &k[rows.clone()], &v[rows]);
    }
}

/// Runs the lowered plan; `Ok(false)` when a weight is not a device matrix.
pub(crate) fn run(
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
    let (t, dim) = (i.t(), d.dim);
    let (q_row, kv_row, hd) = (d.q_row(), d.kv_row(), d.head_dim);
    let ffn = mats.first().map_or(0, |m| m[4].rows);
    let n_logit = i.logit_rows.len();
    let vocab = head.rows;

    let mut pack = Pack::default();
    let lp: Vec<LayerParams> = d
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
    let rope_o: Vec<(usize, usize)> = i
        .rope_tables
        .iter()
        .map(|r| (pack.push(&r.cos), pack.push(&r.sin)))
        .collect();
    if rope_o.len() != d.ropes.len() {
        return Ok(false);
    }
    let idx: Vec<i32> = i.logit_rows.iter().map(|&r| r as i32).collect();
    let n_layers = d.layers.len();
    // Where each (layer, sequence) with cached rows keeps them, followed by its new rows, in
    // the K/V buffers (in rows); all cached rows go up at once before the first layer.
    let mut regions = vec![vec![None; seqs.len()]; n_layers];
    let mut kv_rows = 0;
    for (li, reg) in regions.iter_mut().enumerate() {
        for (si, s) in seqs.iter().enumerate() {
            let n_past = s.cache.past(li).rows(kv_row);
            if n_past > 0 {
                reg[si] = Some((kv_rows, n_past));
                kv_rows += n_past + s.len;
            }
        }
    }
    let widest = [dim, ffn, q_row].into_iter().max().unwrap_or(dim);
    let biggest_w = mats
        .iter()
        .flat_map(|m| m.iter().map(|w| w.rows * w.cols))
        .chain([head.rows * head.cols])
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
    let kn = g.scratch(Slot::KNew, d.layers.len() * t * kv_row * 4)?;
    let vn = g.scratch(Slot::VNew, d.layers.len() * t * kv_row * 4)?;
    let kw = g.scratch(Slot::K, kv_rows * kv_row * 4)?;
    let vw = g.scratch(Slot::V, kv_rows * kv_row * 4)?;
    let gp = g.scratch(Slot::G, t * ffn * 4)?;
    let up = g.scratch(Slot::U, t * ffn * 4)?;
    let yp = g.scratch(Slot::Y, t * dim * 4)?;
    let pp = g.scratch(Slot::Params, pack.0.len() * 4)?;
    let ip = g.scratch(Slot::Idx, idx.len() * 4)?;
    let rp = g.scratch(Slot::Rows, n_logit * dim * 4)?;
    let lg = g.scratch(Slot::Logits, n_logit * vocab * 4)?;
    g.scratch(Slot::X16, t * widest * path.elem_bytes())?;
    g.scratch(Slot::W16, biggest_w * path.elem_bytes())?;
    g.upload(xp, i.x)?;
    g.upload(pp, &pack.0)?;
    g.upload(ip, &idx)?;
    if kv_rows > 0 {
        let mut parts: Vec<(CUdeviceptr, &[f32])> = Vec::new();
        for (li, reg) in regions.iter().enumerate() {
            for (si, r) in reg.iter().enumerate() {
                if let Some((off, _)) = *r {
                    let p = seqs[si].cache.past(li);
                    let k0 = p.k[0].len();
                    let o = off * kv_row;
                    parts.extend([
                        (at(kw, o), p.k[0]),
                        (at(kw, o + k0), p.k[1]),
                        (at(vw, o), p.v[0]),
                        (at(vw, o + k0), p.v[1]),
                    ]);
                }
            }
        }
        parts.retain(|(_, p)| !p.is_empty());
        g.upload_many(&parts)?;
    }
    // The new keys/values of every layer land here (keys then values per layer).
    let layer_kv = t * kv_row;
    g.reserve_landing(2 * n_layers * layer_kv * 4)?;
    let events: Vec<sys::CUevent> = g.events(2 * n_layers)?.to_vec();

    for (li, (l, m)) in d.layers.iter().zip(&mats).enumerate() {
        let p = &lp[li];
        let [wq, wk, wv, wo, wg, wu, wd] = *m;
        let (kl, vl) = (at(kn, li * t * kv_row), at(vn, li * t * kv_row));
        let (cos, sin) = (at(pp, rope_o[l.spec.rope].0), at(pp, rope_o[l.spec.rope].1));
        let (rope_dim, interleaved) = d.ropes[l.spec.rope];
        let half = rope_dim / 2;
        rms_norm(g, xp, at(pp, p.attn_norm), np, t, dim, d.eps)?;
        let mut ready = None;
        gemm::linear(g, wq, np, t, qp, path, &mut ready)?;
        gemm::linear(g, wk, np, t, kl, path, &mut ready)?;
        gemm::linear(g, wv, np, t, vl, path, &mut ready)?;
        for (b, y, n) in [
            (p.q_bias, qp, q_row),
            (p.k_bias, kl, kv_row),
            (p.v_bias, vl, kv_row),
        ] {
            if let Some(b) = b {
                add_bias(g, y, at(pp, b), t, n)?;
            }
        }
        if let Some(w) = p.q_norm {
            head_norm(g, qp, at(pp, w), t, d.n_heads, hd, d.eps)?;
        }
        if let Some(w) = p.k_norm {
            head_norm(g, kl, at(pp, w), t, d.n_kv_heads, hd, d.eps)?;
        }
        rope(g, qp, cos, sin, t, d.n_heads, hd, half, interleaved)?;
        rope(g, kl, cos, sin, t, d.n_kv_heads, hd, half, interleaved)?;
        // Keys/values of this layer are final: copy them down on the copy stream.
        let (ready_ev, copied_ev) = (events[2 * li], events[2 * li + 1]);
        g.download_behind(
            ready_ev,
            copied_ev,
            2 * li * layer_kv,
            &[(kl, layer_kv), (vl, layer_kv)],
        )?;
        for (si, s) in seqs.iter().enumerate() {
            let (kn_s, vn_s) = (at(kl, s.row * kv_row), at(vl, s.row * kv_row));
            let (ks, vs, n_past) = match regions[li][si] {
                None => (kn_s, vn_s, 0),
                Some((off, n_past)) => {
                    let (ks, vs) = (at(kw, off * kv_row), at(vw, off * kv_row));
                    let o = n_past * kv_row;
                    g.copy(at(ks, o), kn_s, s.len * kv_row * 4)?;
                    g.copy(at(vs, o), vn_s, s.len * kv_row * 4)?;
                    (ks, vs, n_past)
                }
            };
            let geom = oxinfer::backend::AttentionGeom {
                t: s.len,
                pos0: n_past,
                shape: oxinfer::backend::AttnShape {
                    n_heads: d.n_heads,
                    n_kv_heads: d.n_kv_heads,
                    head_dim: hd,
                    scale: l.spec.scale,
                    window: l.spec.window,
                    softcap: None,
                },
            };
            ops::attention(
                g,
                at(qp, s.row * q_row),
                ks,
                vs,
                at(ap, s.row * q_row),
                &geom,
            )?;
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
        ops::gather_rows(g, xp, ip, rp, n_logit, dim)?;
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
    // Hand each layer's keys/values over as they land (the device is still computing later
    // layers while the first ones are appended).
    for li in 0..n_layers {
        let kv = g.landed(events[2 * li + 1], 2 * li * layer_kv, 2 * layer_kv)?;
        let (k, v) = kv.split_at(layer_kv);
        append(seqs, li, kv_row, k, v);
    }
    if n_logit > 0 {
        g.download(logits, lg)?;
    }
    if let Some(tm) = timing {
        tm.report(g, t)?;
    }
    Ok(true)
}

/// `OXINFER_CUDA_PROFILE=1`: per stack call, the device time from the first upload to the last
/// kernel (CUDA events) against the host's wall time, on stderr.
struct Timing {
    wall: std::time::Instant,
    launch: std::cell::Cell<f64>,
    ev: [sys::CUevent; 2],
}

impl Timing {
    fn start(g: &Gpu) -> Result<Option<Self>, String> {
        if !std::env::var("OXINFER_CUDA_PROFILE").is_ok_and(|v| v == "1") {
            return Ok(None);
        }
        let mk = || {
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
                .map_err(|e| format!("{e:?}"))
        };
        let ev = [mk()?, mk()?];
        // SAFETY: live event and stream.
        unsafe { result::event::record(ev[0], g.stream) }.map_err(|e| format!("{e:?}"))?;
        Ok(Some(Timing {
            wall: std::time::Instant::now(),
            launch: std::cell::Cell::new(0.0),
            ev,
        }))
    }

    fn launched(&self, g: &Gpu) -> Result<(), String> {
        self.launch.set(self.wall.elapsed().as_secs_f64() * 1e3);
        // SAFETY: live event and stream.
        unsafe { result::event::record(self.ev[1], g.stream) }.map_err(|e| format!("{e:?}"))
    }

    fn report(self, g: &Gpu, t: usize) -> Result<(), String> {
        g.sync()?;
        // SAFETY: both events were recorded on the stream, which is idle now.
        let dev = unsafe { result::event::elapsed(self.ev[0], self.ev[1]) }
            .map_err(|e| format!("{e:?}"))?;
        eprintln!(
            "[cuda stack: t={t}, device {dev:.2} ms, host wall {:.2} ms, launches {:.2} ms]",
            self.wall.elapsed().as_secs_f64() * 1e3,
            self.launch.get()
        );
        // SAFETY: events created above, destroyed once.
        unsafe {
            let _ = result::event::destroy(self.ev[0]);
            let _ = result::event::destroy(self.ev[1]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::unsupported;

    /// The first op each tiny fixture's plan has that the stack kernels lack (`None`: the
    /// whole plan runs on the device). Needs no GPU.
    #[test]
    fn plans_are_declined_by_op() {
        let fixtures =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        for (name, want) in [
            ("llama-tiny-a", None),
            ("qwen2-tiny", None),
            ("qwen3-tiny", None),
            ("gemma3-tiny-b", None),
            ("gemma4-tiny-dense", Some("per-layer embeddings")),
            ("gemma4-tiny-moe", Some("value norm")),
            ("qwen35-tiny", Some("recurrent mixer (Gated DeltaNet)")),
        ] {
            let model = oxinfer::Model::load(fixtures.join(name)).expect("fixture");
            assert_eq!(unsupported(&model.lm().plan()), want, "{name}");
        }
    }
}
