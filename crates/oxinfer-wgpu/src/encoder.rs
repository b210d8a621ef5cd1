//! Whole encoder passes ([`EncoderPlan`]) on the device: the hidden state of every sequence of a
//! batch goes up once, every layer runs as kernels recorded into one [`Gpu::run`] (submitted
//! every 64 dispatches), the last hidden states come down.
//!
//! The products are the matmul of `matrix.rs` on each weight in its storage format (F32, F16,
//! BF16 exactly; a format the kernels do not decode is dequantized to an f32 copy first, as the
//! CPU dequantizes it), uploaded on first use into the weight's plan slot
//! ([`EncoderLinear::plan_slot`]). Per layer: q, k and v into one `[T, 3 dim]` region, their
//! biases, rotary positions, attention within each sequence (`enc_attention`), the output
//! projection, the residual LayerNorm with the product's bias, the MLP (bias and activation, or
//! the gated activation), the down projection and its residual LayerNorm
//! (`shaders/encoder.wgsl`).
//!
//! Pre-norm plans (ModernBERT) keep the residual stream in one region and each sublayer's
//! normalized input in another: one kernel adds a product to the stream and normalizes the sum
//! for the next sublayer (the last one with the final norm, in place). Local layers attend
//! within their window.
//!
//! Rotary positions (NomicBERT, ModernBERT, Qwen 3.5's and Gemma 4's vision towers) rotate the
//! queries and keys before attention (`enc_rope`) from tables the host makes once per pass: one
//! per distinct rotation of the batch's sequences and layers (dynamic NTK scaling gives a long
//! sequence its own, ModernBERT's local and global layers have theirs, a vision tower's patch
//! grid gives each image its rows), as long as its longest sequence, and each layer's row of
//! them for every token.
//!
//! Gemma-style blocks (Gemma 4's vision tower) add RMSNorms in the residual kernel, per-head RMS
//! norms of the queries, keys and values after their products (`enc_head_norm`), each
//! sublayer's output normalized before its residual add, grouped-query heads (the q/k/v region
//! holds `heads` query heads then the key and value heads), and clamped projections: a clamped
//! input is copied clamped into a region of its own before the product, a clamped output is
//! clamped in place after the product and its bias (`enc_clamp`).
//!
//! A batch whose activations do not fit one storage binding (lavapipe: 128 MiB, about 5,800
//! tokens of all-MiniLM-L6-v2) runs as several passes over consecutive groups of whole
//! sequences. Declined (the CPU runs the plan; [`run`] says why): heads wider than 256,
//! projections or norms whose shapes do not chain ([`EncoderPlan::check_shapes`]), a hidden
//! state wider than 4,096, rotations of several widths or layouts or wider than a head, a
//! post-norm block without its attention norm or a pre-norm block past the first without it, a
//! weight the device cannot hold, one sequence too long for a binding, and on llvmpipe
//! (lavapipe) a sequence whose attention would run past its 65,535 loop iterations per
//! invocation (heads of 64: about 6,000 keys; of 256: about 1,800).

use crate::gpu::Gpu;
use crate::kernels::{
    self, enc_head_width, Dispatch, NormAt, RopeAt, ENC_ATTENTION_SHARED, ENC_MAX_DIM,
    ENC_QUERY_BLOCK,
};
use crate::matrix::{int8_inputs, linear, DeviceMatrix, LinearIo};
use crate::stack_run::{Layout, Pack, Scratch};
use oxinfer::backend::DeviceWeight;
use oxinfer::nn::encoder_linear::EncoderLinear;
use oxinfer::plan::encoder::{EncoderPlan, NormOrder};
use oxinfer::plan::encoder_tables::{pack_params, rope_tables, LayerParams, RopeTables};
use oxinfer_kernels::{WeightFormat, WeightMatrix};
use std::ops::Range;

