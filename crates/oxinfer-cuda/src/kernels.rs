//! The CUDA C++ kernels (in `kernels/`), compiled by NVRTC when a backend opens, and their
//! function handles.

use crate::gemv::Iq4Gemv;
use crate::kv::kernel_suffix;
use crate::nvrtc;
use cudarc::driver::{sys, CudaContext, CudaModule};
use cudarc::nvrtc::Ptx;
use oxinfer::plan::KvType;
use oxinfer_kernels::WeightFormat;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Every kernel file under the name its `#include "…"` directives use: the shared headers
/// (integer types and conversions, per-format decoders, the tensor-core tile) and the
/// translation units.
const FILES: [(&str, &str); 20] = [
    ("common.cuh", include_str!("kernels/common.cuh")),
    ("head_post.cuh", include_str!("kernels/head_post.cuh")),
    (
        "split_softmax.cuh",
        include_str!("kernels/split_softmax.cuh"),
    ),
    ("dequant.cuh", include_str!("kernels/dequant.cuh")),
    ("dot32.cuh", include_str!("kernels/dot32.cuh")),
    ("mma.cuh", include_str!("kernels/mma.cuh")),
    ("gemm.cu", include_str!("kernels/gemm.cu")),
    ("gemv.cu", include_str!("kernels/gemv.cu")),
    ("act_quant.cu", include_str!("kernels/act_quant.cu")),
    ("attention.cu", include_str!("kernels/attention.cu")),
    (
        "flash_attention.cu",
        include_str!("kernels/flash_attention.cu"),
    ),
    ("stack.cu", include_str!("kernels/stack.cu")),
    (
        "decode_attention.cu",
        include_str!("kernels/decode_attention.cu"),
    ),
    ("conv.cu", include_str!("kernels/conv.cu")),
    ("encoder.cu", include_str!("kernels/encoder.cu")),
    ("iq_grids.cuh", include_str!("kernels/iq_grids.cuh")),
    ("iq_dequant.cuh", include_str!("kernels/iq_dequant.cuh")),
    ("iq_gemv.cuh", include_str!("kernels/iq_gemv.cuh")),
    ("iq.cu", include_str!("kernels/iq.cu")),
    ("iq_i8.cu", include_str!("kernels/iq_i8.cu")),
];

/// The translation units (each includes the headers it uses), compiled as one program.
pub const KERNEL_UNITS: [&str; 9] = [
    "gemm.cu",
    "gemv.cu",
    "act_quant.cu",
    "attention.cu",
    "flash_attention.cu",
    "stack.cu",
    "decode_attention.cu",
    "conv.cu",
    "encoder.cu",
];

/// The units of the IQ programs, one program each: the GEMM, GEMV and decoder templates
/// instantiated for [`IQ_FORMATS`] (`iq.cu`), and their int8 GEMVs (`iq_i8.cu`). They compile
/// in parallel with the main program; if one fails, those formats stay on the CPU and the rest
/// runs.
pub const IQ_UNITS: [&str; 2] = ["iq.cu", "iq_i8.cu"];

/// Block formats with a decoder in the main program, and the suffix of their kernels' names.
pub(crate) const QUANT_FORMATS: [(WeightFormat, &str); 11] = [
    (WeightFormat::Q4_0, "q4_0"),
    (WeightFormat::Q4_1, "q4_1"),
    (WeightFormat::Q5_0, "q5_0"),
    (WeightFormat::Q5_1, "q5_1"),
    (WeightFormat::Q8_0, "q8_0"),
    (WeightFormat::Q2K, "q2_k"),
    (WeightFormat::Q3K, "q3_k"),
    (WeightFormat::Q4K, "q4_k"),
    (WeightFormat::Q5K, "q5_k"),
    (WeightFormat::Q6K, "q6_k"),
    (WeightFormat::Q8K, "q8_k"),
];

/// The IQ / TQ / MXFP4 block formats (decoders in `iq_dequant.cuh`, kernels in the programs of
/// [`IQ_UNITS`]), and the suffix of their kernels' names.
pub(crate) const IQ_FORMATS: [(WeightFormat, &str); 12] = [
    (WeightFormat::IQ2_XXS, "iq2_xxs"),
    (WeightFormat::IQ2_XS, "iq2_xs"),
    (WeightFormat::IQ3_XXS, "iq3_xxs"),
    (WeightFormat::IQ1_S, "iq1_s"),
    (WeightFormat::IQ4_NL, "iq4_nl"),
    (WeightFormat::IQ3_S, "iq3_s"),
    (WeightFormat::IQ2_S, "iq2_s"),
    (WeightFormat::IQ4_XS, "iq4_xs"),
    (WeightFormat::IQ1_M, "iq1_m"),
    (WeightFormat::TQ1_0, "tq1_0"),
    (WeightFormat::TQ2_0, "tq2_0"),
    (WeightFormat::MXFP4, "mxfp4"),
];

/// Every block format the device decodes: [`QUANT_FORMATS`] and [`IQ_FORMATS`].
pub(crate) fn block_formats() -> impl Iterator<Item = (WeightFormat, &'static str)> {
    QUANT_FORMATS.into_iter().chain(IQ_FORMATS)
}

/// Most activation rows the quantized GEMV kernels take (`gemv_*_8`); more go to the GEMM.
pub(crate) const GEMV_MAX_ROWS: usize = 8;

