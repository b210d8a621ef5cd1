//! Host side of the convolution (`kernels/conv.cu`): the input goes up once, the weights are
//! decoded to f32 once (kept beside the uploaded matrix, [`gemm::f32_weights`]), the norm's
//! statistics are computed on the device, and the implicit GEMM gathers each output pixel's
//! `k × k` neighbourhood straight from the channels-last input, normalizing it on the way into
//! shared memory, so the normalized and unfolded activations never exist in memory.

use crate::gemm::{self, DeviceMatrix};
use crate::gpu::{Gpu, Slot};
use crate::kernels::{GEMM_SMEM, GEMM_TILE};
use cudarc::driver::sys::CUdeviceptr;
use oxinfer::backend::{ConvGeom, NormKind, NormSpec};
use std::ffi::c_void;

/// Output tile of the f32 implicit GEMM (pixels × output channels), as compiled (`CBM`/`CBN`).
const TILE: (usize, usize) = (64, 64);

/// How the implicit GEMM multiplies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvPath {
    /// f32 FMA on the CUDA cores: the CPU reference's products up to summation order.
    F32,
    /// bf16 tensor cores (mma m16n8k16, f32 accumulation): weights and normalized inputs
    /// rounded to bf16 (about 3e-3 relative error norm-wise). On the H200 at the SD-like
    /// 64×64×320 → 320 shape it measured no faster than [`ConvPath::F32`] (0.61 vs 0.59 ms):
    /// too few 128 × 128 output tiles to fill the GPU, and the gathering load dominates.
    Bf16,
}

impl ConvPath {
    /// From `OXINFER_CUDA_CONV` (`mma` selects [`ConvPath::Bf16`]); [`ConvPath::F32`] by
    /// default.
    pub fn from_env() -> Self {
        match std::env::var("OXINFER_CUDA_CONV").as_deref() {
            Ok("mma") => ConvPath::Bf16,
            _ => ConvPath::F32,
        }
    }
}

/// Threads per block of the GroupNorm statistics kernel.
const STATS_THREADS: u32 = 512;

fn arg<T>(v: &T) -> *mut c_void {
    v as *const T as *mut c_void
}

/// Whether the kernels take this convolution: the shapes agree (the weight `[n_out, k²·cin]`,
/// `x` `[h * w, cin]`, `y` `[oh * ow, n_out]`, the output size follows from the input, the norm's
/// vectors are `[cin]` and its groups divide `cin`) and every index fits the kernels' 32-bit
/// arithmetic. Anything else is left to the CPU, which reports the mismatch.
pub(crate) fn supported(
    x: &[f32],
    g: &ConvGeom,
    norm: Option<&NormSpec>,
    w: &DeviceMatrix,
    y_len: usize,
) -> bool {
    let fits = |v: Option<usize>| v.is_some_and(|v| v < i32::MAX as usize);
    let out = |n: usize| {
        (n + 2 * (g.k / 2))
            .checked_sub(g.k)
            .map(|v| v / g.stride + 1)
    };
    let shapes = g.k > 0
        && g.stride > 0
        && g.cin > 0
        && g.h > 0
        && g.w > 0
        && w.rows > 0
        && out(g.h) == Some(g.oh)
        && out(g.w) == Some(g.ow)
        && fits(g.h.checked_mul(g.w).and_then(|v| v.checked_mul(g.cin)))
        && x.len() == g.h * g.w * g.cin
        && fits(g.k.checked_mul(g.k).and_then(|v| v.checked_mul(g.cin)))
        && w.cols == g.k * g.k * g.cin
        && fits((g.oh * g.ow).checked_mul(w.rows))
        && fits(w.rows.checked_mul(w.cols))
        && y_len == g.oh * g.ow * w.rows
        && (g.oh * g.ow).div_ceil(TILE.0) < i32::MAX as usize
        && w.rows.div_ceil(TILE.1) <= 65_535;
    let norm_ok = norm.is_none_or(|n| {
        n.gamma.len() == g.cin
            && n.beta.len() == g.cin
            && match n.kind {
                NormKind::Group(groups) => groups > 0 && g.cin.is_multiple_of(groups),
                NormKind::Layer => true,
            }
    });
    shapes && norm_ok
}

/// The norm's parameters on the device, as the kernels take them.
struct NormDev {
    /// 0: no norm, 1: GroupNorm with `cpg` channels per group, 2: LayerNorm.
    mode: i32,
    cpg: i32,
    silu: i32,
    eps: f32,
    /// GroupNorm groups (statistics blocks); 0 otherwise.
    groups: usize,
    /// Device addresses of `[cin]` gamma and beta and the (mean, rstd) pairs (0 without norm).
    gamma: CUdeviceptr,
    beta: CUdeviceptr,
    stats: CUdeviceptr,
}

/// Uploads `norm`'s gamma and beta into the `ConvNorm` slot, with room for its statistics.
fn upload_norm(gpu: &mut Gpu, g: &ConvGeom, norm: Option<&NormSpec>) -> Result<NormDev, String> {
    let Some(n) = norm else {
        return Ok(NormDev {
            mode: 0,
            cpg: 0,
            silu: 0,
            eps: 0.0,
            groups: 0,
            gamma: 0,
            beta: 0,
            stats: 0,
        });
    };
    let (mode, groups, n_stats) = match n.kind {
        NormKind::Group(groups) => (1, groups, groups),
        NormKind::Layer => (2, 0, g.h * g.w),
    };
    let p = gpu.scratch(Slot::ConvNorm, (2 * g.cin + 2 * n_stats) * 4)?;
    let (gamma, beta, stats) = (p, p + 4 * g.cin as u64, p + 8 * g.cin as u64);
    gpu.upload_many(&[(gamma, n.gamma), (beta, n.beta)])?;
    Ok(NormDev {
        mode,
        cpg: g.cin.checked_div(groups).unwrap_or(0) as i32,
        silu: i32::from(n.silu),
        eps: n.eps,
        groups,
        gamma,
        beta,
        stats,
    })
}