/// Why the kernels do not run `plan` on `g`, if they do not (nothing uploaded).
pub(crate) fn unsupported(g: &Gpu, plan: &EncoderPlan) -> Option<&'static str> {
    let h = &plan.heads;
    let why = [
        (
            plan.lacks_attention_norm(),
            "a block without its attention norm",
        ),
        (
            h.head_dim == 0 || enc_head_width(h.head_dim).is_none(),
            "head width",
        ),
        (plan.check_shapes().is_err(), "projection or norm shapes"),
        (plan.dim > ENC_MAX_DIM, "hidden state wider than 4096"),
        (
            plan.layers
                .iter()
                .any(|l| l.window.is_some_and(|w| w >= u32::MAX as usize)),
            "window",
        ),
        (
            g.limits.max_compute_workgroup_storage_size < ENC_ATTENTION_SHARED,
            "workgroup memory",
        ),
    ];
    why.into_iter().find_map(|(bad, what)| bad.then_some(what))
}

/// `l`'s weight on the device, uploaded on first use into its plan slot (in its storage format,
/// or as an f32 copy when the kernels do not decode that format); `None` when it cannot be
/// uploaded or the slot holds another backend's.
fn weight<'a>(g: &Gpu, l: &'a EncoderLinear) -> Option<&'a DeviceMatrix> {
    let dev = l
        .plan_slot()
        .get_or_init(|| {
            let m = l.linear().matrix();
            let up = match kernels::FORMATS.contains(&m.format) {
                true => DeviceMatrix::upload(g, &m),
                false => {
                    let bytes: Vec<u8> = m.to_f32().iter().flat_map(|v| v.to_le_bytes()).collect();
                    let f = WeightMatrix::new(WeightFormat::F32, &bytes, m.rows, m.cols).ok()?;
                    DeviceMatrix::upload(g, &f)
                }
            }?;
            g.check().ok()?;
            let w: DeviceWeight = Box::new(up);
            Some(w)
        })
        .as_ref()?;
    dev.downcast_ref::<DeviceMatrix>()
}

/// The device matrices of one layer: q, k, v, o, gate, up, down.
type LayerMats<'a> = (
    [&'a DeviceMatrix; 4],
    Option<&'a DeviceMatrix>,
    [&'a DeviceMatrix; 2],
);

/// Every layer's matrices (uploaded on first use), or why not: a weight the device cannot hold,
/// or shapes that do not chain.
fn layer_mats<'a>(g: &Gpu, plan: &EncoderPlan<'a>) -> Result<Vec<LayerMats<'a>>, &'static str> {
    let (dim, h) = (plan.dim, &plan.heads);
    let (qw, kvw) = (h.n_heads * h.head_dim, h.n_kv_heads * h.head_dim);
    let mut out = Vec::with_capacity(plan.layers.len());
    for l in &plan.layers {
        let w = |p| weight(g, p).ok_or("a weight the device cannot hold");
        let attn = [w(l.q)?, w(l.k)?, w(l.v)?, w(l.o)?];
        let gate = l.gate.map(w).transpose()?;
        let [up, down] = [w(l.up)?, w(l.down)?];
        let rows = [qw, kvw, kvw, dim];
        let cols = [dim, dim, dim, qw];
        let fits = attn
            .iter()
            .zip(rows.iter().zip(&cols))
            .all(|(m, (&r, &c))| m.rows == r && m.cols == c)
            && gate.is_none_or(|m| m.cols == dim && m.rows == up.rows)
            && up.cols == dim
            && down.rows == dim
            && down.cols == up.rows;
        if !fits {
            return Err("projection shapes");
        }
        out.push((attn, gate, [up, down]));
    }
    Ok(out)
}

/// The widths of a pass's per-row regions: q/k/v side by side, the attention output (query
/// heads), and the widest input a clamped product reads (0: no product is clamped).
fn widths(plan: &EncoderPlan, ffn: usize) -> (usize, usize, usize) {
    let h = &plan.heads;
    let (qw, kvw) = (h.n_heads * h.head_dim, h.n_kv_heads * h.head_dim);
    let clamped = plan.layers.iter().any(|l| {
        let ps = [Some(l.q), Some(l.k), Some(l.v), Some(l.o), l.gate];
        ps.into_iter()
            .chain([Some(l.up), Some(l.down)])
            .flatten()
            .any(|p| p.input_clamp().is_some())
    });
    let widest = if clamped {
        plan.dim.max(qw).max(ffn)
    } else {
        0
    };
    (qw + 2 * kvw, qw, widest)
}