/// Block formats with a GEMV on int8 activations (`gemv_{name}_i8_*`; activations in the
/// CPU's blocks for the format: 256 for the K-quants, 32 for the others).
pub(crate) const INT8_GEMV_FORMATS: [(WeightFormat, &str); 7] = [
    (WeightFormat::Q4K, "q4_k"),
    (WeightFormat::Q6K, "q6_k"),
    (WeightFormat::Q4_0, "q4_0"),
    (WeightFormat::Q4_1, "q4_1"),
    (WeightFormat::Q8_0, "q8_0"),
    (WeightFormat::Q5_0, "q5_0"),
    (WeightFormat::Q5_1, "q5_1"),
];

/// Pairs of formats one one-row int8 GEMV launch takes together (`gemv_{name}_i8_{1,s1,s1e}`):
/// query and key in the first, the value projection in the second, as llama.cpp's mixes store
/// them (Gemma 3's Q4_K_M: Q5_0 with Q8_0, its rows not a multiple of 256; the 7B's: Q4_K with
/// Q6_K). Both formats of a pair take the same int8 input layout.
pub(crate) const INT8_GEMV_MIXES: [(WeightFormat, WeightFormat, &str); 2] = [
    (WeightFormat::Q5_0, WeightFormat::Q8_0, "q5_0_q8_0"),
    (WeightFormat::Q4K, WeightFormat::Q6K, "q4_k_q6_k"),
];

/// The formats of [`IQ_FORMATS`] with an int8 GEMV: all of them (activations in blocks of 32
/// for IQ4_NL and MXFP4, 256 for the others, as the CPU quantizes them).
pub(crate) const IQ_INT8_GEMV_FORMATS: [(WeightFormat, &str); 12] = IQ_FORMATS;

/// The IQ4 formats whose int8 GEMVs also exist in their session-10 decoding (kernels named
/// `gemv_{name}_v0_i8_*`, for A/B on the device: `OXINFER_CUDA_IQ4_GEMV=old`).
pub(crate) const IQ4_V0_FORMATS: [WeightFormat; 2] = [WeightFormat::IQ4_NL, WeightFormat::IQ4_XS];

/// The kernel names of each [`IQ_INT8_GEMV_FORMATS`] entry for the IQ4 GEMVs `v` asks for:
/// [`IQ4_V0_FORMATS`]' session-10 kernels (`{name}_v0`) or IQ4_XS's four-lane one (`iq4_xs_w`).
fn iq_int8_kernel_names(v: Iq4Gemv) -> Vec<(WeightFormat, String)> {
    IQ_INT8_GEMV_FORMATS
        .iter()
        .map(|&(f, n)| {
            let name = match v {
                Iq4Gemv::Old if IQ4_V0_FORMATS.contains(&f) => format!("{n}_v0"),
                Iq4Gemv::Wide if f == WeightFormat::IQ4_XS => format!("{n}_w"),
                _ => n.to_string(),
            };
            (f, name)
        })
        .collect()
}

/// Warps per block of the GEMV kernels (`GEMV_WARPS` in gemv.cu): the f32 GEMV gives each warp
/// an output row; the int8 GEMV either does too or splits one output row over them.
pub(crate) const GEMV_WARPS: usize = 4;

/// Tile of the quantized GEMM (weight rows x tokens), as compiled (`BM`/`BN` in gemm.cu).
pub(crate) const GEMM_TILE: (u32, u32) = (128, 128);

/// Columns per k-step of the quantized GEMM (`BK` in gemm.cu); `n_in` must be a multiple.
pub(crate) const GEMM_BK: usize = 64;

/// Dynamic shared memory of the quantized GEMM: two stages of bf16 weight and activation tiles,
/// rows padded by 8 (`2 * (BM + BN) * (BK + 8) * 2` bytes).
pub(crate) const GEMM_SMEM: u32 = 2 * (GEMM_TILE.0 + GEMM_TILE.1) * (GEMM_BK as u32 + 8) * 2;

/// Head sizes of the tensor-core prompt attention (`flash_attention_h{64,128,256}`, in the
/// order of `Kernels::flash_attention`); other sizes use `attention_f32`.
pub(crate) const FLASH_ATTENTION_HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// Query rows per block of the tensor-core prompt attention (`FA_BQ` in flash_attention.cu).
pub(crate) const FLASH_ATTENTION_ROWS: usize = 64;

/// Dynamic shared memory of `flash_attention_h{head_dim}`: the f16 query tile and one key and
/// one value tile, rows padded by 8 (`(FA_BQ + 2 BKV) (head_dim + 8) 2` bytes, with 64 keys
/// per tile up to heads of 128 and 32 above).
pub(crate) fn flash_attention_smem(head_dim: usize) -> usize {
    let keys = if head_dim > 128 { 32 } else { 64 };
    (FLASH_ATTENTION_ROWS + 2 * keys) * (head_dim + 8) * 2
}

/// Cache element types with kernels of their own: every [`KvType`].
pub(crate) const KV_TYPES: usize = KvType::ALL.len();

/// One kernel per cache element type, in [`KvType::ALL`] order (`crate::kv::kernel_index`):
/// `f` gets the type's name suffix (`crate::kv::kernel_suffix`).
fn per_elem<T>(mut f: impl FnMut(&str) -> Result<T, String>) -> Result<[T; KV_TYPES], String> {
    let [a, b, c, d, e] = KvType::ALL.map(kernel_suffix);
    Ok([f(a)?, f(b)?, f(c)?, f(d)?, f(e)?])
}

