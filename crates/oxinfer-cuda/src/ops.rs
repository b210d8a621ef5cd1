//! Kernel launchers: one function per kernel of `kernels/`, which passes the arguments in the
//! order the kernel declares them and picks its grid. Every other module queues kernels through
//! these; all pointers are device addresses in the [`Gpu`]'s context, f32 unless said, and the
//! work is queued on its stream.

use crate::gpu::Gpu;
use crate::kernels::{
    flash_attention_smem, CONV_TILE, FLASH_ATTENTION_HEAD_DIMS, FLASH_ATTENTION_ROWS, GEMM_SMEM,
    GEMM_TILE,
};
use crate::kv::{kernel_index, KvLayout};
use crate::matrix::DeviceMatrix;
use cudarc::driver::sys::{self, CUdeviceptr, CUfunction};
use oxinfer::backend::{AttentionGeom, AttnShape, ConvGeom, GateAct};
use oxinfer::plan::KvType;
use oxinfer_kernels::WeightFormat;
use std::ffi::c_void;

/// Threads per block of the element-wise kernels.
const THREADS: u32 = 256;

/// The widest row `add_rms_norm_q8` takes: its 1024 threads hold 16 values each
/// (`RMS_THREADS` · `RMS_PER` in `kernels/stack.cu`).
pub(crate) const RMS_MAX_DIM: usize = 1024 * 16;

/// Threads per block of the GroupNorm statistics kernel.
const STATS_THREADS: u32 = 512;

/// One kernel argument as `cuLaunchKernel` takes it: the address of the value, which must
/// live until the launch returns.
pub(crate) fn arg<T>(v: &T) -> *mut c_void {
    v as *const T as *mut c_void
}

/// Launches `f` with at least `n` threads in blocks of [`THREADS`].
pub(crate) fn launch_1d(
    g: &Gpu,
    f: CUfunction,
    n: usize,
    params: &mut [*mut c_void],
) -> Result<(), String> {
    let grid = (n.div_ceil(THREADS as usize) as u32, 1, 1);
    g.launch(f, grid, (THREADS, 1, 1), params)
}

/// Fused attention: `q`/`out` `[t, n_heads * head_dim]` f32, `kv` = (`k`, `v`, how they are
/// stored), each `[pos0 + t, n_kv_heads * head_dim]` (`q` rotated like the keys when they are:
/// `qkv_post` does both; the values' rotation is undone on `out` here). With `tensor_cores`,
/// heads of 64, 128 or 256 run on the tensor cores (`flash_attention_h*`: f16-rounded inputs,
/// f32 sums) unless `OXINFER_CUDA_FLASH_ATTENTION=0`; otherwise, and for other head sizes, in
/// f32 (`attention_f32*`).
pub(crate) fn attention(
    g: &Gpu,
    q: CUdeviceptr,
    kv: (CUdeviceptr, CUdeviceptr, KvLayout),
    out: CUdeviceptr,
    a: &AttentionGeom,
    tensor_cores: bool,
) -> Result<(), String> {
    let sh = &a.shape;
    let (k, v, layout) = kv;
    let elem = kernel_index(layout.elem);
    let [t, pos0, h, kvh, hd] =
        [a.t, a.pos0, sh.n_heads, sh.n_kv_heads, sh.head_dim].map(|v| v as i32);
    let window = sh.window.map_or(0, |w| w.min(i32::MAX as usize) as i32);
    let softcap = sh.softcap.unwrap_or(0.0);
    let mut params = [
        arg(&q),
        arg(&k),
        arg(&v),
        arg(&out),
        arg(&t),
        arg(&pos0),
        arg(&h),
        arg(&kvh),
        arg(&hd),
        arg(&sh.scale),
        arg(&window),
        arg(&softcap),
    ];
    let flash = FLASH_ATTENTION_HEAD_DIMS
        .iter()
        .position(|&d| d == sh.head_dim)
        .filter(|_| tensor_cores && flash_attention_enabled());
    if let Some(i) = flash {
        // The head size is in the kernel's name, not among its arguments.
        params.copy_within(9.., 8);
        let grid = (
            a.t.div_ceil(FLASH_ATTENTION_ROWS) as u32,
            sh.n_heads as u32,
            1,
        );
        let smem = flash_attention_smem(sh.head_dim) as u32;
        g.launch_smem(
            g.k.flash_attention[elem][i],
            grid,
            (128, 1, 1),
            smem,
            &mut params[..11],
        )?;
    } else {
        let warps = sh.n_heads * a.t.div_ceil(4);
        let blocks = (warps * 32).div_ceil(128) as u32;
        let kernel = g.k.attention[elem];
        g.launch(kernel, (blocks, 1, 1), (128, 1, 1), &mut params)?;
    }
    if layout.vrot == 0 {
        return Ok(());
    }
    let heads = (a.t * sh.n_heads) as i64;
    g.launch(
        g.k.rotate_heads,
        ((heads as usize * 32).div_ceil(128) as u32, 1, 1),
        (128, 1, 1),
        &mut [arg(&out), arg(&heads), arg(&hd), arg(&layout.vrot)],
    )
}

/// Whether the tensor-core prompt attention is on (`OXINFER_CUDA_FLASH_ATTENTION`, default on;
/// `0` runs every prompt's attention in f32).
fn flash_attention_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("OXINFER_CUDA_FLASH_ATTENTION").as_deref() != Ok("0"))
}

/// Most query rows the split (flash-decoding) attention takes; more use [`attention`].
pub(crate) const SPLIT_ATTN_MAX_ROWS: usize = 8;

/// Slices of the keys the split attention uses for `a` (enough warps to fill the device, at
/// least 32 keys per slice on average, 8 where the heads are few ([`split_count`]), at most
/// 128 slices). The key count
/// is rounded up to a power of two first, so consecutive decode steps share the count (and a
/// captured step's launch stays valid) until the cache length crosses the next power of two.
pub(crate) fn attention_splits(a: &AttentionGeom, elem: KvType) -> usize {
    split_count(a.t, a.n_keys(), &a.shape, elem)
}

