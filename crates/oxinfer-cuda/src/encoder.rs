//! Whole encoder passes ([`EncoderPlan`]) on the device: the hidden state of every sequence of a
//! batch goes up once, every layer runs on the GPU, the last hidden states come down.
//!
//! The products are cuBLAS SGEMMs (f32 inputs, f32 accumulation, no TF32: the plan's CPU twin
//! and transformers' float32 reference multiply in f32), on an f32 copy of each weight made on
//! first use whatever the file's format (an encoder is small; quantized weights are dequantized
//! as the CPU dequantizes them). Per layer: q, k and v into one `[T, 3 dim]` buffer, their
//! biases, attention within each sequence (`enc_attention_h*`), the output projection, the
//! residual LayerNorm with the product's bias, the MLP (bias and activation, or the gated
//! activation), the down projection and its residual LayerNorm (`kernels/encoder.cu`).
//!
//! Pre-norm plans (ModernBERT) keep the residual stream in one buffer and each sublayer's
//! normalized input in another: one kernel adds a product to the stream and normalizes the
//! sum for the next sublayer (the last one with the final norm, in place). Local layers
//! attend within their window.
//!
//! Rotary positions (NomicBERT, ModernBERT, Qwen 3.5's and Gemma 4's vision towers) rotate the
//! queries and keys in that buffer before attention (`enc_rope`), from tables the host makes
//! once per pass: one per distinct rotation of the batch's sequences and layers (dynamic NTK
//! scaling gives a long sequence its own, ModernBERT's local and global layers have theirs, a
//! vision tower's patch grid gives each image its rows), as long as its longest sequence, and
//! each layer's row of them for every token.
//!
//! Gemma-style blocks (Gemma 4's vision tower) add RMSNorms in the residual kernel, per-head RMS
//! norms of the queries, keys and values after their products (`enc_head_rms_norm`), each
//! sublayer's output normalized before its residual add, grouped-query heads (the q/k/v buffer
//! holds the query heads then the key and value heads, `[T, (H + 2 H_kv) hd]`), and clamped
//! projections: a clamped input is copied clamped into a buffer of its own before the product,
//! a clamped output is clamped in place after the product and its bias (`enc_clamp`).
//!
//! Heads of a width without a kernel of their own ([`ENCODER_HEAD_DIMS`]: Qwen 3.5's vision
//! tower's 72, the tiny models' 8) run on the next wider one with the lanes past the head idle.
//! Declined (the CPU runs the plan): heads wider than 256, projections or norms whose shapes do
//! not chain ([`EncoderPlan::check_shapes`]), rotations of several widths or layouts or wider
//! than a head, a post-norm block without its norm or a pre-norm block past the first without
//! its attention norm, a weight whose upload fails.

use crate::gemm::cublas_ld;
use crate::gpu::{DevBuf, Gpu, Slot};
use crate::kernels::ENCODER_HEAD_DIMS;
use crate::ops::{arg, launch_1d};
use cudarc::cublas::sys as blas_sys;
use cudarc::driver::sys::CUdeviceptr;
use oxinfer::nn::encoder_act::EncoderAct;
use oxinfer::nn::encoder_linear::EncoderLinear;
use oxinfer::plan::encoder::{EncoderLayer, EncoderPlan, NormOrder};
use oxinfer::plan::encoder_tables::{pack_params, rope_tables, NormAt};
use std::any::Any;

/// Threads per block of the residual LayerNorm (one block per row).
const NORM_THREADS: u32 = 256;
/// Threads per block of the per-head RMS norm (a warp per head).
const HEAD_NORM_THREADS: usize = 128;
/// Query rows per warp of `enc_attention_h*` (its `ENC_QR`).
const ATTENTION_ROWS: usize = 4;
/// Warps per block of `enc_attention_h*`.
const ATTENTION_WARPS: usize = 4;

/// A weight's f32 copy on the device, `[rows, cols]` row-major.
pub(crate) struct EncoderMatrix {
    rows: usize,
    cols: usize,
    buf: DevBuf,
}