/// Cache element types that hold values, not blocks (f32, f16, bf16: the first of
/// [`KvType::ALL`]): those with a fused decode attention.
pub(crate) const VALUE_KV_TYPES: usize = 3;

/// [`per_elem`] for the [`VALUE_KV_TYPES`] only.
fn per_value_elem<T>(
    mut f: impl FnMut(&str) -> Result<T, String>,
) -> Result<[T; VALUE_KV_TYPES], String> {
    let [a, b, c, ..] = KvType::ALL.map(kernel_suffix);
    Ok([f(a)?, f(b)?, f(c)?])
}

/// Output tile of the f32 implicit-GEMM convolution (pixels × output channels), as compiled
/// (`CBM`/`CBN` in conv.cu).
pub(crate) const CONV_TILE: (usize, usize) = (64, 64);

/// Function handles into the compiled module.
pub(crate) struct Kernels {
    _module: Arc<CudaModule>,
    /// The IQ programs' modules ([`IQ_UNITS`]), when they compiled and loaded.
    _iq_modules: Vec<Arc<CudaModule>>,
    /// Each loaded kernel's name by its function handle (`OXINFER_CUDA_PROFILE=kernels`).
    pub names: HashMap<usize, String>,
    /// The kernels that wait for the previous grid in their first instruction (`PDL_ENTER`),
    /// by function handle: only these may be launched as programmatic dependents.
    pub dependents: HashSet<usize>,
    /// The per-format kernels of every program (the main one, then the IQ ones).
    formats: FormatKernels,
    /// Split decode attention for heads of at most 128 (twice the keys per step), per cache
    /// element type ([`KvType::ALL`] order).
    pub attention_split_h128: [sys::CUfunction; KV_TYPES],
    /// f32 activations → int8 blocks + one f32 scale per block (the int8 GEMV's input).
    pub quant_act_i8: sys::CUfunction,
    pub f32_to_bf16: sys::CUfunction,
    pub f32_to_f16: sys::CUfunction,
    /// Prompt attention in f32 per cache element type ([`KvType::ALL`] order).
    pub attention: [sys::CUfunction; KV_TYPES],
    /// Prompt attention on the tensor cores per cache element type ([`KvType::ALL`] order) and
    /// head size ([`FLASH_ATTENTION_HEAD_DIMS`]).
    pub flash_attention: [[sys::CUfunction; 3]; KV_TYPES],
    /// Decode attention over slices of the keys (flash-decoding) per cache element type
    /// ([`KvType::ALL`] order), and the merge of the slices.
    pub attention_split: [sys::CUfunction; KV_TYPES],
    /// The split attention with a KV group's query heads in one warp (GQA), per cache type.
    pub attention_split_gqa: [sys::CUfunction; KV_TYPES],
    pub attention_combine: sys::CUfunction,
    /// The rotation of a rotated cache's values undone on a prompt attention's output.
    pub rotate_heads: sys::CUfunction,
    /// The merge of the slices with the int8 quantization of its output.
    pub attention_combine_q8: sys::CUfunction,
    /// f32 activations → int8 blocks (as the CPU kernels quantize them) → f16 values.
    pub quant_act_f16: sys::CUfunction,
    /// The same quantization written back as f32 values `d·q` (exact-product path).
    pub quant_act_f32: sys::CUfunction,
    /// f16/bf16 weights → f32 (exact-product path).
    pub half_to_f32: sys::CUfunction,
    /// Residual add (optional) + RMSNorm + int8 quantization (optional) of the next GEMV's input.
    /// Indexed by [`crate::ops::rms_per_variant`]: 1, 4, 8 or 16 values a thread.
    pub add_rms_norm_q8: [sys::CUfunction; 4],
    /// The same with the residual RMS-normalized before the add (Gemma's post-norms).
    pub add_normed_rms_norm_q8: [sys::CUfunction; 4],
    /// RMSNorm + int8 quantization over (row, slice) blocks (decode; no residual add).
    pub rms_norm_q8_slices: sys::CUfunction,
    /// Gated activation + int8 quantization.
    pub gated_act_q8: sys::CUfunction,
    /// Biases, QK-norm, RoPE and the KV-cache append of one sequence's new rows.
    pub qkv_post: sys::CUfunction,
    /// `qkv_post`, the split attention and its merge (+ int8) for one new row per sequence,
    /// per value cache type ([`VALUE_KV_TYPES`], [`KvType::ALL`] order): any head size up to
    /// 256, and heads up to 128 (decode_attention.rs).
    pub decode_attention: [sys::CUfunction; VALUE_KV_TYPES],
    pub decode_attention_h128: [sys::CUfunction; VALUE_KV_TYPES],
    pub add: sys::CUfunction,
    pub gated_act_f32: sys::CUfunction,
    pub gather_rows: sys::CUfunction,
    /// max |x| into the matmul input guard's words.
    pub amax_f32: sys::CUfunction,
    /// f32 → f16 divided by the guard's scale.
    pub f32_to_f16_scaled: sys::CUfunction,
    pub softcap: sys::CUfunction,
    /// Per logit row: log-probability of a target and the first index of the maximum.
    pub logit_scores: sys::CUfunction,
    /// Convolution input statistics: (mean, rstd) per GroupNorm group.
    pub conv_stats_group: sys::CUfunction,
    /// Convolution input statistics: (mean, rstd) per pixel (LayerNorm).
    pub conv_stats_layer: sys::CUfunction,
    /// Implicit-GEMM convolution with the norm applied on load (f32 FMA).
    pub conv_igemm_f32: sys::CUfunction,
    /// The same on the tensor cores (bf16 products; the GEMM's tile, `GEMM_SMEM` bytes of
    /// dynamic shared memory).
    pub conv_igemm_bf16: sys::CUfunction,
    /// Encoder pass: `y = act(y + bias)` per row.
    pub enc_bias_act: sys::CUfunction,
    /// Encoder pass: `g = act(g) · u`.
    pub enc_gated_act: sys::CUfunction,
    /// Encoder pass: post-norm residual LayerNorm, one block per row.
    pub enc_residual_layer_norm: sys::CUfunction,
    /// Encoder pass: rotary positions of the queries and keys.
    pub enc_rope: sys::CUfunction,
    /// Encoder pass: a product's input clamped into a copy, or its output in place.
    pub enc_clamp: sys::CUfunction,
    /// Encoder pass: per-head RMS norm of queries, keys or values, one warp per head.
    pub enc_head_rms_norm: sys::CUfunction,
    /// Encoder pass: attention within each sequence, per head width of
    /// [`ENCODER_HEAD_DIMS`].
    pub enc_attention: [sys::CUfunction; 5],
    /// Encoder pass: the same for heads narrower than the width of [`ENCODER_HEAD_DIMS`] at the
    /// same index (the head's width an argument: heads of 72, of 8).
    pub enc_attention_partial: [sys::CUfunction; 5],
}