/// Queues the statistics kernel (with a norm) and the implicit GEMM: `yp` `[oh * ow, n_out]`
/// from `xp` `[h * w, cin]` and f32 weights `wp` `[n_out, k²·cin]`, all on the device. The
/// tensor-core kernel's grid puts pixel tiles on `y` (at most 65535); beyond that the f32
/// kernel runs.
#[allow(clippy::too_many_arguments)]
fn queue(
    gpu: &Gpu,
    path: ConvPath,
    xp: CUdeviceptr,
    g: &ConvGeom,
    nd: &NormDev,
    wp: CUdeviceptr,
    n_out: usize,
    yp: CUdeviceptr,
) -> Result<(), String> {
    let hw = g.h * g.w;
    let (hw_i, cin_i) = (hw as i32, g.cin as i32);
    if nd.mode == 1 {
        let f = gpu.k.conv_stats_group;
        gpu.launch(
            f,
            (nd.groups as u32, 1, 1),
            (STATS_THREADS, 1, 1),
            &mut [
                arg(&xp),
                arg(&nd.stats),
                arg(&hw_i),
                arg(&cin_i),
                arg(&nd.cpg),
                arg(&nd.eps),
            ],
        )?;
    } else if nd.mode == 2 {
        let f = gpu.k.conv_stats_layer;
        gpu.launch(
            f,
            ((hw * 32).div_ceil(256) as u32, 1, 1),
            (256, 1, 1),
            &mut [
                arg(&xp),
                arg(&nd.stats),
                arg(&hw_i),
                arg(&cin_i),
                arg(&nd.eps),
            ],
        )?;
    }
    let [h, wd, cin, k, stride, oh, ow, n_out_i] =
        [g.h, g.w, g.cin, g.k, g.stride, g.oh, g.ow, n_out].map(|v| v as i32);
    let pixels = g.oh * g.ow;
    let (bm, bn) = (GEMM_TILE.0 as usize, GEMM_TILE.1 as usize);
    let (f, grid, smem) = if path == ConvPath::Bf16 && pixels.div_ceil(bn) <= 65_535 {
        let grid = (n_out.div_ceil(bm) as u32, pixels.div_ceil(bn) as u32, 1);
        (gpu.k.conv_igemm_bf16, grid, GEMM_SMEM)
    } else {
        let grid = (
            pixels.div_ceil(TILE.0) as u32,
            n_out.div_ceil(TILE.1) as u32,
            1,
        );
        (gpu.k.conv_igemm_f32, grid, 0)
    };
    gpu.launch_smem(
        f,
        grid,
        (256, 1, 1),
        smem,
        &mut [
            arg(&xp),
            arg(&wp),
            arg(&yp),
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

/// Runs the convolution on the device: `y` `[oh * ow, n_out]` from `x` `[h * w, cin]` and
/// weights `w`, normalizing the input by `norm` on the way in. Shapes must have passed
/// [`supported`].
pub(crate) fn run(
    gpu: &mut Gpu,
    path: ConvPath,
    x: &[f32],
    g: &ConvGeom,
    norm: Option<&NormSpec>,
    w: &DeviceMatrix,
    y: &mut [f32],
) -> Result<(), String> {
    gpu.bind()?;
    let xp = gpu.scratch(Slot::X, std::mem::size_of_val(x))?;
    gpu.upload(xp, x)?;
    let wp = gemm::f32_weights(gpu, w)?;
    let nd = upload_norm(gpu, g, norm)?;
    let yp = gpu.scratch(Slot::Y, std::mem::size_of_val(y))?;
    queue(gpu, path, xp, g, &nd, wp, w.rows, yp)?;
    gpu.download(y, yp)
}

/// Device seconds of one [`run`] without its transfers (statistics and implicit GEMM, the
/// weights already decoded), the mean of `reps` after one warm-up.
pub(crate) fn time(
    gpu: &mut Gpu,
    path: ConvPath,
    x: &[f32],
    g: &ConvGeom,
    norm: Option<&NormSpec>,
    w: &DeviceMatrix,
    reps: usize,
) -> Result<f64, String> {
    gpu.bind()?;
    let xp = gpu.scratch(Slot::X, std::mem::size_of_val(x))?;
    gpu.upload(xp, x)?;
    let wp = gemm::f32_weights(gpu, w)?;
    let nd = upload_norm(gpu, g, norm)?;
    let yp = gpu.scratch(Slot::Y, g.oh * g.ow * w.rows * 4)?;
    queue(gpu, path, xp, g, &nd, wp, w.rows, yp)?;
    gpu.sync()?;
    let start = std::time::Instant::now();
    for _ in 0..reps {
        queue(gpu, path, xp, g, &nd, wp, w.rows, yp)?;
    }
    gpu.sync()?;
    Ok(start.elapsed().as_secs_f64() / reps.max(1) as f64)
}