/// f32 values of a pass's activation arena per token row (hidden state, pre-norm's normalized
/// copy, q/k/v, attention output, product output, the MLP's hidden and up values, the clamped
/// copy of a product's input, the int8 rounding of inputs), and the most rows one binding
/// holds.
fn rows_per_pass(g: &Gpu, plan: &EncoderPlan, ffn: usize) -> usize {
    let pre = matches!(plan.order, NormOrder::Pre { .. });
    let gated = plan.layers.iter().any(|l| l.gate.is_some());
    let dim = plan.dim;
    let (qkv, att, clamped) = widths(plan, ffn);
    let per_row = dim * (2 + usize::from(pre))
        + qkv
        + att
        + clamped
        + ffn * (1 + usize::from(gated))
        + if int8_inputs() {
            dim.max(ffn).max(att)
        } else {
            0
        };
    // Each region is rounded up to 64 values (`Layout::take`).
    let room = (g.max_binding() / 4) as usize;
    room.saturating_sub(10 * 64) / per_row.max(1)
}

/// Most loop iterations one shader invocation may run on `g` (llvmpipe: 65,535 in all,
/// `LP_MAX_TGSI_LOOP_ITERATIONS` in Mesa's gallivm, after which it silently stops; elsewhere
/// no limit).
fn loop_limit(g: &Gpu) -> usize {
    match g.info.name.contains("llvmpipe") {
        true => 65_535,
        false => usize::MAX,
    }
}

/// Whether some layer's attention over the longest of `lens` runs past [`loop_limit`]: a
/// windowed layer's query block sees at most its 64 queries and `window` keys on each side.
fn over_loop_limit(g: &Gpu, plan: &EncoderPlan, lens: &[usize]) -> bool {
    let longest = lens.iter().copied().max().unwrap_or(0);
    plan.layers.iter().any(|l| {
        let keys = l
            .window
            .map_or(longest, |w| longest.min(ENC_QUERY_BLOCK + 2 * w));
        kernels::enc_attention_loops(plan.heads.head_dim, keys) > loop_limit(g)
    })
}

/// Consecutive groups of whole sequences of at most `max_rows` rows each (each group one
/// pass); `None` when one sequence alone is longer.
fn passes(lens: &[usize], max_rows: usize) -> Option<Vec<Range<usize>>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    let (mut first, mut rows) = (0, 0);
    for (i, &n) in lens.iter().enumerate() {
        if n > max_rows {
            return None;
        }
        if rows + n > max_rows {
            out.push(first..i);
            (first, rows) = (i, 0);
        }
        rows += n;
    }
    out.push(first..lens.len());
    Some(out)
}

/// Runs `plan` over `x` (`[Σ lens, dim]`) into `out` (same shape). `Ok(Some(why))`: declined
/// before anything was written; `Err`: a device failure (`out` may be partly written).
pub(crate) fn run(
    g: &Gpu,
    scratch: &mut Scratch,
    plan: &EncoderPlan,
    x: &[f32],
    lens: &[usize],
    out: &mut [f32],
) -> Result<Option<&'static str>, String> {
    let (dim, t) = (plan.dim, lens.iter().sum::<usize>());
    if t == 0 || x.len() != t * dim || out.len() != x.len() {
        return Ok(Some("input shape"));
    }
    if let Some(why) = unsupported(g, plan) {
        return Ok(Some(why));
    }
    if over_loop_limit(g, plan, lens) {
        return Ok(Some("a sequence too long for llvmpipe's loop limit"));
    }
    // Each layer's rotations of the sequences `seqs` of the batch.
    let ropes_of = |seqs: Range<usize>| {
        (plan.layers.iter()).map(move |l| l.rope_of.map(|r| r.of_sequences(seqs.clone())))
    };
    let whole_rope = match rope_tables(ropes_of(0..lens.len()), lens, plan.heads.head_dim) {
        Ok(r) => r,
        Err(why) => return Ok(Some(why)),
    };
    let mats = match layer_mats(g, plan) {
        Ok(m) => m,
        Err(why) => return Ok(Some(why)),
    };
    let ffn = mats.iter().map(|m| m.2[0].rows).max().unwrap_or(0);
    let Some(groups) = passes(lens, rows_per_pass(g, plan, ffn)) else {
        return Ok(Some("a sequence too long for one storage binding"));
    };
    // Every vector at a multiple of 64 values: bindings start 256 bytes apart.
    let packed = pack_params(plan, 64);
    let (base, params, final_norm) = (Pack(packed.pack), packed.layers, packed.final_norm);
    let mut whole_rope = (groups.len() == 1).then_some(whole_rope).flatten();
    let mut row0 = 0;
    for sg in groups {
        let seqs = sg.clone();
        let lens = &lens[sg];
        let rows = lens.iter().sum::<usize>();
        let rope = match whole_rope.take() {
            Some(r) => Some(r),
            None => rope_tables(ropes_of(seqs), lens, plan.heads.head_dim)
                .ok()
                .flatten(),
        };
        let span = row0 * dim..(row0 + rows) * dim;
        let pass = Pass {
            plan,
            mats: &mats,
            params: &params,
            final_norm,
            ffn,
        };
        pass.run(
            g,
            scratch,
            &base,
            rope.as_ref(),
            lens,
            &x[span.clone()],
            &mut out[span],
        )?;
        row0 += rows;
    }
    Ok(None)
}