/// Head widths the encoder pass's attention has a kernel for (`enc_attention_h*`); a head of
/// another width up to 256 runs on the kernel of the next wider one with its lanes past the
/// head idle (`enc_attention_p*`).
pub const ENCODER_HEAD_DIMS: [usize; 5] = [32, 64, 96, 128, 256];

fn arch(major: i32, minor: i32) -> &'static str {
    match (major, minor) {
        (8, 0) => "compute_80",
        (8, 6) => "compute_86",
        (8, 7) => "compute_87",
        (8, 9) => "compute_89",
        (9, _) => "compute_90",
        (10, _) => "compute_100",
        (12, _) => "compute_120",
        _ => "compute_80",
    }
}

/// Compiles the kernels with NVRTC for compute capability `major.minor` (no GPU needed): one
/// program including every unit of [`KERNEL_UNITS`].
///
/// # Errors
/// NVRTC missing, or its compile log.
pub fn compile_ptx(major: i32, minor: i32) -> Result<Ptx, String> {
    let main: String = KERNEL_UNITS
        .iter()
        .map(|u| format!("#include \"{u}\"\n"))
        .collect();
    nvrtc::compile(&main, &FILES, arch(major, minor))
}

/// The kernels (`.entry` names) of `ptx` whose code waits for the previous grid
/// (`griddepcontrol.wait`, from `PDL_ENTER` in `kernels/common.cuh`; compute 9.0+ only). A
/// kernel without it must not be launched as a programmatic dependent: it could read its
/// inputs before the kernel that writes them has finished.
pub(crate) fn dependent_entries(ptx: &str) -> HashSet<String> {
    ptx.split(".entry ")
        .skip(1)
        .filter(|body| body.contains("griddepcontrol.wait"))
        .filter_map(|body| body.split('(').next())
        .map(|name| name.trim().to_string())
        .collect()
}

/// Compiles the translation unit `unit` (one of [`KERNEL_UNITS`] or [`IQ_UNITS`]) on its own,
/// which checks that it includes every header it uses.
///
/// # Errors
/// An unknown unit, NVRTC missing, or its compile log.
pub fn compile_unit_ptx(unit: &str, major: i32, minor: i32) -> Result<Ptx, String> {
    if !KERNEL_UNITS.contains(&unit) && !IQ_UNITS.contains(&unit) {
        return Err(format!(
            "{unit} is not a kernel unit (one of {KERNEL_UNITS:?} or {IQ_UNITS:?})"
        ));
    }
    nvrtc::compile(
        &format!("#include \"{unit}\"\n"),
        &FILES,
        arch(major, minor),
    )
}

/// The kernel of `list` for format `f`.
fn for_format(
    list: &[(WeightFormat, sys::CUfunction)],
    f: WeightFormat,
) -> Option<sys::CUfunction> {
    list.iter().find(|(g, _)| *g == f).map(|(_, k)| *k)
}

/// Loads kernel `name` of `module` and records its name by handle in `names`.
fn load(
    module: &Arc<CudaModule>,
    names: &RefCell<HashMap<usize, String>>,
    name: &str,
) -> Result<sys::CUfunction, String> {
    let f = module
        .load_function(name)
        .map(|f| f.cu_function())
        .map_err(|e| format!("kernel {name}: {e:?}"))?;
    names.borrow_mut().insert(f as usize, name.to_string());
    Ok(f)
}

