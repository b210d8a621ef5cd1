//! Host side of the matmuls: activation conversion, the in-tile dequantizing tensor-core GEMM,
//! the dequantize-then-cuBLAS alternative, and cuBLAS for float weights.

use crate::gemv::{self, GemvOut};
use crate::gpu::{DevBuf, Gpu, Slot};
use crate::kernels::{GEMM_BK, GEMV_MAX_ROWS};
use crate::matrix::DeviceMatrix;
use crate::ops;
use cudarc::cublas::sys as blas_sys;
use cudarc::driver::sys::CUdeviceptr;
use oxinfer_kernels::WeightFormat;
use std::ffi::c_void;
use std::sync::OnceLock;

/// How quantized weights are multiplied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantPath {
    /// Decode each weight tile into shared memory inside the tensor-core GEMM (nothing extra in
    /// device memory).
    Mma,
    /// Decode the whole matrix to f16 in a scratch buffer, then cuBLAS with activations
    /// quantized to int8 blocks like the CPU's (more memory traffic, cuBLAS's tuned kernels).
    DequantCublas,
    /// Exact products: weights decoded to f32 and activations quantized like the CPU's but kept
    /// as f32 values, multiplied by cuBLAS SGEMM (f32 FMA, no TF32): the CPU's sums up to f32
    /// rounding order, at an f32 GEMM's speed (41-50 TFLOP/s on an H200, 5-8 % of the f16
    /// tensor-core rate).
    /// For evaluations that must match the CPU reference (perplexity, `OXINFER_GPU_CHECK`).
    Exact,
}

impl QuantPath {
    /// From `OXINFER_CUDA_QGEMM` (`mma`, `cublas` or `exact`); dequantize + cuBLAS by
    /// default, the faster of the two fast paths on the H200 at every shape measured (see the
    /// README's GPU section).
    pub fn from_env() -> Self {
        Self::parse(std::env::var("OXINFER_CUDA_QGEMM").as_deref().unwrap_or(""))
            .unwrap_or(QuantPath::DequantCublas)
    }

    /// `mma`, `cublas` or `exact` (`None` for anything else).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "mma" => Some(QuantPath::Mma),
            "cublas" => Some(QuantPath::DequantCublas),
            "exact" => Some(QuantPath::Exact),
            _ => None,
        }
    }

    /// Bytes per element of the GEMM inputs this path prepares (activations and decoded
    /// weights): 4 for [`QuantPath::Exact`], else 2.
    pub(crate) fn elem_bytes(self) -> usize {
        if self == QuantPath::Exact {
            4
        } else {
            2
        }
    }
}

/// Device memory kept free when caching f16 decodings (for activations, scratch, cuBLAS).
const F16_CACHE_RESERVE: usize = 4 << 30;

/// Most activation rows of a product whose weight decoding is kept by default (batched decode
/// steps: decoding a 7B's weights, about 5 ms on an H200, costs more than such a step's
/// products themselves, so a server decoding 9-128 sequences per step keeps the decodings).
pub(crate) const KEEP_DECODING_MAX_ROWS: usize = 128;

/// Whether the decoding (f16, or f32 for the exact path and convolutions) of a weight used by a
/// product with `rows` activation rows is kept on the device (`OXINFER_CUDA_F16_CACHE`): `1`
/// always, `0` never; by default only for products of at most [`KEEP_DECODING_MAX_ROWS`] rows,
/// so prompt processing (the 7B's pp512 pays 14 % for it, docs/gpu.md) and single-stream use
/// leave device memory near the file's size, and batched decoding keeps what it reuses every
/// step; `rows` = `None` (a convolution's weights, run again at every denoising step) is kept
/// too. A kept decoding costs 2 bytes per weight (4 for f32; 15 GB for a 7B's f16).
fn keep_decoding(rows: Option<usize>) -> bool {
    static MODE: OnceLock<Option<bool>> = OnceLock::new();
    let mode = *MODE.get_or_init(
        || match std::env::var("OXINFER_CUDA_F16_CACHE").as_deref() {
            Ok("1") => Some(true),
            Ok("0") => Some(false),
            _ => None,
        },
    );
    mode.unwrap_or(rows.is_none_or(|r| r <= KEEP_DECODING_MAX_ROWS))
}