/// [`attention_splits`] for `rows` query rows (of one sequence or several) of which the longest
/// sees `keys` positions.
pub(crate) fn split_count(rows: usize, keys: usize, shape: &AttnShape, elem: KvType) -> usize {
    let keys = match shape.window {
        Some(w) => w.min(keys),
        None => keys,
    }
    .next_power_of_two();
    // A warp per (row, head, slice), or per (row, KV head, slice) when grouped.
    let heads = if grouped_attention(shape, elem) {
        shape.n_kv_heads
    } else {
        shape.n_heads
    };
    let warps = (rows * heads).max(1);
    let mut slices = keys.div_ceil(split_attention_keys().unwrap_or(32)).max(1);
    if warps <= FEW_ATTN_WARPS && split_attention_keys().is_none() {
        // Few heads leave most of the device idle and each warp a long chain of dependent
        // loads: up to 16 slices (the fused decode kernel's warps) of at least 8 keys.
        slices = slices.max(keys.div_ceil(8).min(16));
    }
    (2048 / warps).clamp(1, 128).min(slices)
}

/// Warps (rows × heads) up to which [`split_count`] cuts slices of 8 keys instead of 32. On an
/// H100 (docs/gpu.md, session 22) 8-key slices made Gemma 3 270M (4 heads) and SmolLM2-135M
/// (9 heads) decode 4–10 % faster at depths up to 128; session 8 measured them slower on the
/// 7B's 28 heads.
const FEW_ATTN_WARPS: usize = 16;

/// Whether the split attention over a cache of `elem` runs a KV group's query heads in one
/// warp (`attention_split_gqa`: block-type caches, Q8_0 / Q4_0, with 2 to 8 query heads per
/// KV head of at most 128; unless `OXINFER_CUDA_ATTN_GQA=0`), decoding each cached key and
/// value once for the group. On an H100 (docs/gpu.md, session 20) it made a Q8_0 cache's decode
/// 2.0–2.5× faster at depth 16k–32k, but an f32 cache's 20 % slower (fewer warps in flight),
/// so the value types keep a warp per query head.
pub(crate) fn grouped_attention(shape: &AttnShape, elem: KvType) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("OXINFER_CUDA_ATTN_GQA").as_deref() != Ok("0"));
    let (h, kvh, hd) = (shape.n_heads, shape.n_kv_heads, shape.head_dim);
    on && matches!(elem, KvType::Q8_0 | KvType::Q4_0)
        && kvh > 0
        && h.is_multiple_of(kvh)
        && (2..=8).contains(&(h / kvh))
        && hd <= 128
        && hd.is_multiple_of(32)
}

/// The fewest keys per slice of the split attention on average when
/// `OXINFER_CUDA_ATTN_SPLIT_KEYS` sets it (a power of two from 4 to 256; for measuring: it
/// replaces [`split_count`]'s rule). Fewer keys per slice shorten each warp's chain of dependent
/// loads and give the merge more partials.
fn split_attention_keys() -> Option<usize> {
    static KEYS: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *KEYS.get_or_init(|| {
        std::env::var("OXINFER_CUDA_ATTN_SPLIT_KEYS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|k| k.is_power_of_two() && (4..=256).contains(k))
    })
}

/// f32 values of the partials buffer the split attention needs for `rows` query rows of
/// heads `shape` with `splits` slices.
pub(crate) fn attention_part_len(rows: usize, shape: &AttnShape, splits: usize) -> usize {
    rows * shape.n_heads * splits * (shape.head_dim + 2)
}

/// Whether [`attention_split`] can quantize its output to int8 blocks of `block` for rows of
/// `n_heads` heads of `head_dim`: its merge kernel covers max(block, head_dim) ≤ 256 values per
/// block, which must hold whole heads and whole int8 blocks and tile the row.
pub(crate) fn split_attention_quantizes(n_heads: usize, head_dim: usize, block: usize) -> bool {
    let span = block.max(head_dim);
    span <= 256
        && head_dim.is_multiple_of(32)
        && span.is_multiple_of(block)
        && span.is_multiple_of(head_dim)
        && (n_heads * head_dim).is_multiple_of(span)
}

/// Decode attention split over the keys (`splits` slices, partials in `part` of
/// [`attention_part_len`] f32): the result of [`attention`] for `a.t` query rows, each of a
/// sequence of at most [`SPLIT_ATTN_MAX_ROWS`] new rows, whose caches (`kv`) and positions (as
/// i32 at `rpos`) the kernel reads on the device (`a.pos0` is not used: a captured step stays
/// valid). With
/// `quant`, the merge also quantizes `out` to int8 blocks there (`n_heads · head_dim` a
/// multiple of the block; the pointers at this call's first row), as [`quant_act_i8`] would.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_split(
    g: &Gpu,
    q: CUdeviceptr,
    kv: KvRows,
    out: CUdeviceptr,
    part: CUdeviceptr,
    rpos: CUdeviceptr,
    a: &AttentionGeom,
    splits: usize,
    quant: Option<Int8Out>,
) -> Result<(), String> {
    let sh = &a.shape;
    let [t, h, kvh, hd, s] =
        [a.t, sh.n_heads, sh.n_kv_heads, sh.head_dim, splits].map(|v| v as i32);
    let window = sh.window.map_or(0, |w| w.min(i32::MAX as usize) as i32);
    let softcap = sh.softcap.unwrap_or(0.0);
    let elem = kernel_index(kv.layout.elem);
    let (split_kernel, heads) = if grouped_attention(sh, kv.layout.elem) {
        (g.k.attention_split_gqa[elem], sh.n_kv_heads)
    } else if sh.head_dim <= 128 {
        (g.k.attention_split_h128[elem], sh.n_heads)
    } else {
        (g.k.attention_split[elem], sh.n_heads)
    };
    let warps = a.t * heads * splits;
    g.launch(
        split_kernel,
        ((warps * 32).div_ceil(128) as u32, 1, 1),
        (128, 1, 1),
        &mut [
            arg(&q),
            arg(&kv.table),
            arg(&kv.rseq),
            arg(&part),
            arg(&t),
            arg(&rpos),
            arg(&h),
            arg(&kvh),
            arg(&hd),
            arg(&sh.scale),
            arg(&window),
            arg(&softcap),
            arg(&s),
        ],
    )?;
    attention_merge(g, part, out, a, splits, kv.layout.vrot, quant)
}