/// The kernel code of an activation (`enc_act` in `kernels/encoder.cu`).
fn act_code(a: EncoderAct) -> i32 {
    match a {
        EncoderAct::GeluErf => 0,
        EncoderAct::GeluTanh => 1,
        EncoderAct::Relu => 2,
        EncoderAct::Silu => 3,
    }
}

/// Why the device does not run `plan`, if it does not (nothing uploaded).
fn unsupported(plan: &EncoderPlan) -> Option<&'static str> {
    let h = &plan.heads;
    if plan.lacks_attention_norm() {
        return Some("a block without its attention norm");
    }
    if plan
        .layers
        .iter()
        .any(|l| l.window.is_some_and(|w| w > i32::MAX as usize))
    {
        return Some("window");
    }
    let widest = ENCODER_HEAD_DIMS[ENCODER_HEAD_DIMS.len() - 1];
    if h.head_dim == 0 || h.head_dim > widest {
        return Some("head width");
    }
    if plan.check_shapes().is_err() {
        return Some("projection or norm shapes");
    }
    None
}

/// `l`'s weight as an f32 copy on the device, made on first use (in `l`'s plan slot); `None`
/// when the upload failed (said once by the caller).
fn f32_weight<'a>(g: &Gpu, l: &'a EncoderLinear) -> Option<&'a EncoderMatrix> {
    let dev = l
        .plan_slot()
        .get_or_init(|| {
            let m = l.linear().matrix();
            let host = m.to_f32();
            g.bind().ok()?;
            let buf = DevBuf::from_host(&g.ctx, &host).ok()?;
            let w: Box<dyn Any + Send + Sync> = Box::new(EncoderMatrix {
                rows: m.rows,
                cols: m.cols,
                buf,
            });
            Some(w)
        })
        .as_ref()?;
    dev.downcast_ref::<EncoderMatrix>()
}

/// The device matrices of one layer: q, k, v, o, gate, up, down.
type LayerMats<'a> = [Option<&'a EncoderMatrix>; 7];