/// Whether the device has kernels for weights in `f` (the IQ formats' also need their program
/// to have compiled: `Kernels::handles`).
pub(crate) fn supported(f: WeightFormat) -> bool {
    matches!(f, WeightFormat::F16 | WeightFormat::BF16)
        || crate::kernels::block_formats().any(|(g, _)| g == f)
}

/// The activations a weight's GEMM takes (16-bit on the fast paths, f32 on the exact one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Input16 {
    /// bf16 (BF16 weights; quantized weights on the in-tile mma path).
    Bf16,
    /// IEEE f16 (F16 weights).
    F16,
    /// Quantized to int8 blocks of this many values exactly as the CPU kernels quantize them
    /// (32 for the 32-weight formats, 256 for the K-quants), stored as f16 values `d·q`; the
    /// weights are then dequantized to f16 too. The int8 rounding is what moves results most
    /// (0.5 % in perplexity on SmolLM2 Q4_1), so doing it like the CPU makes the two agree.
    Q8F16(usize),
    /// f32 as given (float weights on the exact path): nothing to prepare.
    F32,
    /// Quantized like [`Input16::Q8F16`] but stored as unrounded f32 values `d·q` (quantized
    /// weights on the exact path, and the generic GEMV).
    Q8F32(usize),
    /// Quantized the same way, stored as the int8 values (laid out as the layout says) plus one
    /// f32 scale per block (in the `XScale` slot): the int8 (dp4a) GEMV's input.
    I8(ops::Int8Layout),
}

/// Which input `w`'s GEMM takes on `path`.
pub(crate) fn input_kind(w: &DeviceMatrix, path: QuantPath) -> Input16 {
    if path == QuantPath::Exact {
        return match w.format {
            WeightFormat::BF16 | WeightFormat::F16 | WeightFormat::F32 => Input16::F32,
            f => q8_f32_input(f),
        };
    }
    match w.format {
        WeightFormat::BF16 => Input16::Bf16,
        WeightFormat::F16 => Input16::F16,
        _ if path == QuantPath::Mma && w.cols.is_multiple_of(GEMM_BK) => Input16::Bf16,
        f => match oxinfer_kernels::vecdot::act_kind(f) {
            oxinfer_kernels::vecdot::ActKind::Q8K => Input16::Q8F16(256),
            _ => Input16::Q8F16(32),
        },
    }
}

/// Writes `n` f32 activations at `x` (rows of `row` values, divisible by the block) as `kind` at
/// `out`. f16 kinds are guarded against overflow (f16 ends at ±65504): `scale` (three words:
/// `[max |x| as bits, alpha, beta]`) receives `max |x|`, the values are divided by a power of two
/// `s` that brings it to 2^15 or below (1 when it already is; exact, so results are unchanged in
/// range) and the product is multiplied back by `alpha = s` in cuBLAS. For [`Input16::I8`],
/// `scale` receives the per-block scales instead.
pub(crate) fn prepare(
    gpu: &Gpu,
    kind: Input16,
    x: CUdeviceptr,
    out: CUdeviceptr,
    n: usize,
    row: usize,
    scale: CUdeviceptr,
) -> Result<(), String> {
    if matches!(kind, Input16::F16 | Input16::Q8F16(_)) {
        ops::amax(gpu, x, n, scale)?;
    }
    match kind {
        Input16::Bf16 => ops::f32_to_half(gpu, x, out, n, false),
        Input16::F16 => ops::f32_to_f16_scaled(gpu, x, out, n, scale),
        Input16::F32 => Ok(()),
        Input16::Q8F16(block) => ops::quant_act(gpu, x, out, n, block, Some(scale)),
        Input16::Q8F32(block) => ops::quant_act(gpu, x, out, n, block, None),
        Input16::I8(layout) => ops::quant_act_i8(gpu, x, out, scale, n, row, layout),
    }
}