/// The merge of [`attention_split`]'s `splits` partials per
/// (row, head) into `out` `[t, n_heads * head_dim]`, undoing the values' rotation in chunks of
/// `vrot` (0: none), quantizing it to int8 blocks there with `quant` (see [`attention_split`]).
pub(crate) fn attention_merge(
    g: &Gpu,
    part: CUdeviceptr,
    out: CUdeviceptr,
    a: &AttentionGeom,
    splits: usize,
    vrot: i32,
    quant: Option<Int8Out>,
) -> Result<(), String> {
    let sh = &a.shape;
    let [t, h, hd, s] = [a.t, sh.n_heads, sh.head_dim, splits].map(|v| v as i32);
    if let Some(o) = quant {
        // A block per max(block, head) values, a warp per head in it.
        let span = o.layout.block.max(sh.head_dim);
        let blocks = a.t * sh.n_heads * sh.head_dim / span;
        let b = o.layout.block as i32;
        let gnb = o.layout.gnb(sh.n_heads * sh.head_dim);
        return g.launch(
            g.k.attention_combine_q8,
            (blocks as u32, 1, 1),
            ((32 * span / sh.head_dim) as u32, 1, 1),
            &mut [
                arg(&part),
                arg(&out),
                arg(&o.q),
                arg(&o.d),
                arg(&o.s),
                arg(&t),
                arg(&h),
                arg(&hd),
                arg(&s),
                arg(&b),
                arg(&vrot),
                arg(&gnb),
            ],
        );
    }
    let warps = a.t * sh.n_heads;
    g.launch(
        g.k.attention_combine,
        ((warps * 32).div_ceil(128) as u32, 1, 1),
        (128, 1, 1),
        &mut [
            arg(&part),
            arg(&out),
            arg(&t),
            arg(&h),
            arg(&hd),
            arg(&s),
            arg(&vrot),
        ],
    )
}

/// `n` f32 activations at `x` (rows of `row` values) quantized to int8 blocks as the CPU
/// kernels quantize them, laid out as `layout` says: the int8 values at `q`, one f32 scale per
/// block at `scales`, then the run sums.
pub(crate) fn quant_act_i8(
    g: &Gpu,
    x: CUdeviceptr,
    q: CUdeviceptr,
    scales: CUdeviceptr,
    n: usize,
    row: usize,
    layout: Int8Layout,
) -> Result<(), String> {
    let block = layout.block;
    let nblocks = (n / block) as i64;
    let (b, gnb) = (block as i32, layout.gnb(row));
    let sums = int8_sums(scales, n, block);
    let params = &mut [
        arg(&x),
        arg(&q),
        arg(&scales),
        arg(&sums),
        arg(&nblocks),
        arg(&b),
        arg(&gnb),
    ];
    launch_1d(g, g.k.quant_act_i8, n / block * 32, params)
}

/// Bytes beside `n` int8 activation values in blocks of `block` (32 or 256): one f32 scale per
/// block (their count rounded up to 4, so what follows is 16-byte aligned), then the i32 sum of
/// each run of 32 values (the int8 GEMV's input layout; `xs` in gemv.cu).
pub(crate) fn int8_side_bytes(n: usize, block: usize) -> usize {
    (n / block).next_multiple_of(4) * 4 + n.div_ceil(32) * 4
}

/// Where the run sums of `n` int8 values in blocks of `block` start, after their scales at
/// `scales` ([`int8_side_bytes`]).
pub(crate) fn int8_sums(scales: CUdeviceptr, n: usize, block: usize) -> CUdeviceptr {
    scales + ((n / block).next_multiple_of(4) * 4) as CUdeviceptr
}

/// The kernels' id of a gated activation (0 SiLU, 1 tanh-GELU).
fn act_id(act: GateAct) -> i32 {
    match act {
        GateAct::Silu => 0,
        GateAct::GeluTanh => 1,
    }
}

/// `gate ← act(gate) · up` over `n` values (the CPU's order: activation in f32, then the
/// product).
pub(crate) fn gated_act(
    g: &Gpu,
    gate: CUdeviceptr,
    up: CUdeviceptr,
    n: usize,
    act: GateAct,
) -> Result<(), String> {
    let (n_l, a) = (n as i64, act_id(act));
    let params = &mut [arg(&gate), arg(&up), arg(&n_l), arg(&a)];
    launch_1d(g, g.k.gated_act_f32, n, params)
}

/// Row-wise RMSNorm of `rows` rows of `dim`: `y = x / rms(x) · w` (`y` may be `x`).
pub(crate) fn rms_norm(
    g: &Gpu,
    x: CUdeviceptr,
    w: CUdeviceptr,
    y: CUdeviceptr,
    rows: usize,
    dim: usize,
    eps: f32,
) -> Result<(), String> {
    add_rms_norm_q8(g, x, None, w, y, None, rows, dim, eps)
}

/// How an int8 GEMV input is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Int8Layout {
    /// Values per int8 block (one scale each): 32, or 256 for the K-quants.
    pub block: usize,
    /// Whether a one-row input's values lie in the grouped layout (blocks of 256 in groups of
    /// eight, their 16-byte chunks interleaved: `grouped_offset` in `kernels/common.cuh`), which
    /// the one-row Q4_K and Q6_K GEMVs read with contiguous warp loads. Scales and run sums
    /// keep their natural order.
    pub grouped: bool,
}

impl Int8Layout {
    /// The kernels' `gnb` for rows of `row` values: blocks of 256 per row when grouped, else 0.
    pub(crate) fn gnb(self, row: usize) -> i32 {
        if self.grouped {
            (row / 256) as i32
        } else {
            0
        }
    }
}