/// Runs `plan` over `x` (`[Σ lens, dim]`) into `out` on `g` (locked by the caller).
/// `Ok(false)`: declined before anything ran (a weight the device cannot hold).
pub(crate) fn run(
    g: &mut Gpu,
    plan: &EncoderPlan,
    x: &[f32],
    lens: &[usize],
    out: &mut [f32],
) -> Result<bool, String> {
    let (dim, t) = (plan.dim, lens.iter().sum::<usize>());
    if t == 0 || x.len() != t * dim || out.len() != x.len() || unsupported(plan).is_some() {
        return Ok(false);
    }
    let h = &plan.heads;
    let Ok(rope) = rope_tables(plan.layers.iter().map(|l| l.rope_of), lens, h.head_dim) else {
        return Ok(false);
    };
    let (qw, kvw) = (h.n_heads * h.head_dim, h.n_kv_heads * h.head_dim);
    let qkv_w = qw + 2 * kvw;
    let mut mats: Vec<LayerMats> = Vec::with_capacity(plan.layers.len());
    for l in &plan.layers {
        let m = [
            Some(l.q),
            Some(l.k),
            Some(l.v),
            Some(l.o),
            l.gate,
            Some(l.up),
            Some(l.down),
        ]
        .map(|p| p.map(|p| f32_weight(g, p)));
        if m.iter().any(|w| matches!(w, Some(None))) {
            return Ok(false);
        }
        let m = m.map(Option::flatten);
        let shape = [(qw, dim), (kvw, dim), (kvw, dim), (dim, qw)];
        let shapes_fit = m[..4]
            .iter()
            .zip(shape)
            .all(|(w, (r, c))| w.is_some_and(|w| w.rows == r && w.cols == c))
            && m[4..6].iter().flatten().all(|w| w.cols == dim)
            && m[6].is_some_and(|w| w.rows == dim && m[5].is_some_and(|up| up.rows == w.cols));
        if !shapes_fit {
            return Ok(false);
        }
        mats.push(m);
    }
    let ffn = mats
        .iter()
        .map(|m| m[5].map_or(0, |w| w.rows))
        .max()
        .unwrap_or(0);
    let clamped_in = plan.layers.iter().any(|l| {
        [
            Some(l.q),
            Some(l.k),
            Some(l.v),
            Some(l.o),
            l.gate,
            Some(l.up),
        ]
        .into_iter()
        .chain([Some(l.down)])
        .flatten()
        .any(|p| p.input_clamp().is_some())
    });
    let packed = pack_params(plan, 4);
    let (pack, params, final_norm) = (packed.pack, packed.layers, packed.final_norm);
    g.bind()?;
    let p = {
        let (p, fresh) = g.scratch_fresh(Slot::EncParams, pack.len().max(1) * 4)?;
        if fresh || g.enc_params_host != pack {
            g.upload(p, &pack)?;
            g.enc_params_host = pack;
        }
        p
    };
    let at = |o: usize| p + (o * 4) as CUdeviceptr;
    let hidden = g.scratch(Slot::EncX, t * dim * 4)?;
    let qkv = g.scratch(Slot::EncQkv, t * qkv_w * 4)?;
    let att = g.scratch(Slot::EncAtt, t * qw * 4)?;
    let y = g.scratch(Slot::EncY, t * dim * 4)?;
    let gate = g.scratch(Slot::EncG, t * ffn * 4)?;
    let up = match plan.layers.iter().any(|l| l.gate.is_some()) {
        true => g.scratch(Slot::EncU, t * ffn * 4)?,
        false => 0,
    };
    let normed = match plan.order {
        NormOrder::Pre { .. } => g.scratch(Slot::EncNormed, t * dim * 4)?,
        NormOrder::Post => 0,
    };
    let xc = match clamped_in {
        true => g.scratch(Slot::EncClamped, t * dim.max(qw).max(ffn) * 4)?,
        false => 0,
    };
    let mut starts: Vec<i32> = Vec::with_capacity(lens.len() + 1);
    let mut first = 0i32;
    for &n in lens {
        starts.push(first);
        first += n as i32;
    }
    starts.push(first);
    let seq = g.scratch(Slot::EncSeq, starts.len() * 4)?;
    g.upload(seq, &starts)?;
    let rope = match &rope {
        Some(tables) => {
            let n = tables.cos.len();
            let cs = g.scratch(Slot::EncRope, 2 * n * 4)?;
            let sn = cs + (n * 4) as CUdeviceptr;
            g.upload(cs, &tables.cos)?;
            g.upload(sn, &tables.sin)?;
            let rows = g.scratch(Slot::EncRopeRow, tables.row_of.len() * 4)?;
            g.upload(rows, &tables.row_of)?;
            Some((cs, sn, rows, tables))
        }
        None => None,
    };
    g.upload(hidden, x)?;
    let act = act_code(plan.act);
    let f32_ty = blas_sys::cudaDataType::CUDA_R_32F;
    // The product of `l` (its matrix `w`) over `x` into `y` (rows `ldy` apart), its input
    // clamped into `xc` first when `l` clamps it; the output clamp is the caller's (after the
    // bias).
    let gemm = |w: &EncoderMatrix, l: &EncoderLinear, x: CUdeviceptr, y: CUdeviceptr, ldy| {
        let x = match l.input_clamp() {
            Some(b) => {
                clamp(g, (x, w.cols), (xc, w.cols), (t, w.cols), b)?;
                xc
            }
            None => x,
        };
        cublas_ld(g, w.buf.ptr(), f32_ty, x, y, ldy, t, w.rows, w.cols, None)
    };
    // The output clamp of `l` over `w` columns of rows `ld` apart at `y`, in place.
    let clamp_out = |l: &EncoderLinear, y: CUdeviceptr, w: usize, ld: usize| match l.output_clamp()
    {
        Some(b) => clamp(g, (y, ld), (y, ld), (t, w), b),
        None => Ok(()),
    };
    // A product's output at `y` (`[T, dim]`) made ready for its residual add: its bias, its
    // clamp and the sublayer's output norm applied when it has either; returns the bias still
    // to add (folded into the residual kernel).
    let finish = |l: &EncoderLinear, bias: Option<usize>, post: Option<NormAt>| {
        if l.output_clamp().is_none() && post.is_none() {
            return Ok(bias);
        }
        if let Some(b) = bias {
            bias_act(g, y, Some(at(b)), t * dim, dim, -1)?;
        }
        clamp_out(l, y, dim, dim)?;
        if let Some(n) = post {
            residual_norm(g, y, None, None, Some(n), &at, y, dim, t)?;
        }
        Ok::<_, String>(None)
    };
    let pre = matches!(plan.order, NormOrder::Pre { .. });
    // Pre-norm: the first block's attention input (the stream itself without a norm).
    if let (true, Some(n)) = (pre, params.first().and_then(|p| p.attn_norm)) {
        residual_norm(g, hidden, None, None, Some(n), &at, normed, dim, t)?;
    }
    for (li, ((m, lp), l)) in mats.iter().zip(&params).zip(&plan.layers).enumerate() {
        let [Some(q), Some(k), Some(v), Some(o), gate_w, Some(up_w), Some(down)] = *m else {
            unreachable!("shapes checked above");
        };
        // The sublayers' input: the stream (post-norm, or a pre-norm block without its
        // attention norm), else its normalized copy.
        let input = match (pre, li, lp.attn_norm) {
            (true, 0, None) | (false, _, _) => hidden,
            (true, _, _) => normed,
        };
        let cols = [0, qw, qw + kvw];
        let parts = [(q, l.q), (k, l.k), (v, l.v)];
        for ((w, p), col) in parts.into_iter().zip(cols) {
            gemm(w, p, input, qkv + (col * 4) as CUdeviceptr, qkv_w)?;
        }
        if let Some(b) = lp.qkv_bias {
            bias_act(g, qkv, Some(at(b)), t * qkv_w, qkv_w, -1)?;
        }
        let heads = [h.n_heads, h.n_kv_heads, h.n_kv_heads];
        let norms = [lp.q_norm, lp.k_norm, lp.v_norm];
        for (((p, col), n_heads), n) in [l.q, l.k, l.v].into_iter().zip(cols).zip(heads).zip(norms)
        {
            let at_col = qkv + (col * 4) as CUdeviceptr;
            clamp_out(p, at_col, p.n_out(), qkv_w)?;
            if let Some(n) = n {
                head_norm(
                    g,
                    at_col,
                    qkv_w,
                    (t, n_heads, h.head_dim),
                    at(n.gain),
                    n.eps,
                )?;
            }
        }
        if let Some((cs, sn, rows, tables)) = &rope {
            if let Some(map) = tables.layer_map[li] {
                let rows = rows + (map * t * 4) as CUdeviceptr;
                let (t_l, heads, hd) = (t as i64, h.n_heads as i32, h.head_dim as i32);
                let (half_i, il) = (tables.half as i32, i32::from(tables.interleaved));
                let (ld, kv, sections) =
                    (qkv_w as i32, h.n_kv_heads as i32, tables.sections as i32);
                let params = &mut [
                    arg(&qkv),
                    arg(cs),
                    arg(sn),
                    arg(&rows),
                    arg(&t_l),
                    arg(&heads),
                    arg(&hd),
                    arg(&half_i),
                    arg(&il),
                    arg(&ld),
                    arg(&kv),
                    arg(&sections),
                ];
                let n = t * (h.n_heads + h.n_kv_heads) * tables.half;
                launch_1d(g, g.k.enc_rope, n, params)?;
            }
        }
        attention(g, plan, l, qkv, att, seq, lens)?;
        gemm(o, l.o, att, y, dim)?;
        let o_bias = finish(l.o, lp.o_bias, lp.post_attn_norm)?;
        // Post-norm: the stream normalized in place. Pre-norm: the stream kept, the MLP's
        // normalized input beside it.
        let mlp_in = if pre { normed } else { hidden };
        let (norm, dst) = match pre {
            true => (lp.ffn_norm, normed),
            false => (lp.attn_norm.expect("checked by unsupported"), hidden),
        };
        let o_bias = o_bias.map(at);
        residual_norm(g, hidden, Some(y), o_bias, Some(norm), &at, dst, dim, t)?;
        let width = up_w.rows;
        // Biases of clamped outputs go before their clamp, not into the activation.
        let early = |p: &EncoderLinear, buf: CUdeviceptr, bias: Option<usize>| {
            if p.output_clamp().is_none() {
                return Ok(bias);
            }
            if let Some(b) = bias {
                bias_act(g, buf, Some(at(b)), t * width, width, -1)?;
            }
            clamp_out(p, buf, width, width)?;
            Ok::<_, String>(None)
        };
        match gate_w {
            None => {
                gemm(up_w, l.up, mlp_in, gate, width)?;
                let bias = early(l.up, gate, lp.up_bias)?;
                bias_act(g, gate, bias.map(at), t * width, width, act)?;
            }
            Some(gw) => {
                let gate_l = l.gate.expect("a gate matrix has its layer");
                gemm(gw, gate_l, mlp_in, gate, width)?;
                gemm(up_w, l.up, mlp_in, up, width)?;
                let gate_bias = early(gate_l, gate, lp.gate_bias)?;
                let up_bias = early(l.up, up, lp.up_bias)?;
                for (y, b) in [(gate, gate_bias), (up, up_bias)] {
                    if let Some(b) = b {
                        bias_act(g, y, Some(at(b)), t * width, width, -1)?;
                    }
                }
                let n = (t * width) as i64;
                let params = &mut [arg(&gate), arg(&up), arg(&n), arg(&act)];
                launch_1d(g, g.k.enc_gated_act, t * width, params)?;
            }
        }
        gemm(down, l.down, gate, y, dim)?;
        let down_bias = finish(l.down, lp.down_bias, lp.post_ffn_norm)?;
        // Post-norm: in place. Pre-norm: the next block's attention input beside the stream,
        // or after the last block the final norm (if any) in place.
        let (norm, dst) = match (pre, params.get(li + 1)) {
            (false, _) => (Some(lp.ffn_norm), hidden),
            (true, Some(next)) => (
                Some(next.attn_norm.expect("checked by unsupported")),
                normed,
            ),
            (true, None) => (final_norm, hidden),
        };
        let bias = down_bias.map(at);
        residual_norm(g, hidden, Some(y), bias, norm, &at, dst, dim, t)?;
    }
    g.download(out, hidden)?;
    Ok(true)
}

