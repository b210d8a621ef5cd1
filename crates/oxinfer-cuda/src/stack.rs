//! The decoder stack on the device ([`oxinfer::backend::stack`]): the hidden state `[t, dim]`
//! stays in device memory for the whole pass; norms (pre and post), biases, QK-norms, RoPE
//! (one table per layer kind), attention over the uploaded cached keys plus the new ones,
//! residual adds, the gated MLP and the final soft-cap run as kernels, every matmul through
//! [`gemm::linear`] (activations quantized like the CPU's). Only the embedded rows, one packed
//! parameter buffer and the cached keys/values go up; the wanted logits come down, and each
//! layer's new keys/values come down on a second stream while later layers compute and are
//! handed to the [`oxinfer::backend::stack::KvStore`] as they land (the host-side cache append
//! overlaps the device work).

use crate::gemm::{self, QuantPath};
use crate::gpu::{Gpu, Slot};
use crate::matrix::DeviceMatrix;
use crate::ops::{self, add, add_bias, gated_act, head_norm, rms_norm, rope, softcap};
use cudarc::driver::result;
use cudarc::driver::sys::{self, CUdeviceptr};
use oxinfer::backend::stack::{StackDesc, StackInput, StackOutput};
use oxinfer::backend::Weight;

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

/// Whether the kernels handle this geometry.
pub(crate) fn supported(d: &StackDesc) -> bool {
    d.head_dim.is_multiple_of(32)
        && d.head_dim <= 256
        && d.n_kv_heads > 0
        && d.n_heads.is_multiple_of(d.n_kv_heads)
        && d.rope_dim.is_multiple_of(2)
        && d.rope_dim <= d.head_dim
}

/// Runs the stack; `Ok(false)` when a weight is not a device matrix.
pub(crate) fn run(
    g: &mut Gpu,
    path: QuantPath,
    d: &StackDesc,
    i: &StackInput,
    out: &mut StackOutput,
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
    let (t, dim) = (i.t, d.dim);
    let (q_row, kv_row, hd) = (d.q_row(), d.kv_row(), d.head_dim);
    let half = d.rope_dim / 2;
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
        .ropes
        .iter()
        .map(|r| (pack.push(r.cos), pack.push(r.sin)))
        .collect();
    if d.layers.iter().any(|l| l.rope >= rope_o.len()) {
        return Ok(false);
    }
    let idx: Vec<i32> = i.logit_rows.iter().map(|&r| r as i32).collect();
    let n_layers = d.layers.len();
    // Where each (layer, sequence) with cached rows keeps them, followed by its new rows, in
    // the K/V buffers (in rows); all cached rows go up at once before the first layer.
    let mut regions = vec![vec![None; i.seqs.len()]; n_layers];
    let mut kv_rows = 0;
    for (li, reg) in regions.iter_mut().enumerate() {
        for (si, s) in i.seqs.iter().enumerate() {
            let n_past = out.kv.past(si, li).rows(kv_row);
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
                    let p = out.kv.past(si, li);
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
        let (cos, sin) = (at(pp, rope_o[l.rope].0), at(pp, rope_o[l.rope].1));
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
        rope(g, qp, cos, sin, t, d.n_heads, hd, half, d.rope_interleaved)?;
        rope(
            g,
            kl,
            cos,
            sin,
            t,
            d.n_kv_heads,
            hd,
            half,
            d.rope_interleaved,
        )?;
        // Keys/values of this layer are final: copy them down on the copy stream.
        let (ready_ev, copied_ev) = (events[2 * li], events[2 * li + 1]);
        g.download_behind(
            ready_ev,
            copied_ev,
            2 * li * layer_kv,
            &[(kl, layer_kv), (vl, layer_kv)],
        )?;
        for (si, s) in i.seqs.iter().enumerate() {
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
                n_heads: d.n_heads,
                n_kv_heads: d.n_kv_heads,
                head_dim: hd,
                scale: d.scale,
                window: l.window,
                softcap: None,
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
        gated_act(g, gp, up, t * ffn, d.act)?;
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
        out.kv.append(li, k, v);
    }
    if n_logit > 0 {
        g.download(&mut out.logits, lg)?;
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