/// Where the int8 quantization of a fused kernel's output goes: values `q` (`[n]` int8), one
/// f32 scale per `layout.block` values at `d` and the run sums at `s` ([`int8_side_bytes`]).
#[derive(Clone, Copy)]
pub(crate) struct Int8Out {
    pub q: CUdeviceptr,
    pub d: CUdeviceptr,
    /// The i32 sum of each run of 32 values (`[n / 32]`).
    pub s: CUdeviceptr,
    pub layout: Int8Layout,
}

/// The residual rows a norm kernel adds to `x` before normalizing (`[rows, dim]` f32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Residual {
    pub rows: CUdeviceptr,
    /// When given, the rows are first RMS-normalized with this gain (`[dim]`), as [`rms_norm`]
    /// in place would: Gemma's post-attention / post-MLP norms.
    pub norm: Option<CUdeviceptr>,
}

/// The arguments the norm kernels share after their inputs (`w, y, q, dq, qs, rows, dim, eps,
/// B, gnb` in `kernels/stack.cu`), for rows of `dim` quantized to `out` when given.
struct NormArgs {
    w: CUdeviceptr,
    y: CUdeviceptr,
    q: CUdeviceptr,
    d: CUdeviceptr,
    qs: CUdeviceptr,
    rows: i32,
    dim: i32,
    eps: f32,
    block: i32,
    gnb: i32,
}

impl NormArgs {
    fn new(
        w: CUdeviceptr,
        y: CUdeviceptr,
        out: Option<Int8Out>,
        rows: usize,
        dim: usize,
        eps: f32,
    ) -> Self {
        let (q, d, qs, block, gnb) = out.map_or((0, 0, 0, 32, 0), |o| {
            (o.q, o.d, o.s, o.layout.block as i32, o.layout.gnb(dim))
        });
        let (rows, dim) = (rows as i32, dim as i32);
        NormArgs {
            w,
            y,
            q,
            d,
            qs,
            rows,
            dim,
            eps,
            block,
            gnb,
        }
    }

    /// `lead` (the kernel's input pointers), then the shared arguments.
    fn params(&self, lead: &[*mut c_void]) -> Vec<*mut c_void> {
        let mut p = lead.to_vec();
        p.extend([
            arg(&self.w),
            arg(&self.y),
            arg(&self.q),
            arg(&self.d),
            arg(&self.qs),
            arg(&self.rows),
            arg(&self.dim),
            arg(&self.eps),
            arg(&self.block),
            arg(&self.gnb),
        ]);
        p
    }
}

/// `x += res` (when given; its rows normalized first when `res.norm` is), then
/// `y = x / rms(x) · w` row-wise over `rows` rows of `dim`, then (when `out` is given) `y`
/// quantized to int8 blocks like [`quant_act_i8`]: the arithmetic of [`rms_norm`] (for the
/// residual), [`add`], [`rms_norm`] and [`quant_act_i8`] in one kernel, bit for bit (`y` may be
/// `x`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn add_rms_norm_q8(
    g: &Gpu,
    x: CUdeviceptr,
    res: Option<Residual>,
    w: CUdeviceptr,
    y: CUdeviceptr,
    out: Option<Int8Out>,
    rows: usize,
    dim: usize,
    eps: f32,
) -> Result<(), String> {
    if dim > RMS_MAX_DIM {
        return Err(format!(
            "RMSNorm over rows of {dim}: the device kernel takes at most {RMS_MAX_DIM}"
        ));
    }
    let na = NormArgs::new(w, y, out, rows, dim, eps);
    let per = rms_per_variant(dim);
    let (grid, block) = ((rows as u32, 1, 1), (norm_threads(dim), 1, 1));
    match res {
        Some(Residual {
            rows: res,
            norm: Some(res_w),
        }) => {
            let mut params = na.params(&[arg(&x), arg(&res), arg(&res_w)]);
            g.launch(g.k.add_normed_rms_norm_q8[per], grid, block, &mut params)
        }
        _ => {
            let res = res.map_or(0, |r| r.rows);
            let mut params = na.params(&[arg(&x), arg(&res)]);
            g.launch(g.k.add_rms_norm_q8[per], grid, block, &mut params)
        }
    }
}

/// Threads of a norm kernel's block for rows of `dim`: one per value up to 1,024 (whole warps),
/// each holding up to 16 values in registers; the sliced kernel takes the same, so every block
/// reduces a row in the same order.
fn norm_threads(dim: usize) -> u32 {
    dim.next_multiple_of(32).min(1024) as u32
}

/// Which of the norm kernels' variants (1, 4, 8 or 16 values a thread: `add_rms_norm_q8_p1`,
/// `_p4`, `_p8`, the plain one in `kernels/stack.cu`) covers rows of `dim` on
/// [`norm_threads`]: the narrowest (fewer registers, the gains loaded with the row for up to
/// 4), unless `OXINFER_CUDA_NORM_NARROW=0` (always 16, for measuring). Every variant gives the
/// same bits.
pub(crate) fn rms_per_variant(dim: usize) -> usize {
    static NARROW: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let narrow =
        *NARROW.get_or_init(|| !std::env::var("OXINFER_CUDA_NORM_NARROW").is_ok_and(|v| v == "0"));
    match dim.div_ceil(norm_threads(dim).max(1) as usize) {
        1 if narrow => 0,
        2..=4 if narrow => 1,
        5..=8 if narrow => 2,
        _ => 3,
    }
}

/// Values per block of [`rms_norm_q8_slices`]' grid (`RMS_SLICE` in `kernels/stack.cu`).
const RMS_SLICE: usize = 256;