/// `dst = clamp(src, lo, hi)` over `rows` rows of `w` values (`src` rows `ld_src` apart, `dst`
/// rows `ld_dst` apart; `dst == src`: in place).
fn clamp(
    g: &Gpu,
    (src, ld_src): (CUdeviceptr, usize),
    (dst, ld_dst): (CUdeviceptr, usize),
    (rows, w): (usize, usize),
    [lo, hi]: [f32; 2],
) -> Result<(), String> {
    let (ls, ldd, r, wi) = (ld_src as i32, ld_dst as i32, rows as i64, w as i32);
    let params = &mut [
        arg(&src),
        arg(&ls),
        arg(&dst),
        arg(&ldd),
        arg(&r),
        arg(&wi),
        arg(&lo),
        arg(&hi),
    ];
    launch_1d(g, g.k.enc_clamp, rows * w, params)
}

/// Each of `heads` heads of `hd` values of `rows` rows at `x` (rows `ld` apart) normalized in
/// place by an RMSNorm of gains `w` (`hd` values on the device).
fn head_norm(
    g: &Gpu,
    x: CUdeviceptr,
    ld: usize,
    (rows, heads, hd): (usize, usize, usize),
    w: CUdeviceptr,
    eps: f32,
) -> Result<(), String> {
    let (r, ld_i, heads_i, hd_i) = (rows as i64, ld as i32, heads as i32, hd as i32);
    let params = &mut [
        arg(&x),
        arg(&r),
        arg(&ld_i),
        arg(&heads_i),
        arg(&hd_i),
        arg(&w),
        arg(&eps),
    ];
    let warps_per_block = HEAD_NORM_THREADS / 32;
    let blocks = (rows * heads).div_ceil(warps_per_block) as u32;
    g.launch(
        g.k.enc_head_rms_norm,
        (blocks, 1, 1),
        (HEAD_NORM_THREADS as u32, 1, 1),
        params,
    )
}