/// [`load`], allowing the kernel `bytes` of dynamic shared memory.
fn load_smem(
    module: &Arc<CudaModule>,
    names: &RefCell<HashMap<usize, String>>,
    name: &str,
    bytes: usize,
) -> Result<sys::CUfunction, String> {
    let f = load(module, names, name)?;
    // SAFETY: `f` is a live function of the module; the size is within the device's opt-in
    // shared memory per block (227 KiB on compute 9.0, 163 KiB on 8.0).
    unsafe {
        sys::cuFuncSetAttribute(
            f,
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
    }
    .result()
    .map_err(|e| format!("{name}: shared memory size: {e:?}"))?;
    Ok(f)
}

/// How a one-row int8 GEMV reads its weight rows (the entry points of gemv.cu's `gemv_i8`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Staging {
    /// `_1`: straight from global memory in the dot products.
    Direct,
    /// `_s1`: each unit's rows copied whole into shared memory first (16-byte `cp.async`).
    Staged,
    /// `_s1e`: staged, the copies issued before waiting for the previous kernel.
    Early,
    /// `_s1b`: as [`Staging::Early`], each unit's rows one bulk copy (compute 9.0+ only).
    Bulk,
}

impl Staging {
    /// Index among a format's staged entry points (`_s1`, `_s1e`, `_s1b`); none for `Direct`.
    fn staged_index(self) -> Option<usize> {
        match self {
            Staging::Direct => None,
            Staging::Staged => Some(0),
            Staging::Early => Some(1),
            Staging::Bulk => Some(2),
        }
    }
}

/// The per-format kernels of one program.
#[derive(Default)]
struct FormatKernels {
    gemm: Vec<(WeightFormat, sys::CUfunction)>,
    dequant_f16: Vec<(WeightFormat, sys::CUfunction)>,
    dequant_f32: Vec<(WeightFormat, sys::CUfunction)>,
    /// Quantized GEMV for one activation row, per format.
    gemv1: Vec<(WeightFormat, sys::CUfunction)>,
    /// Quantized GEMV for up to [`GEMV_MAX_ROWS`] activation rows, per format.
    gemv8: Vec<(WeightFormat, sys::CUfunction)>,
    /// GEMVs on int8 activations (dp4a) per format: one row, up to 4, up to [`GEMV_MAX_ROWS`],
    /// one activation row with two output rows per warp.
    gemv_i8: Vec<(WeightFormat, [sys::CUfunction; 4])>,
    /// One-row int8 GEMVs with the weight rows staged in shared memory, per format: waiting
    /// for the previous kernel first, and fetching the weights before waiting.
    gemv_i8_staged: Vec<(WeightFormat, [sys::CUfunction; 3])>,
    /// One-row int8 GEMVs of [`INT8_GEMV_MIXES`]' pairs: plain, staged, staged early.
    gemv_i8_mixed: Vec<((WeightFormat, WeightFormat), [sys::CUfunction; 4])>,
}

impl FormatKernels {
    /// The kernels of `formats` (all templates) and `int8` (the int8 GEMVs) in `module`.
    fn load(
        module: &Arc<CudaModule>,
        names: &RefCell<HashMap<usize, String>>,
        formats: &[(WeightFormat, &str)],
        int8: &[(WeightFormat, &str)],
    ) -> Result<Self, String> {
        let get = |name: &str| load(module, names, name);
        let mut k = FormatKernels::default();
        for &(f, n) in formats {
            k.gemv1.push((f, get(&format!("gemv_{n}_1"))?));
            k.gemv8.push((f, get(&format!("gemv_{n}_8"))?));
            k.gemm.push((
                f,
                load_smem(module, names, &format!("gemm_{n}"), GEMM_SMEM as usize)?,
            ));
            k.dequant_f16.push((f, get(&format!("dequant_f16_{n}"))?));
            k.dequant_f32.push((f, get(&format!("dequant_f32_{n}"))?));
        }
        for &(f, n) in int8 {
            k.gemv_i8.push((
                f,
                [
                    get(&format!("gemv_{n}_i8_1"))?,
                    get(&format!("gemv_{n}_i8_4"))?,
                    get(&format!("gemv_{n}_i8_8"))?,
                    get(&format!("gemv_{n}_i8_r2_1"))?,
                ],
            ));
            let smem = crate::gemv::STAGED_MAX_SMEM;
            let staged = load_smem(module, names, &format!("gemv_{n}_i8_s1"), smem)?;
            let early = load_smem(module, names, &format!("gemv_{n}_i8_s1e"), smem)?;
            let bulk = load_smem(module, names, &format!("gemv_{n}_i8_s1b"), smem)?;
            k.gemv_i8_staged.push((f, [staged, early, bulk]));
        }
        Ok(k)
    }

    /// `self` followed by `other`'s kernels.
    fn extend(&mut self, other: FormatKernels) {
        self.gemm.extend(other.gemm);
        self.dequant_f16.extend(other.dequant_f16);
        self.dequant_f32.extend(other.dequant_f32);
        self.gemv1.extend(other.gemv1);
        self.gemv8.extend(other.gemv8);
        self.gemv_i8.extend(other.gemv_i8);
        self.gemv_i8_staged.extend(other.gemv_i8_staged);
        self.gemv_i8_mixed.extend(other.gemv_i8_mixed);
    }
}

/// A compiled program loaded into `ctx` (the driver compiles the PTX for the device here), with
/// the `.entry` names of its kernels that wait for the previous grid ([`dependent_entries`]).
fn load_program(
    ctx: &Arc<CudaContext>,
    ptx: Result<Ptx, String>,
) -> Result<(Arc<CudaModule>, HashSet<String>), String> {
    let ptx = ptx?;
    let waiting = dependent_entries(&ptx.to_src());
    let module = ctx
        .load_module(ptx)
        .map_err(|e| format!("loading the kernels: {e:?}"))?;
    Ok((module, waiting))
}