/// `y = x / rms(x) · w` row-wise over `rows` rows of `dim`, then (when `out` is given) `y`
/// quantized to int8 blocks like [`quant_act_i8`]: [`add_rms_norm_q8`]'s arithmetic without the
/// residual add, bit for bit, over a grid of (row, 256-value slice) blocks that each reduce the
/// whole row, so nothing is stored and read back (decode rows). `y` must not be `x`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rms_norm_q8_slices(
    g: &Gpu,
    x: CUdeviceptr,
    w: CUdeviceptr,
    y: CUdeviceptr,
    out: Option<Int8Out>,
    rows: usize,
    dim: usize,
    eps: f32,
) -> Result<(), String> {
    if dim > RMS_MAX_DIM || x == y {
        return Err(format!(
            "sliced RMSNorm over rows of {dim} (in place: {}): the kernel takes at most \
             {RMS_MAX_DIM}, out of place",
            x == y
        ));
    }
    let na = NormArgs::new(w, y, out, rows, dim, eps);
    // The same threads as add_rms_norm_q8, so each block's reduction is the same.
    g.launch(
        g.k.rms_norm_q8_slices,
        (rows as u32, dim.div_ceil(RMS_SLICE) as u32, 1),
        (norm_threads(dim), 1, 1),
        &mut na.params(&[arg(&x)]),
    )
}

/// `gate ← act(gate) · up` over `n` values (rows of `row`), quantized to int8 blocks into
/// `out`: the arithmetic of [`gated_act`] and [`quant_act_i8`] in one kernel (`n` a multiple
/// of the block).
pub(crate) fn gated_act_q8(
    g: &Gpu,
    gate: CUdeviceptr,
    up: CUdeviceptr,
    out: Int8Out,
    n: usize,
    row: usize,
    act: GateAct,
) -> Result<(), String> {
    let block = out.layout.block;
    let nblocks = (n / block) as i64;
    let (b, a, gnb) = (block as i32, act_id(act), out.layout.gnb(row));
    let params = &mut [
        arg(&gate),
        arg(&up),
        arg(&out.q),
        arg(&out.d),
        arg(&out.s),
        arg(&nblocks),
        arg(&b),
        arg(&a),
        arg(&gnb),
    ];
    launch_1d(g, g.k.gated_act_q8, n / block * 32, params)
}

/// Where one sequence's new rows go and what they go through in [`qkv_post`]: the device
/// addresses of the optional biases, QK-norm gains and the RoPE table, the sequence's cache
/// bases for this layer and the rows' positions (`[t]` i32 for the whole pass).
#[derive(Clone, Copy)]
pub(crate) struct QkvPost {
    pub q_bias: Option<CUdeviceptr>,
    pub k_bias: Option<CUdeviceptr>,
    pub v_bias: Option<CUdeviceptr>,
    pub q_norm: Option<CUdeviceptr>,
    pub k_norm: Option<CUdeviceptr>,
    /// `[t, half]` each.
    pub cos: CUdeviceptr,
    pub sin: CUdeviceptr,
    pub half: usize,
    pub interleaved: bool,
    /// This layer's cache of each row's sequence (the table and `rseq` from row 0 of the pass).
    pub kv: KvRows,
    /// Each row's position (i32, from row 0 of the pass).
    pub pos: CUdeviceptr,
    pub eps: f32,
}

/// Where the keys and values of each query row are, read by the kernels on the device: `table`
/// holds per sequence the device addresses of row 0 of its keys and of its values in one
/// layer's cache (two u64 each), `rseq` each row's sequence index (i32 per row); every cache
/// of the pass stores its rows as `layout` says.
#[derive(Clone, Copy)]
pub(crate) struct KvRows {
    pub table: CUdeviceptr,
    pub rseq: CUdeviceptr,
    pub layout: KvLayout,
}

impl KvRows {
    /// One sequence's table entry as the kernels read it: the addresses of row 0 of its keys and
    /// of its values, each a little-endian u64 in two u32 words.
    pub fn entry(k: CUdeviceptr, v: CUdeviceptr) -> [u32; 4] {
        [k as u32, (k >> 32) as u32, v as u32, (v >> 32) as u32]
    }

    /// The same table seen from row `row` on (`rseq` advanced by `row` entries).
    pub fn at_row(self, row: usize) -> Self {
        KvRows {
            rseq: self.rseq + (row * 4) as CUdeviceptr,
            ..self
        }
    }
}

/// Rows `row0 .. row0 + n` (of one sequence or several) after the q/k/v projections: biases, QK-norm and
/// RoPE as the CPU does them (bias, per-head RMSNorm in f64, then the rotation), the queries in place in `q`
/// (`[t, n_heads * hd]`), the keys and values of `kn` / `vn` (`[t, n_kv_heads * hd]`) into the
/// cache rows at each row's position, in one kernel.
#[allow(clippy::too_many_arguments)]
pub(crate) fn qkv_post(
    g: &Gpu,
    q: CUdeviceptr,
    kn: CUdeviceptr,
    vn: CUdeviceptr,
    p: &QkvPost,
    row0: usize,
    n: usize,
    heads: (usize, usize, usize),
) -> Result<(), String> {
    let (h, kvh, hd) = heads;
    let z = |o: Option<CUdeviceptr>| o.unwrap_or(0);
    let [qb, kb, vb, qn, kw] = [p.q_bias, p.k_bias, p.v_bias, p.q_norm, p.k_norm].map(z);
    let [r0, n_i, h_i, kvh_i, hd_i, half, il] =
        [row0, n, h, kvh, hd, p.half, usize::from(p.interleaved)].map(|v| v as i32);
    let kt = kernel_index(p.kv.layout.elem) as i32;
    let params = &mut [
        arg(&q),
        arg(&kn),
        arg(&vn),
        arg(&p.kv.table),
        arg(&p.kv.rseq),
        arg(&qb),
        arg(&kb),
        arg(&vb),
        arg(&qn),
        arg(&kw),
        arg(&p.cos),
        arg(&p.sin),
        arg(&p.pos),
        arg(&r0),
        arg(&n_i),
        arg(&h_i),
        arg(&kvh_i),
        arg(&hd_i),
        arg(&half),
        arg(&il),
        arg(&p.eps),
        arg(&kt),
        arg(&p.kv.layout.krot),
        arg(&p.kv.layout.vrot),
    ];
    // One warp per (row, head of q, k and v); blocks of QKV_WARPS = 4 warps.
    let warps = n * (h + 2 * kvh);
    g.launch(
        g.k.qkv_post,
        (warps.div_ceil(4) as u32, 1, 1),
        (128, 1, 1),
        params,
    )
}