/// What [`linear`] was last given and prepared: the f32 input, where its prepared form lies
/// and which form it is (a later product over the same input and kind skips the preparation).
pub(crate) type Ready = Option<(CUdeviceptr, CUdeviceptr, Input16)>;

/// The input `w`'s product over `t` rows takes: `(kind, gemv, int8 gemv)`.
fn plan_input(w: &DeviceMatrix, t: usize, path: QuantPath) -> (Input16, bool, bool) {
    let gemv = uses_gemv(w, t);
    let int8 = gemv && has_int8_gemv(w.format);
    let kind = match (gemv, int8) {
        (true, true) => match q8_f32_input(w.format) {
            Input16::Q8F32(block) => Input16::I8(ops::Int8Layout {
                block,
                grouped: t == 1 && grouped_gemv(w.format),
            }),
            other => other,
        },
        (true, false) => q8_f32_input(w.format),
        _ => input_kind(w, path),
    };
    (kind, gemv, int8)
}

/// The layout of `w`'s GEMV input over `t` rows, when that product is an int8 GEMV (its input
/// can then be quantized by a fused kernel, [`int8_input`]).
pub(crate) fn int8_layout(w: &DeviceMatrix, t: usize) -> Option<ops::Int8Layout> {
    match plan_input(w, t, QuantPath::DequantCublas) {
        (Input16::I8(layout), _, true) => Some(layout),
        _ => None,
    }
}

/// Whether one-row int8 GEMVs of `f` ask for their input in the grouped layout
/// ([`ops::Int8Layout::grouped`]): Q4_K, unless `OXINFER_CUDA_GEMV_GROUPED=0` (none) or `=all`
/// (Q6_K too, for measuring). Its four-lane
/// kernel then reads the activations contiguously; Q6_K's sixteen-lane kernel reads the plain
/// layout contiguously and the grouped one with more instructions (H100 `ncu`, the 7B's
/// `ffn_down`: 37.7 µs plain, 43.8 µs grouped), so it asks for the plain layout but reads an
/// input already prepared grouped for a Q4_K neighbour ([`reads_either_layout`]).
fn grouped_gemv(f: WeightFormat) -> bool {
    static SET: OnceLock<Option<String>> = OnceLock::new();
    let set = SET.get_or_init(|| std::env::var("OXINFER_CUDA_GEMV_GROUPED").ok());
    match set.as_deref() {
        Some("0") => false,
        Some("all") => matches!(f, WeightFormat::Q4K | WeightFormat::Q6K),
        _ => f == WeightFormat::Q4K,
    }
}

/// Whether the one-row int8 GEMV of `f` reads both layouts of [`ops::Int8Layout`] (the kernel
/// takes `grouped` as an argument), so an input prepared in either serves it.
fn reads_either_layout(f: WeightFormat) -> bool {
    matches!(f, WeightFormat::Q4K | WeightFormat::Q6K)
}

/// Where [`linear`] keeps the int8 GEMV input of `t` rows of `cols` values laid out as
/// `layout`, for a fused kernel to write; `x` is the f32 input it stands for, and the returned
/// [`Ready`] tells `linear` that the input is prepared.
pub(crate) fn int8_input(
    gpu: &mut Gpu,
    x: CUdeviceptr,
    t: usize,
    cols: usize,
    layout: ops::Int8Layout,
    path: QuantPath,
) -> Result<(ops::Int8Out, Ready), String> {
    let block = layout.block;
    let q = gpu.scratch(Slot::X16, t * cols * path.elem_bytes())?;
    let d = gpu.scratch(Slot::XScale, ops::int8_side_bytes(t * cols, block))?;
    let s = ops::int8_sums(d, t * cols, block);
    Ok((
        ops::Int8Out { q, d, s, layout },
        Some((x, q, Input16::I8(layout))),
    ))
}