impl Kernels {
    /// Compiles the kernels for compute capability `major.minor` and loads them into `ctx`: the
    /// main program and the IQ programs ([`IQ_UNITS`]) compile and load in parallel. A failure of an IQ
    /// program is reported on stderr and leaves its formats without kernels (their weights are
    /// then declined at upload and run on the CPU); a failure of the main one is an error.
    pub fn compile(ctx: &Arc<CudaContext>, major: i32, minor: i32) -> Result<Self, String> {
        let (main, iq) = std::thread::scope(|s| {
            let iq: Vec<_> = IQ_UNITS
                .map(|u| s.spawn(move || load_program(ctx, compile_unit_ptx(u, major, minor))))
                .into_iter()
                .collect();
            let main = load_program(ctx, compile_ptx(major, minor));
            let iq: Result<Vec<_>, String> = iq
                .into_iter()
                .zip(IQ_UNITS)
                .map(|(h, u)| {
                    let r = h
                        .join()
                        .unwrap_or_else(|_| Err("the compile thread panicked".to_string()));
                    r.map_err(|e| format!("{u}: {e}"))
                })
                .collect();
            (main, iq)
        });
        let (module, mut waiting) = main?;
        let names = RefCell::new(HashMap::new());
        let get = |name: &str| load(&module, &names, name);
        let mut formats = FormatKernels::load(&module, &names, &QUANT_FORMATS, &INT8_GEMV_FORMATS)?;
        for (f, f3, n) in INT8_GEMV_MIXES {
            let smem = crate::gemv::STAGED_MAX_SMEM;
            formats.gemv_i8_mixed.push((
                (f, f3),
                [
                    get(&format!("gemv_{n}_i8_1"))?,
                    load_smem(&module, &names, &format!("gemv_{n}_i8_s1"), smem)?,
                    load_smem(&module, &names, &format!("gemv_{n}_i8_s1e"), smem)?,
                    load_smem(&module, &names, &format!("gemv_{n}_i8_s1b"), smem)?,
                ],
            ));
        }
        // iq.cu holds the formats' GEMM, decoders and GEMVs, iq_i8.cu their int8 GEMVs.
        let iq_kernels = iq.and_then(|programs| {
            let [(m0, w0), (m1, w1)] = <[_; 2]>::try_from(programs).map_err(|_| "two programs")?;
            let mut k = FormatKernels::load(&m0, &names, &IQ_FORMATS, &[])?;
            let int8 = iq_int8_kernel_names(crate::gemv::iq4_gemv());
            let int8: Vec<(WeightFormat, &str)> =
                int8.iter().map(|(f, n)| (*f, n.as_str())).collect();
            k.extend(FormatKernels::load(&m1, &names, &[], &int8)?);
            Ok((vec![m0, m1], [w0, w1], k))
        });
        let iq_modules = match iq_kernels {
            Ok((m, w, k)) => {
                waiting.extend(w.into_iter().flatten());
                formats.extend(k);
                m
            }
            Err(e) => {
                eprintln!(
                    "oxinfer-cuda: the IQ/TQ/MXFP4 kernels are unavailable, weights in \
                         those formats run on the CPU: {e}"
                );
                Vec::new()
            }
        };
        let conv_igemm_bf16 = load_smem(&module, &names, "conv_igemm_bf16", GEMM_SMEM as usize)?;
        let k = Kernels {
            f32_to_bf16: get("f32_to_bf16")?,
            f32_to_f16: get("f32_to_f16")?,
            attention: per_elem(|s| get(&format!("attention_f32{s}")))?,
            flash_attention: per_elem(|s| {
                let mut f = [std::ptr::null_mut(); 3];
                for (f, hd) in f.iter_mut().zip(FLASH_ATTENTION_HEAD_DIMS) {
                    let name = format!("flash_attention_h{hd}{s}");
                    *f = load_smem(&module, &names, &name, flash_attention_smem(hd))?;
                }
                Ok(f)
            })?,
            attention_split_h128: per_elem(|s| get(&format!("attention_split_f32_h128{s}")))?,
            quant_act_i8: get("quant_act_i8")?,
            attention_split: per_elem(|s| get(&format!("attention_split_f32{s}")))?,
            attention_split_gqa: per_elem(|s| get(&format!("attention_split_gqa{s}")))?,
            attention_combine: get("attention_combine_f32")?,
            rotate_heads: get("rotate_heads_f32")?,
            attention_combine_q8: get("attention_combine_q8")?,
            quant_act_f16: get("quant_act_f16")?,
            quant_act_f32: get("quant_act_f32")?,
            half_to_f32: get("half_to_f32")?,
            add_rms_norm_q8: [
                get("add_rms_norm_q8_p1")?,
                get("add_rms_norm_q8_p4")?,
                get("add_rms_norm_q8_p8")?,
                get("add_rms_norm_q8")?,
            ],
            add_normed_rms_norm_q8: [
                get("add_normed_rms_norm_q8_p1")?,
                get("add_normed_rms_norm_q8_p4")?,
                get("add_normed_rms_norm_q8_p8")?,
                get("add_normed_rms_norm_q8")?,
            ],
            rms_norm_q8_slices: get("rms_norm_q8_slices")?,
            gated_act_q8: get("gated_act_q8")?,
            qkv_post: get("qkv_post")?,
            decode_attention: per_value_elem(|s| get(&format!("decode_attention{s}")))?,
            decode_attention_h128: per_value_elem(|s| get(&format!("decode_attention_h128{s}")))?,
            add: get("add_f32")?,
            gated_act_f32: get("gated_act_f32")?,
            gather_rows: get("gather_rows_f32")?,
            amax_f32: get("amax_f32")?,
            f32_to_f16_scaled: get("f32_to_f16_scaled")?,
            softcap: get("softcap_f32")?,
            logit_scores: get("logit_scores")?,
            conv_stats_group: get("conv_stats_group")?,
            conv_stats_layer: get("conv_stats_layer")?,
            conv_igemm_f32: get("conv_igemm_f32")?,
            conv_igemm_bf16,
            enc_bias_act: get("enc_bias_act")?,
            enc_gated_act: get("enc_gated_act")?,
            enc_residual_layer_norm: get("enc_residual_layer_norm")?,
            enc_rope: get("enc_rope")?,
            enc_clamp: get("enc_clamp")?,
            enc_head_rms_norm: get("enc_head_rms_norm")?,
            enc_attention: {
                let mut f = [std::ptr::null_mut(); 5];
                for (f, hd) in f.iter_mut().zip(ENCODER_HEAD_DIMS) {
                    *f = get(&format!("enc_attention_h{hd}"))?;
                }
                f
            },
            enc_attention_partial: {
                let mut f = [std::ptr::null_mut(); 5];
                for (f, hd) in f.iter_mut().zip(ENCODER_HEAD_DIMS) {
                    *f = get(&format!("enc_attention_p{hd}"))?;
                }
                f
            },
            formats,
            names: HashMap::new(),
            dependents: HashSet::new(),
            _module: module.clone(),
            _iq_modules: iq_modules,
        };
        let names = names.into_inner();
        let dependents = names
            .iter()
            .filter(|(_, n)| waiting.contains(n.as_str()))
            .map(|(&f, _)| f)
            .collect();
        Ok(Kernels {
            names,
            dependents,
            ..k
        })
    }