/// Scores `rows` logit rows (`logits` `[rows, vocab]`) against their targets (`targets`, one
/// i32 per row): `out` gets `[rows, 2]` f64, the target's log-probability and the row's first
/// argmax (`RowScore::from_logits`' arithmetic).
pub(crate) fn logit_scores(
    g: &Gpu,
    logits: CUdeviceptr,
    rows: usize,
    vocab: usize,
    targets: CUdeviceptr,
    out: CUdeviceptr,
) -> Result<(), String> {
    let v = vocab as i64;
    g.launch(
        g.k.logit_scores,
        (rows as u32, 1, 1),
        (1024, 1, 1),
        &mut [arg(&logits), arg(&v), arg(&targets), arg(&out)],
    )
}

/// `x += y` over `n` values.
pub(crate) fn add(g: &Gpu, x: CUdeviceptr, y: CUdeviceptr, n: usize) -> Result<(), String> {
    let n_l = n as i64;
    launch_1d(g, g.k.add, n, &mut [arg(&x), arg(&y), arg(&n_l)])
}

/// `x = cap · tanh(x / cap)` over `n` values.
pub(crate) fn softcap(g: &Gpu, x: CUdeviceptr, n: usize, cap: f32) -> Result<(), String> {
    let n_l = n as i64;
    launch_1d(g, g.k.softcap, n, &mut [arg(&x), arg(&n_l), arg(&cap)])
}

/// `dst[i, :] = src[idx[i], :]` for `n` rows of width `dim` (`idx`: `n` i32).
pub(crate) fn gather_rows(
    g: &Gpu,
    src: CUdeviceptr,
    idx: CUdeviceptr,
    dst: CUdeviceptr,
    n: usize,
    dim: usize,
) -> Result<(), String> {
    let (n_i, dim_i) = (n as i32, dim as i32);
    let params = &mut [arg(&src), arg(&idx), arg(&dst), arg(&n_i), arg(&dim_i)];
    launch_1d(g, g.k.gather_rows, n * dim, params)
}

/// Writes `max |x|` over `n` values into the first word of the f16 overflow guard `guard`
/// (three words `[max |x| as bits, alpha, beta]`).
pub(crate) fn amax(g: &Gpu, x: CUdeviceptr, n: usize, guard: CUdeviceptr) -> Result<(), String> {
    // The memset below is not recorded: run what a decode step recorded so far first.
    g.flush_recording()?;
    // SAFETY: `guard` holds at least one word in this context; queued on the stream.
    unsafe { sys::cuMemsetD32Async(guard, 0, 1, g.stream) }
        .result()
        .map_err(|e| format!("memset: {e:?}"))?;
    let n_l = n as i64;
    let blocks = n.div_ceil(THREADS as usize * 8).clamp(1, 1024) as u32;
    g.launch(
        g.k.amax_f32,
        (blocks, 1, 1),
        (THREADS, 1, 1),
        &mut [arg(&x), arg(&n_l), arg(&guard)],
    )
}

/// `n` values at `x` to IEEE f16 at `out`, divided by the power of two of `guard` (see
/// [`amax`]), which also receives cuBLAS's `alpha`/`beta`.
pub(crate) fn f32_to_f16_scaled(
    g: &Gpu,
    x: CUdeviceptr,
    out: CUdeviceptr,
    n: usize,
    guard: CUdeviceptr,
) -> Result<(), String> {
    let n_l = n as i64;
    let params = &mut [arg(&x), arg(&out), arg(&n_l), arg(&guard)];
    launch_1d(g, g.k.f32_to_f16_scaled, n, params)
}

/// `n` values at `x` quantized to int8 blocks of `block` (32 or 256) values as the CPU kernels
/// quantize them, written to `out` as the values `d·q`: f16 divided by the power of two of
/// `guard` when there is one (see [`amax`]), else f32.
pub(crate) fn quant_act(
    g: &Gpu,
    x: CUdeviceptr,
    out: CUdeviceptr,
    n: usize,
    block: usize,
    guard: Option<CUdeviceptr>,
) -> Result<(), String> {
    let nblocks = (n / block) as i64;
    let b = block as i32;
    let scale = guard.unwrap_or(0);
    // One warp per block; the f16 variant also takes the guard.
    let mut params = [arg(&x), arg(&out), arg(&nblocks), arg(&b), arg(&scale)];
    let threads = n / block * 32;
    match guard {
        Some(_) => launch_1d(g, g.k.quant_act_f16, threads, &mut params),
        None => launch_1d(g, g.k.quant_act_f32, threads, &mut params[..4]),
    }
}

/// `n` values at `x` to 16-bit floats at `out`: bf16, or IEEE f16 when `f16`.
pub(crate) fn f32_to_half(
    g: &Gpu,
    x: CUdeviceptr,
    out: CUdeviceptr,
    n: usize,
    f16: bool,
) -> Result<(), String> {
    let f = if f16 { g.k.f32_to_f16 } else { g.k.f32_to_bf16 };
    let n_l = n as i64;
    launch_1d(g, f, n, &mut [arg(&x), arg(&out), arg(&n_l)])
}