/// Prepares `w`'s input from f32 `x` (unless `*ready` says it is there) and returns where it
/// lies, its scale words, and the plan of [`plan_input`].
fn prepared_input(
    gpu: &mut Gpu,
    w: &DeviceMatrix,
    x: CUdeviceptr,
    t: usize,
    path: QuantPath,
    ready: &mut Ready,
) -> Result<(CUdeviceptr, CUdeviceptr, Input16, bool, bool), String> {
    let (mut kind, gemv, int8) = plan_input(w, t, path);
    // An input already prepared for `x` in the other int8 layout serves a kernel reading both.
    if let (Input16::I8(want), Some((rx, _, Input16::I8(have)))) = (kind, *ready) {
        if rx == x && t == 1 && have.block == want.block && reads_either_layout(w.format) {
            kind = Input16::I8(have);
        }
    }
    let x16 = match kind {
        Input16::F32 => x,
        Input16::Q8F32(_) => gpu.scratch(Slot::X16, t * w.cols * 4)?,
        _ => gpu.scratch(Slot::X16, t * w.cols * path.elem_bytes())?,
    };
    let scale = match kind {
        Input16::I8(l) => gpu.scratch(Slot::XScale, ops::int8_side_bytes(t * w.cols, l.block))?,
        _ => gpu.scratch(Slot::Scale, 16)?,
    };
    if *ready != Some((x, x16, kind)) {
        prepare(gpu, kind, x, x16, t * w.cols, w.cols, scale)?;
        *ready = Some((x, x16, kind));
    }
    Ok((x16, scale, kind, gemv, int8))
}

/// `y[t, rows] = x[t, cols] · Wᵀ` from f32 activations `x` on the device: prepares the 16-bit
/// input in the `X16` scratch slot unless `*ready` says it already holds this kind for `x`.
pub(crate) fn linear(
    gpu: &mut Gpu,
    w: &DeviceMatrix,
    x: CUdeviceptr,
    t: usize,
    y: CUdeviceptr,
    path: QuantPath,
    ready: &mut Ready,
) -> Result<(), String> {
    let (x16, scale, kind, gemv, int8) = prepared_input(gpu, w, x, t, path, ready)?;
    if int8 {
        return gemv::gemv_i8(gpu, w, &[], x16, scale, y, t, GemvOut::Store, grouped(kind));
    }
    if gemv {
        return gemv::gemv(gpu, w, x16, y, t);
    }
    let alpha = matches!(kind, Input16::F16 | Input16::Q8F16(_)).then_some(scale);
    matmul(gpu, w, x16, y, t, path, alpha)
}

/// `acc[t, rows] += x[t, cols] · Wᵀ` (the residual add after a block's last product): one int8
/// GEMV that adds its sums to `acc` when `w` takes that path (the same f32 add of the same sum
/// as a separate add), else [`linear`] into `tmp` (`[t, rows]`) and an add.
#[allow(clippy::too_many_arguments)]
pub(crate) fn linear_add(
    gpu: &mut Gpu,
    w: &DeviceMatrix,
    x: CUdeviceptr,
    t: usize,
    acc: CUdeviceptr,
    tmp: CUdeviceptr,
    path: QuantPath,
    ready: &mut Ready,
) -> Result<(), String> {
    let (x16, scale, kind, _, int8) = prepared_input(gpu, w, x, t, path, ready)?;
    if int8 {
        let g = grouped(kind);
        return gemv::gemv_i8(gpu, w, &[], x16, scale, acc, t, GemvOut::Accumulate, g);
    }
    linear(gpu, w, x, t, tmp, path, ready)?;
    ops::add(gpu, acc, tmp, t * w.rows)
}