/// What every pass of one plan shares.
struct Pass<'p, 'a> {
    plan: &'p EncoderPlan<'a>,
    mats: &'p [LayerMats<'a>],
    params: &'p [LayerParams],
    final_norm: Option<NormAt>,
    /// Widest MLP hidden layer.
    ffn: usize,
}

impl Pass<'_, '_> {
    /// One submission over the sequences `lens` (rows `x`, `[Σ lens, dim]`) into `out`; `base`
    /// holds the plan's packed parameters, `rope` the group's rotary tables.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        g: &Gpu,
        scratch: &mut Scratch,
        base: &Pack,
        rope: Option<&RopeTables>,
        lens: &[usize],
        x: &[f32],
        out: &mut [f32],
    ) -> Result<(), String> {
        let (plan, dim, t) = (self.plan, self.plan.dim, lens.iter().sum::<usize>());
        let pre = matches!(plan.order, NormOrder::Pre { .. });
        let gated = plan.layers.iter().any(|l| l.gate.is_some());
        // Constants: the plan's parameters, then this group's rotary tables and query blocks.
        let mut pack = Pack(base.0.clone());
        let rope_at = rope.map(|r| {
            let at = RopeAt {
                cos: pack.push(&r.cos),
                sin: pack.push(&r.sin),
                half: r.half,
                interleaved: r.interleaved,
            };
            let maps: Vec<usize> = r
                .row_of
                .chunks(t.max(1))
                .map(|m| pack.push(&m.iter().map(|&v| f32::from_bits(v)).collect::<Vec<_>>()))
                .collect();
            (at, r.sections, maps)
        });
        let mut blocks = Vec::new();
        let mut r0 = 0u32;
        for &n in lens {
            for i0 in (0..n).step_by(ENC_QUERY_BLOCK) {
                blocks.extend([r0, n as u32, i0 as u32].map(f32::from_bits));
            }
            r0 += n as u32;
        }
        let n_blocks = blocks.len() / 3;
        let blocks_at = pack.push(&blocks);

        let mut lay = Layout::default();
        let ffn = self.ffn;
        let (qkv_w, att_w, clamped_w) = widths(plan, ffn);
        let widest = if int8_inputs() {
            dim.max(ffn).max(att_w)
        } else {
            0
        };
        let [hidden, normed, qkv, att, y, gt, up, xc, xq] = [
            t * dim,
            if pre { t * dim } else { 0 },
            t * qkv_w,
            t * att_w,
            t * dim,
            t * ffn,
            if gated { t * ffn } else { 0 },
            t * clamped_w,
            t * widest,
        ]
        .map(|n| lay.take(n));
        if !g.fits((lay.0 * 4) as u64) || !g.fits((pack.0.len() * 4) as u64) {
            return Err(format!("{t} rows over the device's buffer limit"));
        }
        let a = scratch.arena(g, lay.0);
        let c = scratch.consts(g, pack.0.len());
        g.write(&a, hidden, x);
        g.write(&c, 0, &pack.0);

        let mut d: Vec<Dispatch> = Vec::new();
        type Ready = Option<(usize, usize)>;
        // The product of `l` (its matrix `m`) over `x` (rows of `l`'s input width) into `y`
        // (rows `ld` apart), its input clamped into `xc` first when `l` clamps it; the output
        // clamp is the caller's (after the bias).
        let mm = |d: &mut Vec<Dispatch>,
                  r: &mut Ready,
                  (m, l): (&DeviceMatrix, &EncoderLinear),
                  x,
                  y,
                  ld| {
            let x = match l.input_clamp() {
                Some(b) => {
                    let w = m.cols;
                    d.push(kernels::enc_clamp(&a, (x, w), (xc, w), (t, w), b));
                    *r = None;
                    xc
                }
                None => x,
            };
            let io = LinearIo {
                a: &a,
                x,
                xq,
                out: &a,
                y,
                ld,
            };
            linear(m, &io, t, r, d);
            if l.input_clamp().is_some() {
                *r = None;
            }
        };
        // The output clamp of `l` over `w` columns of rows `ld` apart at `y`, in place.
        let clamp_out = |d: &mut Vec<Dispatch>, l: &EncoderLinear, y, w, ld| {
            if let Some(b) = l.output_clamp() {
                d.push(kernels::enc_clamp(&a, (y, ld), (y, ld), (t, w), b));
            }
        };
        let norm = |x, y, n, out| kernels::enc_residual_norm(&a, &c, x, y, n, out, dim, t);
        // A product's output at `y` (`[t, dim]`) made ready for its residual add: its bias, its
        // clamp and the sublayer's output norm applied when it has either; returns the bias
        // still to add (folded into the residual kernel).
        let finish = |d: &mut Vec<Dispatch>, l: &EncoderLinear, bias, post: Option<NormAt>| {
            if l.output_clamp().is_none() && post.is_none() {
                return bias;
            }
            if let Some(b) = bias {
                d.push(kernels::add_bias(&a, &c, y, b, dim, t));
            }
            clamp_out(d, l, y, dim, dim);
            if let Some(n) = post {
                d.push(norm(y, None, Some(n), y));
            }
            None
        };
        // Pre-norm: the first block's attention input (the stream itself without a norm).
        if let (true, Some(n)) = (pre, self.params.first().and_then(|p| p.attn_norm)) {
            d.push(norm(hidden, None, Some(n), normed));
        }
        let h = &plan.heads;
        let (qw, kvw) = (h.n_heads * h.head_dim, h.n_kv_heads * h.head_dim);
        for (li, ((m, lp), l)) in self
            .mats
            .iter()
            .zip(self.params)
            .zip(&plan.layers)
            .enumerate()
        {
            let ([wq, wk, wv, wo], wg, [wu, wd]) = *m;
            // The sublayers' input: the stream (post-norm, or a pre-norm block without its
            // attention norm), else its normalized copy.
            let input = match (pre, lp.attn_norm) {
                (false, _) | (true, None) => hidden,
                (true, Some(_)) => normed,
            };
            let mut ready = None;
            let cols = [0, qw, qw + kvw];
            let parts = [(wq, l.q), (wk, l.k), (wv, l.v)];
            for (w, &col) in parts.into_iter().zip(&cols) {
                mm(&mut d, &mut ready, w, input, qkv + col, qkv_w);
            }
            if let Some(b) = lp.qkv_bias {
                d.push(kernels::add_bias(&a, &c, qkv, b, qkv_w, t));
            }
            let heads = [h.n_heads, h.n_kv_heads, h.n_kv_heads];
            let head_norms = [lp.q_norm, lp.k_norm, lp.v_norm];
            for (((p, &col), &n_heads), n) in [l.q, l.k, l.v]
                .into_iter()
                .zip(&cols)
                .zip(&heads)
                .zip(head_norms)
            {
                clamp_out(&mut d, p, qkv + col, p.n_out(), qkv_w);
                if let Some(n) = n {
                    let geom = (qkv + col, qkv_w, t);
                    d.push(kernels::enc_head_norm(
                        &a,
                        &c,
                        geom,
                        (n_heads, h.head_dim),
                        n,
                    ));
                }
            }
            let hl = plan.heads_of(l);
            if let (Some((at, sections, maps)), Some(r)) = (&rope_at, rope) {
                if let Some(map) = r.layer_map[li] {
                    let geom = (t, qkv_w);
                    let heads = (h.n_heads, h.n_kv_heads);
                    d.push(kernels::enc_rope(
                        &a,
                        &c,
                        qkv,
                        geom,
                        heads,
                        h.head_dim,
                        (*at, *sections),
                        maps[map],
                    ));
                }
            }
            d.push(kernels::enc_attention(
                &a,
                &c,
                (qkv, att),
                hl,
                blocks_at,
                n_blocks,
            ));
            mm(&mut d, &mut None, (wo, l.o), att, y, dim);
            let o_bias = finish(&mut d, l.o, lp.o_bias, lp.post_attn_norm);
            // Post-norm: the stream normalized in place. Pre-norm: the stream kept, the MLP's
            // normalized input beside it.
            let (n, dst, mlp_in) = match (pre, lp.attn_norm) {
                (true, _) => (lp.ffn_norm, normed, normed),
                (false, n) => (n.expect("checked by unsupported"), hidden, hidden),
            };
            d.push(norm(hidden, Some((y, o_bias)), Some(n), dst));
            let width = wu.rows;
            let mut ready = None;
            // Biases of clamped outputs go before their clamp, not into the activation.
            let early = |d: &mut Vec<Dispatch>, p: &EncoderLinear, at, bias: Option<usize>| {
                if p.output_clamp().is_none() {
                    return bias;
                }
                if let Some(b) = bias {
                    d.push(kernels::add_bias(&a, &c, at, b, width, t));
                }
                clamp_out(d, p, at, width, width);
                None
            };
            match wg {
                None => {
                    mm(&mut d, &mut ready, (wu, l.up), mlp_in, gt, width);
                    let bias = early(&mut d, l.up, gt, lp.up_bias);
                    let act = Some(plan.act);
                    d.push(kernels::enc_act(
                        &a,
                        &c,
                        gt,
                        t * width,
                        width,
                        bias,
                        act,
                        None,
                    ));
                }
                Some(wg) => {
                    let gate = l.gate.expect("a gate matrix has its layer");
                    mm(&mut d, &mut ready, (wg, gate), mlp_in, gt, width);
                    mm(&mut d, &mut ready, (wu, l.up), mlp_in, up, width);
                    if let Some(b) = lp.up_bias {
                        d.push(kernels::add_bias(&a, &c, up, b, width, t));
                    }
                    clamp_out(&mut d, l.up, up, width, width);
                    let bias = early(&mut d, gate, gt, lp.gate_bias);
                    let (n, act) = (t * width, Some(plan.act));
                    d.push(kernels::enc_act(&a, &c, gt, n, width, bias, act, Some(up)));
                }
            }
            mm(&mut d, &mut None, (wd, l.down), gt, y, dim);
            let down_bias = finish(&mut d, l.down, lp.down_bias, lp.post_ffn_norm);
            // Post-norm: in place. Pre-norm: the next block's attention input beside the
            // stream, or after the last block the final norm (if any) in place.
            let (n, dst) = match (pre, self.params.get(li + 1)) {
                (false, _) => (Some(lp.ffn_norm), hidden),
                (true, Some(next)) => (
                    Some(next.attn_norm.expect("checked by unsupported")),
                    normed,
                ),
                (true, None) => (self.final_norm, hidden),
            };
            d.push(norm(hidden, Some((y, down_bias)), n, dst));
        }
        g.run(&d, &mut [(&a, hidden, out)])
    }
}

#[cfg(test)]
mod tests {
    use super::passes;

    /// Batches split into passes of whole sequences; a sequence longer than a pass is declined.
    #[test]
    fn batches_split_by_whole_sequences() {
        let lens = [5, 1, 37, 130, 64];
        assert_eq!(passes(&lens, 140), Some(vec![0..3, 3..4, 4..5]));
        assert_eq!(passes(&lens, 237).map(|p| p.len()), Some(1));
        assert_eq!(passes(&lens, 129), None);
    }
}