    /// Whether the device has kernels for block format `f` (the IQ program may be missing).
    pub fn handles(&self, f: WeightFormat) -> bool {
        for_format(&self.formats.gemv1, f).is_some()
    }

    /// The in-tile dequantizing GEMM for `f`.
    pub fn gemm(&self, f: WeightFormat) -> Option<sys::CUfunction> {
        for_format(&self.formats.gemm, f)
    }

    /// The quantized GEMV for `f` taking `t` activation rows (1 or up to [`GEMV_MAX_ROWS`]).
    pub fn gemv(&self, f: WeightFormat, t: usize) -> Option<sys::CUfunction> {
        match t {
            1 => for_format(&self.formats.gemv1, f),
            2..=GEMV_MAX_ROWS => for_format(&self.formats.gemv8, f),
            _ => None,
        }
    }

    /// The int8-activation GEMV for `f` taking `t` activation rows (1, up to 4, or up to
    /// [`GEMV_MAX_ROWS`]).
    pub fn gemv_i8(&self, f: WeightFormat, t: usize) -> Option<sys::CUfunction> {
        let k = self.formats.gemv_i8.iter().find(|(g, _)| *g == f)?.1;
        match t {
            1 => Some(k[0]),
            2..=4 => Some(k[1]),
            5..=GEMV_MAX_ROWS => Some(k[2]),
            _ => None,
        }
    }

    /// The int8-activation GEMV for `f` on one activation row with two output rows per warp.
    pub fn gemv_i8_pair(&self, f: WeightFormat) -> Option<sys::CUfunction> {
        Some(self.formats.gemv_i8.iter().find(|(g, _)| *g == f)?.1[3])
    }

    /// The one-row int8-activation GEMV for `f` with its weight rows staged in shared memory
    /// as `s` says ([`Staging::Direct`] has none: see [`Self::gemv_i8`]).
    pub fn gemv_i8_staged(&self, f: WeightFormat, s: Staging) -> Option<sys::CUfunction> {
        let k = self.formats.gemv_i8_staged.iter().find(|(g, _)| *g == f)?.1;
        s.staged_index().map(|i| k[i])
    }

    /// The one-row int8 GEMV taking matrices of `f` and a third one of `f3`
    /// ([`INT8_GEMV_MIXES`]), its weight rows read as `s` says.
    pub fn gemv_i8_mixed(
        &self,
        f: WeightFormat,
        f3: WeightFormat,
        s: Staging,
    ) -> Option<sys::CUfunction> {
        let k = self
            .formats
            .gemv_i8_mixed
            .iter()
            .find(|(p, _)| *p == (f, f3))?
            .1;
        Some(k[s.staged_index().map_or(0, |i| i + 1)])
    }

    /// The whole-matrix dequantizer to IEEE f16 for `f`.
    pub fn dequant_f16(&self, f: WeightFormat) -> Option<sys::CUfunction> {
        for_format(&self.formats.dequant_f16, f)
    }

    /// The whole-matrix dequantizer to f32 for `f` (exact-product path).
    pub fn dequant_f32(&self, f: WeightFormat) -> Option<sys::CUfunction> {
        for_format(&self.formats.dequant_f32, f)
    }