/// The in-tile dequantizing tensor-core GEMM: `y[t, rows] = x16[t, cols] · Wᵀ` with bf16
/// activations `x16` and quantized `w` (`cols` a multiple of `GEMM_BK`).
pub(crate) fn gemm_q(
    g: &Gpu,
    w: &DeviceMatrix,
    x16: CUdeviceptr,
    y: CUdeviceptr,
    t: usize,
) -> Result<(), String> {
    let f = g.k.gemm(w.format).ok_or("no GEMM kernel")?;
    let (bm, bn) = GEMM_TILE;
    let grid = (
        w.rows.div_ceil(bm as usize) as u32,
        t.div_ceil(bn as usize) as u32,
        1,
    );
    let (wp, rb) = (w.buf.ptr(), w.row_bytes as i64);
    let [t_i, n_i, k_i] = [t, w.rows, w.cols].map(|v| v as i32);
    g.launch_smem(
        f,
        grid,
        (THREADS, 1, 1),
        GEMM_SMEM,
        &mut [
            arg(&wp),
            arg(&rb),
            arg(&x16),
            arg(&y),
            arg(&t_i),
            arg(&n_i),
            arg(&k_i),
        ],
    )
}

/// Decodes quantized `w` whole into `dst` `[rows, cols]`: IEEE f16 when `f16`, else f32.
pub(crate) fn dequant(
    g: &Gpu,
    w: &DeviceMatrix,
    dst: CUdeviceptr,
    f16: bool,
) -> Result<(), String> {
    let f = if f16 {
        g.k.dequant_f16(w.format)
    } else {
        g.k.dequant_f32(w.format)
    }
    .ok_or("no decoder")?;
    let [rows, cols] = [w.rows, w.cols].map(|v| v as i32);
    let (wp, rb) = (w.buf.ptr(), w.row_bytes as i64);
    let params = &mut [arg(&wp), arg(&dst), arg(&rows), arg(&cols), arg(&rb)];
    // One thread per 16 weights.
    launch_1d(g, f, w.rows * w.cols / 16, params)
}

/// Decodes f16/bf16 `w` exactly into f32 at `dst` `[rows, cols]`.
pub(crate) fn half_to_f32(g: &Gpu, w: &DeviceMatrix, dst: CUdeviceptr) -> Result<(), String> {
    let n = w.rows * w.cols;
    let bf = i32::from(w.format == WeightFormat::BF16);
    let (src, n_l) = (w.buf.ptr(), n as i64);
    let params = &mut [arg(&src), arg(&dst), arg(&n_l), arg(&bf)];
    launch_1d(g, g.k.half_to_f32, n, params)
}

/// A convolution's input norm as the kernels take it.
pub(crate) struct ConvNorm {
    /// 0: no norm, 1: GroupNorm with `cpg` channels per group, 2: LayerNorm.
    pub mode: i32,
    pub cpg: i32,
    pub silu: i32,
    pub eps: f32,
    /// GroupNorm groups (statistics blocks); 0 otherwise.
    pub groups: usize,
    /// Device addresses of `[cin]` gamma and beta and the (mean, rstd) pairs (0 without norm).
    pub gamma: CUdeviceptr,
    pub beta: CUdeviceptr,
    pub stats: CUdeviceptr,
}

impl ConvNorm {
    /// No norm.
    pub const NONE: ConvNorm = ConvNorm {
        mode: 0,
        cpg: 0,
        silu: 0,
        eps: 0.0,
        groups: 0,
        gamma: 0,
        beta: 0,
        stats: 0,
    };
}

