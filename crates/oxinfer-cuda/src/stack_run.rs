//! One pass of a lowered plan ([`crate::stack`]) with the hidden state `[t, dim]` and every
//! sequence's keys/values resident on the device: norms (pre and post), biases, QK-norms, RoPE
//! (one table per layer kind), attention over the sequence's device KV cache
//! ([`DeviceKvCache`], attached to its [`KvCache`]), residual adds, the gated MLP and the final
//! soft-cap run as kernels, every matmul through [`gemm::linear`] (activations quantized like
//! the CPU's; quantized GEMV kernels for decode). Per pass only the embedded rows and the RoPE
//! rows go up (plus, when they changed, the packed norm gains and biases, and any cached rows a
//! CPU pass wrote since the last device pass); only the wanted logits come down.

use crate::decode_attention;
use crate::gemm::Ready;
use crate::gemm::{self, QuantPath};
use crate::gpu::{Gpu, HostSrc, Slot};
use crate::kernels::GEMV_MAX_ROWS;
use crate::kv::{DeviceKvCache, KvLayout};
use crate::matrix::DeviceMatrix;
use crate::ops::{self, add, gated_act, rms_norm, softcap, Residual};
use crate::stack::StackDesc;
use crate::stack_params::{self, LayerParams, Pack, StackParams};
use crate::stack_switches::{
    combine_quantizes, graphs_enabled, norm_slices_always, post_norm_fused, residual_in_gemv,
    skipped, step_host_old, Skip,
};
use crate::timing::Timing;
use cudarc::driver::sys::CUdeviceptr;
use oxinfer::backend::{AttentionGeom, AttnShape, Weight};
use oxinfer::plan::{KvCache, KvType, PlanInput, RowScore, SeqRows};
use oxinfer_kernels::attention::KvView;
use std::sync::{Arc, Mutex};

/// Byte offset of f32 element `i`.
fn at(p: CUdeviceptr, i: usize) -> CUdeviceptr {
    p + (i * 4) as CUdeviceptr
}

fn mat<'a>(w: &Weight<'a>) -> Option<&'a DeviceMatrix> {
    w.dev.downcast_ref::<DeviceMatrix>()
}

/// The cache's device mirror when it is this backend's [`DeviceKvCache`].
fn mirror(c: &mut KvCache) -> Option<&mut DeviceKvCache> {
    c.device_mut()?.as_any_mut().downcast_mut::<DeviceKvCache>()
}

