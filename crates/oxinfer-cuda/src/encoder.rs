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
//! Rotary positions (NomicBERT, ModernBERT, Qwen 3.5's vision tower) rotate the queries and keys
//! in that buffer before attention (`enc_rope`), from tables the host makes once per pass: one
//! per distinct rotation of the batch's sequences and layers (dynamic NTK scaling gives a long
//! sequence its own, ModernBERT's local and global layers have theirs, a vision tower's patch
//! grid gives each image its rows), as long as its longest sequence, and each layer's row of
//! them for every token.
//!
//! Heads of a width without a kernel of their own ([`ENCODER_HEAD_DIMS`]: Qwen 3.5's vision
//! tower's 72, the tiny models' 8) run on the next wider one with the lanes past the head idle.
//! Declined (the CPU runs the plan): heads wider than 256, rotations of several widths or wider
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
    if h.head_dim == 0 || h.head_dim > widest || h.n_heads * h.head_dim != plan.dim {
        return Some("head width");
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
    let Ok(rope) = rope_tables(
        plan.layers.iter().map(|l| l.rope_of),
        lens,
        plan.heads.head_dim,
    ) else {
        return Ok(false);
    };
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
        let shapes_fit = m[..4]
            .iter()
            .all(|w| w.is_some_and(|w| w.rows == dim && w.cols == dim))
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
    let qkv = g.scratch(Slot::EncQkv, t * 3 * dim * 4)?;
    let att = g.scratch(Slot::EncAtt, t * dim * 4)?;
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
    let gemm = |w: &EncoderMatrix, x: CUdeviceptr, y: CUdeviceptr, ldy: usize| {
        cublas_ld(g, w.buf.ptr(), f32_ty, x, y, ldy, t, w.rows, w.cols, None)
    };
    let pre = matches!(plan.order, NormOrder::Pre { .. });
    // Pre-norm: the first block's attention input (the stream itself without a norm).
    if let (true, Some(n)) = (pre, params.first().and_then(|p| p.attn_norm)) {
        residual_norm(g, hidden, None, None, n, &at, normed, dim, t)?;
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
        for (i, w) in [q, k, v].into_iter().enumerate() {
            gemm(w, input, qkv + (i * dim * 4) as CUdeviceptr, 3 * dim)?;
        }
        if let Some(b) = lp.qkv_bias {
            bias_act(g, qkv, Some(at(b)), t * 3 * dim, 3 * dim, -1)?;
        }
        if let Some((cs, sn, rows, tables)) = &rope {
            if let Some(map) = tables.layer_map[li] {
                let rows = rows + (map * t * 4) as CUdeviceptr;
                let h = &plan.heads;
                let (t_l, heads, hd) = (t as i64, h.n_heads as i32, h.head_dim as i32);
                let (half_i, il) = (tables.half as i32, i32::from(tables.interleaved));
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
                ];
                launch_1d(g, g.k.enc_rope, t * 2 * h.n_heads * tables.half, params)?;
            }
        }
        attention(g, plan, l, qkv, att, seq, lens)?;
        gemm(o, att, y, dim)?;
        // Post-norm: the stream normalized in place. Pre-norm: the stream kept, the MLP's
        // normalized input beside it.
        let mlp_in = if pre { normed } else { hidden };
        if pre {
            residual_norm(
                g,
                hidden,
                Some(y),
                lp.o_bias.map(at),
                lp.ffn_norm,
                &at,
                normed,
                dim,
                t,
            )?;
        } else {
            let norm = lp.attn_norm.expect("checked by unsupported");
            residual_norm(
                g,
                hidden,
                Some(y),
                lp.o_bias.map(at),
                norm,
                &at,
                hidden,
                dim,
                t,
            )?;
        }
        let width = up_w.rows;
        match gate_w {
            None => {
                gemm(up_w, mlp_in, gate, width)?;
                bias_act(g, gate, lp.up_bias.map(at), t * width, width, act)?;
            }
            Some(gw) => {
                gemm(gw, mlp_in, gate, width)?;
                gemm(up_w, mlp_in, up, width)?;
                for (y, b) in [(gate, lp.gate_bias), (up, lp.up_bias)] {
                    if let Some(b) = b {
                        bias_act(g, y, Some(at(b)), t * width, width, -1)?;
                    }
                }
                let n = (t * width) as i64;
                let params = &mut [arg(&gate), arg(&up), arg(&n), arg(&act)];
                launch_1d(g, g.k.enc_gated_act, t * width, params)?;
            }
        }
        gemm(down, gate, y, dim)?;
        // Post-norm: in place. Pre-norm: the next block's attention input beside the stream,
        // or after the last block the final norm in place.
        let (norm, dst) = match (pre, params.get(li + 1)) {
            (false, _) => (Some(lp.ffn_norm), hidden),
            (true, Some(next)) => (next.attn_norm, normed),
            (true, None) => (final_norm, hidden),
        };
        let bias = lp.down_bias.map(at);
        match norm {
            Some(n) => residual_norm(g, hidden, Some(y), bias, n, &at, dst, dim, t)?,
            None => unreachable!("checked by unsupported"),
        }
    }
    g.download(out, hidden)?;
    Ok(true)
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
/// is another buffer (`y` `None`: `out = norm(x)`); `at` maps packed offsets to addresses.
#[allow(clippy::too_many_arguments)]
fn residual_norm(
    g: &Gpu,
    x: CUdeviceptr,
    y: Option<CUdeviceptr>,
    bias: Option<CUdeviceptr>,
    norm: NormAt,
    at: &dyn Fn(usize) -> CUdeviceptr,
    out: CUdeviceptr,
    dim: usize,
    t: usize,
) -> Result<(), String> {
    let (eps, y, yb, d) = (norm.eps, y.unwrap_or(0), bias.unwrap_or(0), dim as i32);
    let (w, b) = (at(norm.gain), at(norm.bias));
    let params = &mut [
        arg(&x),
        arg(&y),
        arg(&yb),
        arg(&w),
        arg(&b),
        arg(&d),
        arg(&eps),
        arg(&out),
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
/// `[T, 3 dim]` into `out` `[T, dim]`; `seq` holds the sequences' first rows and the total on
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
    let (heads, ld, scale) = (h.n_heads as i32, (3 * plan.dim) as i32, h.scale);
    let hd = h.head_dim as i32;
    let window = l.window.map_or(-1, |w| w as i32);
    let mut params = vec![
        arg(&qkv),
        arg(&out),
        arg(&seq),
        arg(&heads),
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