/// The statistics kernel (with a norm) and the implicit GEMM: `y` `[oh * ow, n_out]` from `x`
/// `[h * w, cin]` and f32 weights `w` `[n_out, k²·cin]`, on the tensor cores when `bf16`. The
/// tensor-core kernel's grid puts pixel tiles on `y` (at most 65535); beyond that the f32
/// kernel runs.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv(
    gpu: &Gpu,
    bf16: bool,
    x: CUdeviceptr,
    g: &ConvGeom,
    nd: &ConvNorm,
    w: CUdeviceptr,
    n_out: usize,
    y: CUdeviceptr,
) -> Result<(), String> {
    let hw = g.h * g.w;
    let (hw_i, cin_i) = (hw as i32, g.cin as i32);
    if nd.mode == 1 {
        gpu.launch(
            gpu.k.conv_stats_group,
            (nd.groups as u32, 1, 1),
            (STATS_THREADS, 1, 1),
            &mut [
                arg(&x),
                arg(&nd.stats),
                arg(&hw_i),
                arg(&cin_i),
                arg(&nd.cpg),
                arg(&nd.eps),
            ],
        )?;
    } else if nd.mode == 2 {
        let params = &mut [
            arg(&x),
            arg(&nd.stats),
            arg(&hw_i),
            arg(&cin_i),
            arg(&nd.eps),
        ];
        launch_1d(gpu, gpu.k.conv_stats_layer, hw * 32, params)?;
    }
    let [h, wd, cin, k, stride, oh, ow, n_out_i] =
        [g.h, g.w, g.cin, g.k, g.stride, g.oh, g.ow, n_out].map(|v| v as i32);
    let pixels = g.oh * g.ow;
    let (bm, bn) = (GEMM_TILE.0 as usize, GEMM_TILE.1 as usize);
    let (f, grid, smem) = if bf16 && pixels.div_ceil(bn) <= 65_535 {
        let grid = (n_out.div_ceil(bm) as u32, pixels.div_ceil(bn) as u32, 1);
        (gpu.k.conv_igemm_bf16, grid, GEMM_SMEM)
    } else {
        let grid = (
            pixels.div_ceil(CONV_TILE.0) as u32,
            n_out.div_ceil(CONV_TILE.1) as u32,
            1,
        );
        (gpu.k.conv_igemm_f32, grid, 0)
    };
    gpu.launch_smem(
        f,
        grid,
        (THREADS, 1, 1),
        smem,
        &mut [
            arg(&x),
            arg(&w),
            arg(&y),
            arg(&nd.stats),
            arg(&nd.gamma),
            arg(&nd.beta),
            arg(&h),
            arg(&wd),
            arg(&cin),
            arg(&k),
            arg(&stride),
            arg(&oh),
            arg(&ow),
            arg(&n_out_i),
            arg(&nd.mode),
            arg(&nd.cpg),
            arg(&nd.silu),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Slot;

    /// The CPU twin of the norm kernels for one row: `x += res` (normalized with `res_w` first
    /// when given), `y = x / rms(x) · w` (sums of squares in f64), and `y`'s int8 blocks of
    /// `block` (d = amax / 127, q = round(y / d)).
    fn norm_row(
        x: &mut [f32],
        res: &[f32],
        res_w: Option<&[f32]>,
        w: &[f32],
        eps: f32,
        block: usize,
    ) -> (Vec<f32>, Vec<i8>, Vec<f32>) {
        let inv = |v: &[f32]| {
            let ss: f64 = v.iter().map(|&a| a as f64 * a as f64).sum();
            (1.0 / (ss / v.len() as f64 + eps as f64).sqrt()) as f32
        };
        let inv_r = inv(res);
        for (i, xi) in x.iter_mut().enumerate() {
            let r = match res_w {
                Some(rw) => res[i] * inv_r * rw[i],
                None => res[i],
            };
            *xi += r;
        }
        let n = inv(x);
        let y: Vec<f32> = x.iter().zip(w).map(|(&a, &g)| a * n * g).collect();
        let (mut q, mut d) = (Vec::new(), Vec::new());
        for b in y.chunks(block) {
            let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
            let dd = amax / 127.0;
            let id = if amax == 0.0 { 0.0 } else { 1.0 / dd };
            q.extend(
                b.iter()
                    .map(|v| (v * id).round().clamp(-127.0, 127.0) as i8),
            );
            d.push(dd);
        }
        (y, q, d)
    }

    /// Every variant of the norm kernels (1, 4, 8 and 16 values a thread; plain and with the
    /// residual post-normalized; int8 blocks of 32 and 256) against [`norm_row`] on two rows:
    /// f32 results within a few ulps (the f64 sums are reduced in another order), int8 values
    /// within one step. Skipped without a CUDA device.
    #[test]
    fn norm_kernels_match_the_cpu_at_every_width() {
        if !crate::gpu::driver_present() {
            eprintln!("skipped: no CUDA driver");
            return;
        }
        let mut g = match crate::gpu::Gpu::open(0) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("skipped: no CUDA device ({e})");
                return;
            }
        };
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        let (rows, eps) = (2usize, 1e-6f32);
        for dim in [576usize, 640, 1152, 3584, 5376, 9216] {
            for normed in [false, true] {
                for block in [32usize, 256] {
                    if !dim.is_multiple_of(block) {
                        continue;
                    }
                    let n = rows * dim;
                    let x: Vec<f32> = (0..n).map(|_| rnd() * 3.0).collect();
                    let res: Vec<f32> = (0..n).map(|_| rnd()).collect();
                    let w: Vec<f32> = (0..dim).map(|_| 1.0 + rnd() * 0.5).collect();
                    let rw: Vec<f32> = (0..dim).map(|_| 1.0 + rnd() * 0.5).collect();
                    let buf = |g: &mut crate::gpu::Gpu, s: Slot, b: usize| g.scratch(s, b).unwrap();
                    let (xd, rd, wd, rwd) = (
                        buf(&mut g, Slot::X, n * 4),
                        buf(&mut g, Slot::Y, n * 4),
                        buf(&mut g, Slot::G, dim * 4),
                        buf(&mut g, Slot::U, dim * 4),
                    );
                    let (yd, qd) = (buf(&mut g, Slot::Norm, n * 4), buf(&mut g, Slot::X16, n));
                    let dd = buf(&mut g, Slot::XScale, int8_side_bytes(n, block));
                    for (p, v) in [(xd, &x), (rd, &res), (wd, &w), (rwd, &rw)] {
                        g.upload(p, v).unwrap();
                    }
                    let out = Int8Out {
                        q: qd,
                        d: dd,
                        s: int8_sums(dd, n, block),
                        layout: Int8Layout {
                            block,
                            grouped: false,
                        },
                    };
                    let r = Residual {
                        rows: rd,
                        norm: normed.then_some(rwd),
                    };
                    add_rms_norm_q8(&g, xd, Some(r), wd, yd, Some(out), rows, dim, eps).unwrap();
                    let (mut gx, mut gy) = (vec![0f32; n], vec![0f32; n]);
                    let (mut gq, mut gd) = (vec![0i8; n], vec![0f32; n / block]);
                    g.download(&mut gx, xd).unwrap();
                    g.download(&mut gy, yd).unwrap();
                    g.download(&mut gq, qd).unwrap();
                    g.download(&mut gd, dd).unwrap();
                    let case = format!("dim {dim}, post-norm {normed}, blocks of {block}");
                    for row in 0..rows {
                        let at = row * dim..(row + 1) * dim;
                        let mut cx = x[at.clone()].to_vec();
                        let rwo = normed.then_some(&rw[..]);
                        let (cy, cq, cd) = norm_row(&mut cx, &res[at.clone()], rwo, &w, eps, block);
                        let close = |a: f32, b: f32| (a - b).abs() <= 1e-5 * b.abs().max(1.0);
                        for i in 0..dim {
                            assert!(close(gx[at.start + i], cx[i]), "{case}: x[{row}, {i}]");
                            assert!(close(gy[at.start + i], cy[i]), "{case}: y[{row}, {i}]");
                            let dq = (gq[at.start + i] as i32 - cq[i] as i32).abs();
                            assert!(dq <= 1, "{case}: q[{row}, {i}]");
                        }
                        for (k, &c) in cd.iter().enumerate() {
                            assert!(close(gd[row * dim / block + k], c), "{case}: d[{row}, {k}]");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn norm_variant_is_the_narrowest_that_covers_the_row() {
        // (row width, variant): 1 value a thread up to 1,024, then 4, 8 and 16 on 1,024 threads.
        for (dim, want) in [
            (576usize, 0usize),
            (640, 0),
            (1024, 0),
            (1152, 1),
            (3584, 1),
            (4096, 1),
            (5376, 2),
            (8192, 2),
            (8193, 3),
            (16384, 3),
        ] {
            assert_eq!(rms_per_variant(dim), want, "rows of {dim}");
        }
    }
}