/// Whether every cache can run on this backend: no mirror yet, or one of this backend with
/// this geometry and element type (a mirror of another backend makes the pass decline; the
/// CPU then reads it).
fn mirrors_fit(
    seqs: &mut [SeqRows<'_>],
    gpu: &Arc<Mutex<Gpu>>,
    layers: usize,
    kv_row: usize,
    elem: KvType,
) -> bool {
    seqs.iter_mut().all(|s| {
        s.cache.device().is_none()
            || mirror(s.cache).is_some_and(|m| m.fits(gpu, layers, kv_row, elem))
    })
}

/// How every sequence's cache stores its rows, when they agree and the device holds them.
fn pass_layout(seqs: &[SeqRows<'_>], head_dim: usize) -> Option<KvLayout> {
    let types = seqs.first()?.cache.types();
    if seqs.iter().any(|s| s.cache.types() != types) {
        return None;
    }
    KvLayout::of(types, head_dim)
}

/// Host cache rows as an upload source (the device keeps the host's bytes).
fn host_src(v: KvView<'_>) -> HostSrc<'_> {
    match v {
        KvView::F32(x) => HostSrc::F32(x),
        KvView::Packed { data, .. } => HostSrc::Bytes(data),
    }
}

/// Per layer, the device addresses of one sequence's keys and values (row 0).
type LayerBases = Vec<(CUdeviceptr, CUdeviceptr)>;

/// The caches' table the kernels read (`ops::KvRows`): per layer, per sequence, the addresses
/// of row 0 of its keys and of its values as u64, in the per-pass f32 values' bits.
fn kv_table(bases: &[LayerBases]) -> Vec<f32> {
    let layers = bases.first().map_or(0, Vec::len);
    let mut table = Vec::with_capacity(layers * bases.len() * 4);
    for li in 0..layers {
        for seq in bases {
            let (k, v) = seq[li];
            table.extend(ops::KvRows::entry(k, v).map(f32::from_bits));
        }
    }
    table
}

/// Gives every sequence's cache a device mirror with room for its new rows, queues the upload
/// of the rows only its host holds (written by CPU passes since the last device pass) into
/// `parts`, and returns each sequence's layer bases. The host rows of a sliding layer that
/// dropped older positions start later; those positions are outside every later query's
/// window.
fn prepare_mirrors<'c>(
    g: &Gpu,
    gpu: &Arc<Mutex<Gpu>>,
    d: &StackDesc,
    elem: KvType,
    seqs: &'c mut [SeqRows<'_>],
    parts: &mut Vec<(CUdeviceptr, HostSrc<'c>)>,
) -> Result<Vec<LayerBases>, String> {
    let (layers, kv_row) = (d.n_layers(), d.kv_row());
    let mut bases = Vec::with_capacity(seqs.len());
    let mut dev_lens = Vec::with_capacity(seqs.len());
    for s in seqs.iter_mut() {
        if s.cache.device().is_none() {
            let m = DeviceKvCache::new(gpu.clone(), layers, kv_row, s.cache.capacity(), elem);
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
        let row_bytes = elem.row_bytes(kv_row);
        for (li, &(kb, vb)) in b.iter().enumerate() {
            let past = c.past_views(li);
            let first = host_len - past.rows(kv_row);
            let from = dev_len.max(first);
            // Rows of the two pieces still to skip, and the device row the next one goes to.
            let (mut skip, mut row) = (from - first, from);
            for (k, v) in past.k.into_iter().zip(past.v) {
                let n = k.rows(kv_row);
                let take = skip.min(n);
                skip -= take;
                let (k, v) = (
                    k.split_at_row(take, kv_row).1,
                    v.split_at_row(take, kv_row).1,
                );
                let off = (row * row_bytes) as CUdeviceptr;
                parts.push((kb + off, host_src(k)));
                parts.push((vb + off, host_src(v)));
                row += n - take;
            }
        }
    }
    Ok(bases)
}

/// The device address of the packed norm gains and biases and where each lies there
/// ([`stack_params`]). With `OXINFER_CUDA_STEP_HOST=new`, packed and uploaded only when the
/// previous pass's were another model's (or their slot was reallocated): a decode step of the
/// same model skips the packing and the comparison (for a 7B's 1.3 MB, about 0.3 ms of host time
/// a step, the GPU idle meanwhile). By default ([`step_host_old`]) packed every pass and
/// uploaded when they differ from the last upload.
fn params_on_device(g: &mut Gpu, d: &StackDesc) -> Result<(CUdeviceptr, StackParams), String> {
    let head_id = mat(&d.head).map_or(0, |h| h.id);
    if step_host_old() {
        let (pack, params) = stack_params::pack(d);
        let (p, fresh) = g.scratch_fresh(Slot::Params, params.bytes)?;
        if fresh || g.params_host_old != pack.0 {
            g.upload(p, &pack.0)?;
            g.params_host_old.clone_from(&pack.0);
        }
        g.params = None;
        return Ok((p, params));
    }
    let key = stack_params::key(d, head_id);
    if let Some((_, kept)) = g.params.as_ref().filter(|(k, _)| *k == key) {
        let kept = kept.clone();
        let (p, fresh) = g.scratch_fresh(Slot::Params, kept.bytes)?;
        if !fresh {
            return Ok((p, kept));
        }
    }
    let (pack, params) = stack_params::pack(d);
    let (p, _) = g.scratch_fresh(Slot::Params, params.bytes)?;
    g.upload(p, &pack.0)?;
    g.params = Some((key, params.clone()));
    Ok((p, params))
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
    out: Out<'_>,
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
    let Some(layout) = pass_layout(seqs, d.head_dim) else {
        return Ok(false);
    };
    let elem = layout.elem;
    if i.rope_tables.len() != d.ropes.len()
        || !mirrors_fit(seqs, gpu, d.n_layers(), d.kv_row(), elem)
    {
        return Ok(false);
    }
    let (t, dim) = (i.t(), d.dim);
    let (q_row, kv_row) = (d.q_row(), d.kv_row());
    let ffn = mats.first().map_or(0, |m| m[4].rows);
    let n_logit = i.logit_rows.len();
    let vocab = head.rows;

    let pos0: Vec<usize> = seqs.iter().map(|s| s.cache.len()).collect();
    // Per pass: RoPE rows of every table, the logit row indices and every row's position (as
    // i32 bits): the values that change between decode steps, read by the kernels.
    let mut per_pass = Pack::default();
    let rope_o: Vec<(usize, usize)> = i
        .rope_tables
        .iter()
        .map(|r| (per_pass.push(&r.cos), per_pass.push(&r.sin)))
        .collect();
    let bits = |v: &mut dyn Iterator<Item = usize>| -> Vec<f32> {
        v.map(|r| f32::from_bits(r as u32)).collect()
    };
    let idx_o = per_pass.push(&bits(&mut i.logit_rows.iter().copied()));
    let mut row_pos = vec![0usize; t];
    for (s, &p) in seqs.iter().zip(&pos0) {
        for (k, r) in row_pos[s.row..s.row + s.len].iter_mut().enumerate() {
            *r = p + k;
        }
    }
    let pos_o = per_pass.push(&bits(&mut row_pos.into_iter()));
    // Each row's sequence, and per layer and sequence the addresses of row 0 of its keys and
    // values (two u64, filled in once the mirrors are ready).
    let mut row_seq = vec![0usize; t];
    for (si, s) in seqs.iter().enumerate() {
        row_seq[s.row..s.row + s.len].fill(si);
    }
    let seq_o = per_pass.push(&bits(&mut row_seq.into_iter()));
    let kv_o = per_pass.push(&vec![0.0; d.n_layers() * seqs.len() * 4]);
    let targets_o = match &out {
        Out::Scores { targets, .. } => {
            Some(per_pass.push(&bits(&mut targets.iter().map(|&t| t as usize))))
        }
        Out::Logits(_) => None,
    };
    let widest = [dim, ffn, q_row].into_iter().max().unwrap_or(dim);
    // The largest weight decoded into scratch space: only products that are not GEMVs decode
    // (the head's product has one row per wanted logit row, usually a GEMV: sizing for the
    // 152k-row head of a 7B would hold 1.1 GB for nothing).
    let biggest_w = mats
        .iter()
        .flatten()
        .map(|&w| (w, t))
        .chain([(head, n_logit)])
        .filter(|&(w, rows)| !gemm::uses_gemv(w, rows))
        .map(|(w, _)| w.rows * w.cols)
        .max()
        .unwrap_or(0);
    // Partials of the split decode attention: for all rows at once when every sequence's rows
    // go through it, else the most any one sequence needs.
    let max_keys = seqs
        .iter()
        .map(|s| s.cache.len() + s.len)
        .max()
        .unwrap_or(0);
    let all_split = seqs.iter().all(|s| s.len <= ops::SPLIT_ATTN_MAX_ROWS);
    let shape = geom(d, t, 0, None).shape;
    let part_len = if all_split {
        ops::attention_part_len(
            t,
            &shape,
            ops::split_count(t, max_keys, &shape, layout.elem),
        )
    } else {
        seqs.iter()
            .filter(|s| s.len <= ops::SPLIT_ATTN_MAX_ROWS)
            .map(|s| {
                let a = geom(d, s.len, s.cache.len(), None);
                ops::attention_part_len(s.len, &shape, ops::attention_splits(&a, layout.elem))
            })
            .max()
            .unwrap_or(0)
    };

    g.bind()?;
    let timing = Timing::start(g)?;
    // Every scratch buffer at its final size first (growing one later would free memory that
    // queued kernels still read).
    let bufs = Bufs {
        x: g.scratch(Slot::X, t * dim * 4)?,
        norm: g.scratch(Slot::Norm, t * dim * 4)?,
        q: g.scratch(Slot::Q, t * q_row * 4)?,
        att: g.scratch(Slot::Att, t * q_row * 4)?,
        k_new: g.scratch(Slot::KNew, t * kv_row * 4)?,
        v_new: g.scratch(Slot::VNew, t * kv_row * 4)?,
        gate: g.scratch(Slot::G, t * ffn * 4)?,
        up: g.scratch(Slot::U, t * ffn * 4)?,
        y: g.scratch(Slot::Y, t * dim * 4)?,
        per_pass: g.scratch(Slot::PerPass, per_pass.0.len() * 4)?,
        rows: g.scratch(Slot::Rows, n_logit * dim * 4)?,
        logits: g.scratch(Slot::Logits, n_logit * vocab * 4)?,
        part: g.scratch(Slot::AttPart, part_len * 4)?,
        params: 0,
    };
    g.scratch(Slot::X16, t * widest * 4)?;
    g.scratch(Slot::XScale, ops::int8_side_bytes(t * widest, 32))?;
    g.scratch(Slot::W16, biggest_w * path.elem_bytes())?;
    let scores_dev = match targets_o {
        Some(_) => g.scratch(Slot::Scores, n_logit * 16)?,
        None => 0,
    };
    let (params, packed) = params_on_device(g, d)?;
    let bufs = Bufs { params, ..bufs };
    let bases = {
        let mut parts: Vec<(CUdeviceptr, HostSrc)> = vec![(bufs.x, HostSrc::F32(i.x))];
        let bases = prepare_mirrors(g, gpu, d, elem, seqs, &mut parts)?;
        let table = kv_table(&bases);
        per_pass.0[kv_o..kv_o + table.len()].copy_from_slice(&table);
        parts.push((bufs.per_pass, HostSrc::F32(&per_pass.0)));
        parts.retain(|(_, p)| !p.is_empty());
        // With the new preparation queued only: the pass's kernels come after the copies on
        // the stream.
        if step_host_old() {
            g.upload_many(&parts)?;
        } else {
            g.upload_many_queued(&parts)?;
        }
        bases
    };
    let pass = Pass {
        d,
        mats: &mats,
        head,
        lp: &packed.layers,
        final_norm: packed.final_norm,
        rope_o: &rope_o,
        idx_o,
        pos_o,
        seq_o,
        kv_o,
        max_keys,
        all_split,
        layout,
        bases: &bases,
        pos0: &pos0,
        t,
        n_logit,
        path,
    };
    let rows: Vec<(usize, usize)> = seqs.iter().map(|s| (s.row, s.len)).collect();
    // A decode step whose every product is a GEMV is recorded and run as a CUDA graph.
    let graph = graphs_enabled()
        && mats
            .iter()
            .flatten()
            .chain([&head])
            .all(|w| gemm::uses_gemv(w, t));
    if graph {
        g.start_recording();
    }
    match queue_pass(g, &pass, &bufs, &rows) {
        Ok(()) if graph => g.finish_recording()?,
        Ok(()) => {}
        Err(e) => {
            g.discard_recording();
            return Err(e);
        }
    }
    if let Some(tm) = &timing {
        tm.launched(g)?;
    }
    match (out, targets_o) {
        (Out::Scores { scores, .. }, Some(o)) if n_logit > 0 => {
            let t_dev = at(bufs.per_pass, o);
            ops::logit_scores(g, bufs.logits, n_logit, vocab, t_dev, scores_dev)?;
            let mut pairs = vec![0f64; 2 * n_logit];
            g.download(&mut pairs, scores_dev)?;
            for (s, p) in scores.iter_mut().zip(pairs.chunks_exact(2)) {
                *s = RowScore {
                    logp: p[0],
                    argmax: p[1] as u32,
                };
            }
        }
        (Out::Logits(logits), _) if n_logit > 0 => g.download(logits, bufs.logits)?,
        _ => g.sync()?,
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

/// What a pass returns: the wanted logit rows (`[n, vocab]`), or each of them scored against a
/// target token on the device (`targets[i]` for the i-th row).
pub(crate) enum Out<'a> {
    Logits(&'a mut [f32]),
    Scores {
        targets: &'a [u32],
        scores: &'a mut [RowScore],
    },
}

/// The scratch buffers of one pass (device addresses).
struct Bufs {
    x: CUdeviceptr,
    norm: CUdeviceptr,
    q: CUdeviceptr,
    att: CUdeviceptr,
    k_new: CUdeviceptr,
    v_new: CUdeviceptr,
    gate: CUdeviceptr,
    up: CUdeviceptr,
    y: CUdeviceptr,
    per_pass: CUdeviceptr,
    rows: CUdeviceptr,
    logits: CUdeviceptr,
    part: CUdeviceptr,
    params: CUdeviceptr,
}

/// Everything [`queue_pass`] reads besides the buffers.
struct Pass<'p, 'a> {
    d: &'p StackDesc<'a>,
    mats: &'p [[&'p DeviceMatrix; 7]],
    head: &'p DeviceMatrix,
    lp: &'p [LayerParams],
    final_norm: usize,
    rope_o: &'p [(usize, usize)],
    idx_o: usize,
    pos_o: usize,
    /// Offsets in the per-pass values of each row's sequence index and of the caches' table
    /// (`ops::KvRows`, `[layers][sequences]` pairs of u64).
    seq_o: usize,
    kv_o: usize,
    /// The most positions any sequence's rows see.
    max_keys: usize,
    /// Whether every sequence's attention runs in the split kernel (at most
    /// `ops::SPLIT_ATTN_MAX_ROWS` rows each), all rows in one launch per layer.
    all_split: bool,
    bases: &'p [LayerBases],
    /// How every sequence's device cache stores its rows.
    layout: KvLayout,
    pos0: &'p [usize],
    t: usize,
    n_logit: usize,
    path: QuantPath,
}

/// The residual add (when `res` is given) and RMSNorm of `x` into `y`, quantizing `y` for `w`'s
/// product in the same kernel when that is an int8 GEMV; returns what `gemm::linear` needs to
/// know of the prepared input. With `skip` ([`Skip`]) no kernel runs.
#[allow(clippy::too_many_arguments)]
fn add_norm_for(
    g: &mut Gpu,
    x: CUdeviceptr,
    res: Option<Residual>,
    gain: CUdeviceptr,
    y: CUdeviceptr,
    rows: usize,
    dim: usize,
    eps: f32,
    w: &DeviceMatrix,
    path: QuantPath,
    skip: bool,
) -> Result<Ready, String> {
    let (out, ready) = match gemm::int8_layout(w, rows) {
        Some(layout) if dim.is_multiple_of(layout.block) => {
            let (out, ready) = gemm::int8_input(g, y, rows, dim, layout, path)?;
            (Some(out), ready)
        }
        _ => (None, None),
    };
    // Int8 blocks of 32 are quantized from registers by the one-block kernel; the sliced one
    // (which reads nothing back) is for blocks of 256 and plain norms.
    let blocks_of_32 = out.is_some_and(|o| o.layout.block == 32) && !norm_slices_always();
    if skip {
        return Ok(ready);
    }
    if res.is_none() && x != y && rows <= GEMV_MAX_ROWS && dim <= ops::RMS_MAX_DIM && !blocks_of_32
    {
        ops::rms_norm_q8_slices(g, x, gain, y, out, rows, dim, eps)?;
    } else {
        ops::add_rms_norm_q8(g, x, res, gain, y, out, rows, dim, eps)?;
    }
    Ok(ready)
}

/// `y`'s rows as the residual of the next norm, post-normalized with gain `post` when given:
/// by the next norm's kernel when [`post_norm_fused`], else here in place.
fn post_normed(
    g: &Gpu,
    y: CUdeviceptr,
    post: Option<CUdeviceptr>,
    rows: usize,
    dim: usize,
    eps: f32,
) -> Result<Residual, String> {
    match post {
        Some(w) if !post_norm_fused() => {
            rms_norm(g, y, w, y, rows, dim, eps)?;
            Ok(Residual {
                rows: y,
                norm: None,
            })
        }
        norm => Ok(Residual { rows: y, norm }),
    }
}

/// Queues every layer and the head of one pass (the inputs already uploaded).
fn queue_pass(g: &mut Gpu, p: &Pass, b: &Bufs, rows: &[(usize, usize)]) -> Result<(), String> {
    let (d, t, path) = (p.d, p.t, p.path);
    let (dim, q_row, hd) = (d.dim, d.q_row(), d.head_dim);
    let at_p = |o: usize| at(b.params, o);
    let opt_p = |o: Option<usize>| o.map(at_p);
    let rpos = at(b.per_pass, p.pos_o);
    // The last block's output, added to the residual stream by the next norm (unless the
    // block's last GEMV added it already).
    let mut pending: Option<Residual> = None;
    let fold_residual = residual_in_gemv();
    // Every sequence's attention is the split kernel, whose merge can quantize its output.
    let all_split = p.all_split;
    // Every sequence brings one row (decode): the fused decode attention may run.
    let one_row_each = rows.iter().all(|&(_, len)| len == 1);
    let skip = if one_row_each {
        skipped()
    } else {
        Skip::default()
    };
    let add_norm = |g: &mut Gpu, x, res: Option<Residual>, gain, y, w| {
        let skip = skip.norm && res.is_none();
        add_norm_for(g, x, res, gain, y, t, dim, d.eps, w, path, skip)
    };
    for (li, (l, m)) in d.layers.iter().zip(p.mats).enumerate() {
        let lp = &p.lp[li];
        let [wq, wk, wv, wo, wg, wu, wd] = *m;
        let (cos_o, sin_o) = p.rope_o[l.spec.rope];
        let (rope_dim, interleaved) = d.ropes[l.spec.rope];
        let (x, np) = (b.x, b.norm);
        let attn_norm = at_p(lp.attn_norm);
        let mut ready = add_norm(g, x, pending.take(), attn_norm, np, wq)?;
        let qkv = [(wq, b.q), (wk, b.k_new), (wv, b.v_new)];
        gemm::linear_group(g, &qkv, np, t, path, &mut ready)?;
        // The output projection's int8 input, written by the attention's merge.
        let mut o_ready = None;
        let o_quant = match gemm::int8_layout(wo, t) {
            Some(layout)
                if all_split
                    && combine_quantizes()
                    && ops::split_attention_quantizes(d.n_heads, hd, layout.block) =>
            {
                let (out, r) = gemm::int8_input(g, b.att, t, q_row, layout, path)?;
                o_ready = r;
                Some(out)
            }
            _ => None,
        };
        // This layer's cache of every row's sequence, read by the kernels on the device.
        let kv = ops::KvRows {
            table: at(b.per_pass, p.kv_o + li * p.bases.len() * 4),
            rseq: at(b.per_pass, p.seq_o),
            layout: p.layout,
        };
        let post = ops::QkvPost {
            q_bias: opt_p(lp.q_bias),
            k_bias: opt_p(lp.k_bias),
            v_bias: opt_p(lp.v_bias),
            q_norm: opt_p(lp.q_norm),
            k_norm: opt_p(lp.k_norm),
            cos: at(b.per_pass, cos_o),
            sin: at(b.per_pass, sin_o),
            half: rope_dim / 2,
            interleaved,
            kv,
            pos: rpos,
            eps: d.eps,
        };
        let heads = (d.n_heads, d.n_kv_heads, hd);
        let shape = AttnShape {
            scale: l.spec.scale,
            ..geom(d, t, 0, l.spec.window).shape
        };
        let splits = ops::split_count(t, p.max_keys, &shape, p.layout.elem);
        let block = o_quant.map(|o| o.layout.block);
        let fused = one_row_each
            .then(|| decode_attention::fused_layout(&shape, p.layout.elem, block, splits))
            .flatten();
        match fused {
            Some(_) if skip.attention => {}
            // Post-processing, cache append, attention, merge and int8 in one kernel.
            Some(lay) => decode_attention::decode_attention(
                g, b.q, b.k_new, b.v_new, &post, b.att, o_quant, t, &shape, splits, lay,
            )?,
            None => {
                // Every row of every sequence in one kernel.
                ops::qkv_post(g, b.q, b.k_new, b.v_new, &post, 0, t, heads)?;
                attend(g, p, b, kv, rows, li, shape, splits, o_quant)?;
            }
        }
        let res = if fold_residual && lp.post_attn_norm.is_none() {
            gemm::linear_add(g, wo, b.att, t, x, b.y, path, &mut o_ready)?;
            None
        } else {
            gemm::linear(g, wo, b.att, t, b.y, path, &mut o_ready)?;
            let post = opt_p(lp.post_attn_norm);
            Some(post_normed(g, b.y, post, t, dim, d.eps)?)
        };
        let ffn_norm = at_p(lp.ffn_norm);
        let mut ready = add_norm(g, x, res, ffn_norm, np, wg)?;
        gemm::linear_group(g, &[(wg, b.gate), (wu, b.up)], np, t, path, &mut ready)?;
        let n = t * wg.rows;
        let mut ready = match gemm::int8_layout(wd, t) {
            Some(layout) if wg.rows.is_multiple_of(layout.block) => {
                let (out, ready) = gemm::int8_input(g, b.gate, t, wg.rows, layout, path)?;
                if !skip.act {
                    ops::gated_act_q8(g, b.gate, b.up, out, n, wg.rows, l.act)?;
                }
                ready
            }
            _ => {
                gated_act(g, b.gate, b.up, n, l.act)?;
                None
            }
        };
        if fold_residual && lp.post_ffn_norm.is_none() {
            gemm::linear_add(g, wd, b.gate, t, x, b.y, path, &mut ready)?;
        } else {
            gemm::linear(g, wd, b.gate, t, b.y, path, &mut ready)?;
            let post = opt_p(lp.post_ffn_norm);
            pending = Some(post_normed(g, b.y, post, t, dim, d.eps)?);
        }
    }
    if let Some(y) = pending {
        if let Some(w) = y.norm {
            rms_norm(g, y.rows, w, y.rows, t, dim, d.eps)?;
        }
        add(g, b.x, y.rows, t * dim)?;
    }
    if p.n_logit > 0 {
        let n = p.n_logit;
        ops::gather_rows(g, b.x, at(b.per_pass, p.idx_o), b.rows, n, dim)?;
        let gain = at_p(p.final_norm);
        // Normalized into `norm` (free by now): out of place, so decode takes the sliced norm.
        let mut ready = add_norm_for(
            g, b.rows, None, gain, b.norm, n, dim, d.eps, p.head, path, false,
        )?;
        gemm::linear(g, p.head, b.norm, n, b.logits, path, &mut ready)?;
        if let Some(cap) = d.final_softcap {
            softcap(g, b.logits, n * p.head.rows, cap)?;
        }
    }
    Ok(())
}

/// Layer `li`'s attention of the pass's rows (their queries post-processed, their keys and
/// values in the caches) into `b.att`: every row in one split attention when every sequence
/// takes it (its merge quantizing with `o_quant`), else per sequence the split attention or,
/// for a long run of new rows, the prompt attention.
#[allow(clippy::too_many_arguments)]
fn attend(
    g: &Gpu,
    p: &Pass,
    b: &Bufs,
    kv: ops::KvRows,
    rows: &[(usize, usize)],
    li: usize,
    shape: AttnShape,
    splits: usize,
    o_quant: Option<ops::Int8Out>,
) -> Result<(), String> {
    let (t, q_row) = (p.t, p.d.q_row());
    let rpos = at(b.per_pass, p.pos_o);
    if p.all_split {
        // Batched decode (or one sequence's few rows): every row in one split attention,
        // each row reading its own sequence's cache.
        let a = AttentionGeom { t, pos0: 0, shape };
        return ops::attention_split(g, b.q, kv, b.att, b.part, rpos, &a, splits, o_quant);
    }
    for (si, &(row, len)) in rows.iter().enumerate() {
        let a = AttentionGeom {
            t: len,
            pos0: p.pos0[si],
            shape,
        };
        let (q, out) = (at(b.q, row * q_row), at(b.att, row * q_row));
        if len <= ops::SPLIT_ATTN_MAX_ROWS {
            let (rp, kv) = (at(rpos, row), kv.at_row(row));
            let splits = ops::attention_splits(&a, p.layout.elem);
            ops::attention_split(g, q, kv, out, b.part, rp, &a, splits, None)?;
        } else {
            let (kb, vb) = p.bases[si][li];
            let kv = (kb, vb, p.layout);
            ops::attention(g, q, kv, out, &a, p.path != QuantPath::Exact)?;
        }
    }
    Ok(())
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