    /// Registers and local (spill) bytes per thread of each GEMM kernel, one line each.
    pub fn resource_report(&self) -> String {
        let attr = |f: sys::CUfunction, a: sys::CUfunction_attribute| -> i32 {
            let mut v = 0i32;
            // SAFETY: `f` is a live function of our module; `v` is a valid out-pointer.
            unsafe { sys::cuFuncGetAttribute(&mut v, a, f) };
            v
        };
        let mut out = String::new();
        for (fmt, f) in &self.formats.gemm {
            out.push_str(&format!(
                "gemm {fmt}: {} registers, {} local bytes\n",
                attr(*f, sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS),
                attr(
                    *f,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
                )
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `#include "…"` of every kernel file names a file the program is given, and every
    /// unit is one of the files: a missing entry would only show when a GPU machine compiles.
    #[test]
    fn includes_resolve_to_kernel_files() {
        let known: Vec<&str> = FILES.iter().map(|(n, _)| *n).collect();
        for unit in KERNEL_UNITS {
            assert!(known.contains(&unit), "unit {unit} is not in FILES");
        }
        let mut includes = 0;
        for (name, text) in FILES {
            for line in text.lines() {
                let Some(rest) = line.trim().strip_prefix("#include") else {
                    continue;
                };
                let target = rest.trim().trim_matches('"');
                assert!(known.contains(&target), "{name} includes unknown {target}");
                includes += 1;
            }
        }
        assert!(includes > 0, "no include directive seen");
    }

    /// With NVRTC present, the whole program and each unit on its own compile (a unit that
    /// uses a header it does not include fails here); without it, one skip line.
    #[test]
    fn each_unit_compiles_on_its_own() {
        // SAFETY: probing dlopen only.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            eprintln!("skipped: NVRTC (libnvrtc) not found");
            return;
        }
        compile_ptx(8, 0).unwrap_or_else(|e| panic!("all kernels: {e}"));
        // Hopper: the code behind `__CUDA_ARCH__ >= 900` (programmatic dependent launch).
        let hopper =
            compile_ptx(9, 0).unwrap_or_else(|e| panic!("all kernels for compute 9.0: {e}"));
        let waiting = dependent_entries(&hopper.to_src());
        for k in [
            "gemv_q4_k_i8_1",
            "add_rms_norm_q8",
            "add_normed_rms_norm_q8",
            "add_rms_norm_q8_p1",
            "add_normed_rms_norm_q8_p4",
            "rms_norm_q8_slices",
            "attention_combine_q8",
            "gemv_q4_k_i8_s1",
            "gemv_q6_k_i8_s1e",
            "gemv_q4_k_i8_s1b",
            "gemv_q4_k_q6_k_i8_s1b",
            "attention_split_f32_h128",
            "qkv_post",
            "attention_split_f32",
            "attention_split_gqa_kv_f16",
            "decode_attention_h128",
            "decode_attention_kv_bf16",
        ] {
            assert!(waiting.contains(k), "{k} does not wait: {waiting:?}");
        }
        for k in ["gemm_q4_k", "attention_f32", "conv_igemm_f32"] {
            assert!(!waiting.contains(k), "{k} waits");
        }
        let ampere = compile_ptx(8, 0).expect("compiled above");
        assert!(dependent_entries(&ampere.to_src()).is_empty());
        for unit in KERNEL_UNITS {
            compile_unit_ptx(unit, 8, 0).unwrap_or_else(|e| panic!("{unit}: {e}"));
        }
        // The IQ program, on its own for both architectures; its int8 GEMVs wait like the
        // main program's.
        let mut iq_src = String::new();
        for unit in IQ_UNITS {
            compile_unit_ptx(unit, 8, 0).unwrap_or_else(|e| panic!("{unit}: {e}"));
            let iq = compile_unit_ptx(unit, 9, 0).unwrap_or_else(|e| panic!("{unit} for 9.0: {e}"));
            iq_src.push_str(&iq.to_src());
        }
        let iq_waiting = dependent_entries(&iq_src);
        for (_, n) in IQ_FORMATS {
            for k in [
                format!("gemm_{n}"),
                format!("dequant_f16_{n}"),
                format!("gemv_{n}_8"),
            ] {
                assert!(iq_src.contains(&format!(".entry {k}(")), "{k} missing");
            }
        }
        for v in [Iq4Gemv::Default, Iq4Gemv::Old, Iq4Gemv::Wide] {
            for (_, n) in iq_int8_kernel_names(v) {
                // Every variant waits (the early-fetch one after its weight copies).
                for s in ["1", "4", "8", "r2_1", "s1", "s1e", "s1b"] {
                    let k = format!("gemv_{n}_i8_{s}");
                    assert!(iq_waiting.contains(&k), "{k} does not wait");
                }
            }
        }
        let renamed = |v| {
            let names = iq_int8_kernel_names(v);
            IQ_INT8_GEMV_FORMATS
                .iter()
                .zip(&names)
                .filter(|((_, a), (_, b))| a != b)
                .count()
        };
        assert_eq!(renamed(Iq4Gemv::Default), 0);
        assert_eq!(renamed(Iq4Gemv::Old), IQ4_V0_FORMATS.len());
        assert_eq!(renamed(Iq4Gemv::Wide), 1);
        // The IQ program holds none of the main program's kernels.
        assert!(
            !iq_src.contains(".entry gemm_q4_k("),
            "main kernels in the IQ program"
        );
        assert!(
            compile_unit_ptx("common.cuh", 8, 0).is_err(),
            "a header is no unit"
        );
    }
}