/// [`linear`] of several weights over the same input (`yᵢ = x · Wᵢᵀ`): the first weight and
/// the ones after it of its format and width (up to three: query, key and value; gate and up)
/// in one int8 GEMV launch when that is their product, then the rest the same way; else one
/// product each.
pub(crate) fn linear_group(
    gpu: &mut Gpu,
    ws: &[(&DeviceMatrix, CUdeviceptr)],
    x: CUdeviceptr,
    t: usize,
    path: QuantPath,
    ready: &mut Ready,
) -> Result<(), String> {
    let Some(&(w1, y1)) = ws.first() else {
        return Ok(());
    };
    let like = |w: &DeviceMatrix| {
        w.format == w1.format && (w.cols, w.row_bytes) == (w1.cols, w1.row_bytes)
    };
    let mut n = if int8_layout(w1, t).is_some() {
        1 + ws[1..]
            .iter()
            .take(max_group() - 1)
            .take_while(|(w, _)| like(w))
            .count()
    } else {
        1
    };
    // Query and key joined by a value projection of the mix's other format (one row).
    if n == 2 && max_group() == 3 && t == 1 {
        if let Some((w3, _)) = ws.get(2) {
            if crate::gemv::mixes_with(w1, w3) {
                n = 3;
            }
        }
    }
    if n > 1 {
        let (x16, scale, kind, ..) = prepared_input(gpu, w1, x, t, path, ready)?;
        let g = grouped(kind);
        gemv::gemv_i8(gpu, w1, &ws[1..n], x16, scale, y1, t, GemvOut::Store, g)?;
    } else {
        linear(gpu, w1, x, t, y1, path, ready)?;
    }
    linear_group(gpu, &ws[n..], x, t, path, ready)
}

/// Most weights [`linear_group`] joins into one launch: 3, or `OXINFER_CUDA_GEMV_GROUP`
/// (1-3, for measuring; 2 was the rule before the value projection joined).
fn max_group() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("OXINFER_CUDA_GEMV_GROUP")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| (1..=3).contains(n))
            .unwrap_or(3)
    })
}

/// Whether a prepared input is in the grouped int8 layout.
fn grouped(kind: Input16) -> bool {
    matches!(kind, Input16::I8(l) if l.grouped)
}

/// Whether GEMVs of `f` take int8 activations and dp4a: the formats of `INT8_GEMV_FORMATS`,
/// unless `OXINFER_CUDA_GEMV=generic` (then they decode to f32 like the other formats).
pub(crate) fn has_int8_gemv(f: WeightFormat) -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("OXINFER_CUDA_GEMV").map_or(true, |v| v != "generic"))
        && crate::kernels::INT8_GEMV_FORMATS
            .iter()
            .chain(&crate::kernels::IQ_INT8_GEMV_FORMATS)
            .any(|(g, _)| *g == f)
}

/// Whether `w` times `t` activation rows runs as a quantized GEMV (block formats, at most
/// [`GEMV_MAX_ROWS`] rows: decode), on every path: it reads the blocks as stored and sums in
/// f32 like the exact path.
pub(crate) fn uses_gemv(w: &DeviceMatrix, t: usize) -> bool {
    t <= GEMV_MAX_ROWS && crate::kernels::block_formats().any(|(f, _)| f == w.format)
}

/// The f32 int8-block activations quantized weights in `f` take (blocks of 256 for the
/// K-quants' `Q8_K` twin, else 32).
fn q8_f32_input(f: WeightFormat) -> Input16 {
    match oxinfer_kernels::vecdot::act_kind(f) {
        oxinfer_kernels::vecdot::ActKind::Q8K => Input16::Q8F32(256),
        _ => Input16::Q8F32(32),
    }
}