/// `y = act(y + b)` over `n` values in rows of `width` (`act` −1: none).
fn bias_act(
    g: &Gpu,
    y: CUdeviceptr,
    b: Option<CUdeviceptr>,
    n: usize,
    width: usize,
    act: i32,
) -> Result<(), String> {
    let (b, n_l, w) = (b.unwrap_or(0), n as i64, width as i32);
    let params = &mut [arg(&y), arg(&b), arg(&n_l), arg(&w), arg(&act)];
    launch_1d(g, g.k.enc_bias_act, n, params)
}

/// `out = norm(x + (y + bias))` over `t` rows of `dim`, with `x` keeping the sum when `out`
/// is another buffer (`y` `None`: `out = norm(x)`; `norm` `None`: `out = x + (y + bias)`);
/// `at` maps packed offsets to addresses.
#[allow(clippy::too_many_arguments)]
fn residual_norm(
    g: &Gpu,
    x: CUdeviceptr,
    y: Option<CUdeviceptr>,
    bias: Option<CUdeviceptr>,
    norm: Option<NormAt>,
    at: &dyn Fn(usize) -> CUdeviceptr,
    out: CUdeviceptr,
    dim: usize,
    t: usize,
) -> Result<(), String> {
    let (y, yb, d) = (y.unwrap_or(0), bias.unwrap_or(0), dim as i32);
    let eps = norm.map_or(0.0, |n| n.eps);
    let rms = i32::from(norm.is_some_and(|n| n.rms));
    let w = norm.map_or(0, |n| at(n.gain));
    let b = norm.and_then(|n| n.bias).map_or(0, at);
    let params = &mut [
        arg(&x),
        arg(&y),
        arg(&yb),
        arg(&w),
        arg(&b),
        arg(&d),
        arg(&eps),
        arg(&out),
        arg(&rms),
    ];
    g.launch_smem(
        g.k.enc_residual_layer_norm,
        (t as u32, 1, 1),
        (NORM_THREADS, 1, 1),
        (dim * 4) as u32,
        params,
    )
}

