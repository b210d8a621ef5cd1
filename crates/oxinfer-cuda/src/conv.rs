//! Host side of the convolution (`kernels/conv.cu`): the input goes up once, the weights are
//! decoded to f32 once (kept beside the uploaded matrix, [`gemm::f32_weights`]), the norm's
//! statistics are computed on the device, and the implicit GEMM gathers each output pixel's
//! `k × k` neighbourhood straight from the channels-last input, normalizing it on the way into
//! shared memory, so the normalized and unfolded activations never exist in memory.

use crate::gemm;
use crate::gpu::{Gpu, HostSrc, Slot};
use crate::kernels::CONV_TILE;
use crate::matrix::DeviceMatrix;
use crate::ops::{self, ConvNorm};
use cudarc::driver::sys::CUdeviceptr;
use oxinfer::backend::{ConvGeom, NormKind, NormSpec};

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
        && (g.oh * g.ow).div_ceil(CONV_TILE.0) < i32::MAX as usize
        && w.rows.div_ceil(CONV_TILE.1) <= 65_535;
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

/// Uploads `norm`'s gamma and beta into the `ConvNorm` slot, with room for its statistics.
fn upload_norm(gpu: &mut Gpu, g: &ConvGeom, norm: Option<&NormSpec>) -> Result<ConvNorm, String> {
    let Some(n) = norm else {
        return Ok(ConvNorm::NONE);
    };
    let (mode, groups, n_stats) = match n.kind {
        NormKind::Group(groups) => (1, groups, groups),
        NormKind::Layer => (2, 0, g.h * g.w),
    };
    let p = gpu.scratch(Slot::ConvNorm, (2 * g.cin + 2 * n_stats) * 4)?;
    let (gamma, beta, stats) = (p, p + 4 * g.cin as u64, p + 8 * g.cin as u64);
    gpu.upload_many(&[(gamma, HostSrc::F32(n.gamma)), (beta, HostSrc::F32(n.beta))])?;
    Ok(ConvNorm {
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

/// A convolution's operands on the device, ready to queue.
struct Staged {
    bf16: bool,
    /// Input `[h * w, cin]`, f32 weights `[n_out, k²·cin]`, output `[oh * ow, n_out]`.
    x: CUdeviceptr,
    w: CUdeviceptr,
    y: CUdeviceptr,
    n_out: usize,
    norm: ConvNorm,
}

impl Staged {
    /// Uploads the input and the norm's parameters, decodes the weights to f32 (once; the
    /// decoding is kept) and takes the output's scratch space.
    fn new(
        gpu: &mut Gpu,
        path: ConvPath,
        x: &[f32],
        g: &ConvGeom,
        norm: Option<&NormSpec>,
        w: &DeviceMatrix,
    ) -> Result<Self, String> {
        gpu.bind()?;
        let xp = gpu.scratch(Slot::X, std::mem::size_of_val(x))?;
        gpu.upload(xp, x)?;
        let wp = gemm::f32_weights(gpu, w, None)?;
        let norm = upload_norm(gpu, g, norm)?;
        let yp = gpu.scratch(Slot::Y, g.oh * g.ow * w.rows * 4)?;
        Ok(Staged {
            bf16: path == ConvPath::Bf16,
            x: xp,
            w: wp,
            y: yp,
            n_out: w.rows,
            norm,
        })
    }

    /// Queues the statistics and the implicit GEMM.
    fn queue(&self, gpu: &Gpu, g: &ConvGeom) -> Result<(), String> {
        ops::conv(
            gpu, self.bf16, self.x, g, &self.norm, self.w, self.n_out, self.y,
        )
    }
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
    let s = Staged::new(gpu, path, x, g, norm, w)?;
    s.queue(gpu, g)?;
    gpu.download(y, s.y)
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
    let s = Staged::new(gpu, path, x, g, norm, w)?;
    s.queue(gpu, g)?;
    gpu.sync()?;
    let start = std::time::Instant::now();
    for _ in 0..reps {
        s.queue(gpu, g)?;
    }
    gpu.sync()?;
    Ok(start.elapsed().as_secs_f64() / reps.max(1) as f64)
}