/// `y[t, rows] = x16[t, cols] · Wᵀ` for device weights `w`; `x16` holds the input
/// [`input_kind`] names (f32 on [`QuantPath::Exact`]), `y` f32. `alpha`: the scale words
/// [`prepare`] wrote for an f16 input (cuBLAS paths; `None`: factor 1).
pub(crate) fn matmul(
    gpu: &mut Gpu,
    w: &DeviceMatrix,
    x16: CUdeviceptr,
    y: CUdeviceptr,
    t: usize,
    path: QuantPath,
    alpha: Option<CUdeviceptr>,
) -> Result<(), String> {
    if path == QuantPath::Exact {
        let w32 = f32_weights(gpu, w, Some(t))?;
        let ty = blas_sys::cudaDataType::CUDA_R_32F;
        return cublas(gpu, w32, ty, x16, y, t, w.rows, w.cols, alpha);
    }
    match w.format {
        WeightFormat::BF16 | WeightFormat::F16 => {
            let ty = if w.format == WeightFormat::F16 {
                blas_sys::cudaDataType::CUDA_R_16F
            } else {
                blas_sys::cudaDataType::CUDA_R_16BF
            };
            cublas(gpu, w.buf.ptr(), ty, x16, y, t, w.rows, w.cols, alpha)
        }
        // The in-tile kernel steps over GEMM_BK columns; other widths take the cuBLAS path.
        _ if path == QuantPath::DequantCublas || !w.cols.is_multiple_of(GEMM_BK) => {
            let w16 = f16_weights(gpu, w, Some(t))?;
            cublas(
                gpu,
                w16,
                blas_sys::cudaDataType::CUDA_R_16F,
                x16,
                y,
                t,
                w.rows,
                w.cols,
                alpha,
            )
        }
        _ => ops::gemm_q(gpu, w, x16, y, t),
    }
}

/// Queues the f16 decoding of quantized `w` for a product with `rows` activation rows and
/// returns where it lies: the kept copy (made now when [`keep_decoding`] says so and memory
/// allows), else scratch space.
fn f16_weights(
    gpu: &mut Gpu,
    w: &DeviceMatrix,
    rows: Option<usize>,
) -> Result<CUdeviceptr, String> {
    decoded_weights(gpu, w, &w.f16, 2, rows, |gpu, dst| {
        ops::dequant(gpu, w, dst, true)
    })
}

/// Queues the exact f32 decoding `[rows, cols]` of `w` (any device format) for the
/// exact-product path and the convolution, and returns where it lies, kept or in scratch space
/// (the `W16` slot) like [`f16_weights`] (`rows`: the product's activation rows, `None` for a
/// convolution's weights); f32 weights are their own decoding.
pub(crate) fn f32_weights(
    gpu: &mut Gpu,
    w: &DeviceMatrix,
    rows: Option<usize>,
) -> Result<CUdeviceptr, String> {
    match w.format {
        WeightFormat::F32 => Ok(w.buf.ptr()),
        WeightFormat::F16 | WeightFormat::BF16 => {
            decoded_weights(gpu, w, &w.f32, 4, rows, |gpu, dst| {
                ops::half_to_f32(gpu, w, dst)
            })
        }
        _ => decoded_weights(gpu, w, &w.f32, 4, rows, |gpu, dst| {
            ops::dequant(gpu, w, dst, false)
        }),
    }
}

/// A decoding of `w` with `elem` bytes per weight for a product with `rows` activation rows:
/// the copy kept in `cache` if there is one; else `decode(gpu, dst)` is queued into a new kept
/// buffer ([`keep_decoding`] and memory to spare) or into the `W16` scratch slot, and that is
/// returned.
fn decoded_weights(
    gpu: &mut Gpu,
    w: &DeviceMatrix,
    cache: &OnceLock<DevBuf>,
    elem: usize,
    rows: Option<usize>,
    decode: impl FnOnce(&Gpu, CUdeviceptr) -> Result<(), String>,
) -> Result<CUdeviceptr, String> {
    if let Some(b) = cache.get() {
        return Ok(b.ptr());
    }
    let bytes = w.rows * w.cols * elem;
    let keep = keep_decoding(rows)
        && cudarc::driver::result::mem_get_info()
            .is_ok_and(|(free, _)| free > bytes + F16_CACHE_RESERVE);
    let dst = if keep {
        DevBuf::new(&gpu.ctx, bytes).ok()
    } else {
        None
    };
    let out = match &dst {
        Some(b) => b.ptr(),
        None => gpu.scratch(Slot::W16, bytes)?,
    };
    decode(gpu, out)?;
    if let Some(b) = dst {
        // The kernel writing it is queued before every reader on the same stream.
        let _ = cache.set(b);
    }
    Ok(out)
}