/// Attention of every sequence of `lens` with itself (within layer `l`'s window): `qkv`
/// `[T, (H + 2 H_kv) hd]` into `out` `[T, H hd]`; `seq` holds the sequences' first rows and the total on
/// the device.
fn attention(
    g: &Gpu,
    plan: &EncoderPlan,
    l: &EncoderLayer,
    qkv: CUdeviceptr,
    out: CUdeviceptr,
    seq: CUdeviceptr,
    lens: &[usize],
) -> Result<(), String> {
    let h = &plan.heads;
    let longest = lens.iter().copied().max().unwrap_or(0);
    let warps = h.n_heads * longest.div_ceil(ATTENTION_ROWS);
    let grid = (warps.div_ceil(ATTENTION_WARPS) as u32, lens.len() as u32, 1);
    let block = ((ATTENTION_WARPS * 32) as u32, 1, 1);
    let (heads, kvh, scale) = (h.n_heads as i32, h.n_kv_heads as i32, h.scale);
    let ld = ((h.n_heads + 2 * h.n_kv_heads) * h.head_dim) as i32;
    let hd = h.head_dim as i32;
    let window = l.window.map_or(-1, |w| w as i32);
    let mut params = vec![
        arg(&qkv),
        arg(&out),
        arg(&seq),
        arg(&heads),
        arg(&kvh),
        arg(&ld),
        arg(&scale),
        arg(&window),
    ];
    // The narrowest kernel as wide as the head: exactly, or with the lanes past it idle.
    let Some(k) = ENCODER_HEAD_DIMS.iter().position(|&d| d >= h.head_dim) else {
        return Err(format!("no attention kernel for heads of {}", h.head_dim));
    };
    if ENCODER_HEAD_DIMS[k] == h.head_dim {
        return g.launch(g.k.enc_attention[k], grid, block, &mut params);
    }
    params.push(arg(&hd));
    g.launch(g.k.enc_attention_partial[k], grid, block, &mut params)
}