/// cuBLAS `y[t, n] = x[t, k] · w[n, k]ᵀ` with `w` and `x` of type `ty` (f16, bf16, or f32 for
/// an SGEMM), f32 output and accumulation (no TF32: the handle keeps the default math mode). Column-major view: `yᵀ (n × t) = wᵀᵀ · xᵀ`, i.e. op(A) = T on `w` (lda = k),
/// op(B) = N on `x` (ldb = k), ldc = n. `scale`: device words `[_, alpha, beta]` (else 1, 0).
#[allow(clippy::too_many_arguments)]
pub(crate) fn cublas(
    gpu: &Gpu,
    w: CUdeviceptr,
    ty: blas_sys::cudaDataType,
    x: CUdeviceptr,
    y: CUdeviceptr,
    t: usize,
    n: usize,
    k: usize,
    scale: Option<CUdeviceptr>,
) -> Result<(), String> {
    cublas_ld(gpu, w, ty, x, y, n, t, n, k, scale)
}

/// [`cublas`] with output rows `ldy` ≥ `n` values apart: `y[i, 0 .. n]` starts at `y + i · ldy`
/// (a product writing its columns of a wider row, e.g. a query/key/value row).
#[allow(clippy::too_many_arguments)]
pub(crate) fn cublas_ld(
    gpu: &Gpu,
    w: CUdeviceptr,
    ty: blas_sys::cudaDataType,
    x: CUdeviceptr,
    y: CUdeviceptr,
    ldy: usize,
    t: usize,
    n: usize,
    k: usize,
    scale: Option<CUdeviceptr>,
) -> Result<(), String> {
    // cuBLAS calls are not recorded: run what a decode step recorded so far first.
    gpu.flush_recording()?;
    let (one, zero) = (1f32, 0f32);
    let (alpha, beta, mode) = match scale {
        Some(p) => (
            (p + 4) as *const c_void,
            (p + 8) as *const c_void,
            blas_sys::cublasPointerMode_t::CUBLAS_POINTER_MODE_DEVICE,
        ),
        None => (
            &one as *const f32 as *const c_void,
            &zero as *const f32 as *const c_void,
            blas_sys::cublasPointerMode_t::CUBLAS_POINTER_MODE_HOST,
        ),
    };
    // SAFETY: the handle is live; the mode matches where alpha/beta point.
    unsafe { blas_sys::cublasSetPointerMode_v2(gpu.blas, mode) }
        .result()
        .map_err(|e| format!("cublasSetPointerMode: {e:?}"))?;
    // SAFETY: `w` holds n·k, `x` t·k values of `ty` and `y` room for (t − 1)·ldy + n f32, all in this
    // context; alpha/beta point to host values or to device words written before on the
    // stream; the handle runs on the backend's stream.
    unsafe {
        cudarc::cublas::result::gemm_ex(
            gpu.blas,
            blas_sys::cublasOperation_t::CUBLAS_OP_T,
            blas_sys::cublasOperation_t::CUBLAS_OP_N,
            n as i32,
            t as i32,
            k as i32,
            alpha,
            w as *const c_void,
            ty,
            k as i32,
            x as *const c_void,
            ty,
            k as i32,
            beta,
            y as *mut c_void,
            blas_sys::cudaDataType::CUDA_R_32F,
            ldy as i32,
            blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| format!("cublasGemmEx: {e:?}"))
}
