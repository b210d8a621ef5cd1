//! Launchers of the quantized GEMV kernels (`kernels/gemv.cu`): decode-sized products
//! `y[t, rows] = x[t, cols] · Wᵀ` for `t` ≤ [`GEMV_MAX_ROWS`] activation rows, weights read in
//! their GGUF blocks. Pointers are device addresses in the [`Gpu`]'s context; work is queued on
//! its stream.

use crate::gpu::Gpu;
use crate::kernels::{Staging, GEMV_MAX_ROWS, GEMV_WARPS};
use crate::matrix::DeviceMatrix;
use crate::ops::arg;
use cudarc::driver::sys::CUdeviceptr;
use oxinfer_kernels::WeightFormat;
use std::sync::OnceLock;

/// Quantized GEMV `y[t, rows] = x[t, cols] · Wᵀ` for `t` ≤ [`GEMV_MAX_ROWS`] rows of f32
/// activations `x` (int8 block values, see `quant_act`), weights decoded in registers.
pub(crate) fn gemv(
    g: &Gpu,
    w: &DeviceMatrix,
    x: CUdeviceptr,
    y: CUdeviceptr,
    t: usize,
) -> Result<(), String> {
    let f =
        g.k.gemv(w.format, t)
            .ok_or_else(|| format!("no GEMV for {} with {t} rows", w.format))?;
    debug_assert!(t <= GEMV_MAX_ROWS);
    let wp = w.buf.ptr();
    let rb = w.row_bytes as i64;
    let [rows, cols, t_i] = [w.rows, w.cols, t].map(|v| v as i32);
    g.declare_bytes(w.buf.bytes());
    g.launch(
        f,
        (w.rows.div_ceil(GEMV_WARPS) as u32, 1, 1),
        ((32 * GEMV_WARPS) as u32, 1, 1),
        &mut [
            arg(&wp),
            arg(&rb),
            arg(&x),
            arg(&y),
            arg(&rows),
            arg(&cols),
            arg(&t_i),
        ],
    )
}

/// How the int8 GEMV's output row meets `y`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum GemvOut {
    /// `y = x · Wᵀ`.
    Store,
    /// `y += x · Wᵀ` (the residual add after a block's last product, one f32 add of the same
    /// sum as the CPU's separate add; the second matrix of a pair always stores).
    Accumulate,
}

/// The kernels' `GemvMats` (gemv.cu): up to three matrices of one launch, their outputs and
/// row counts (absent ones null, 0 rows).
#[repr(C)]
#[derive(Clone, Copy)]
struct GemvMats {
    w: [CUdeviceptr; 3],
    y: [CUdeviceptr; 3],
    rows: [i32; 3],
    /// Row bytes of the third matrix (its own format's in a mixed launch).
    row_bytes3: i64,
}

/// GEMV on int8 activations (formats of `INT8_GEMV_FORMATS`): `y[t, rows] = x · Wᵀ` (or `+=`,
/// `out`) with `xq` the int8 values `[t, cols]` and `xd` one scale per block (`[t, cols /
/// block]`, from `quant_act_i8`), `t` ≤ [`GEMV_MAX_ROWS`]; a warp per output row, or the four
/// warps of a block per row when the matrices have too few rows to fill the device
/// ([`gemv_split`]). Each of `more` (at most two `(w2, y2)`, same format and width as `w`, any
/// number of rows; for one activation row the last may be of the other format of an
/// [`crate::kernels::INT8_GEMV_MIXES`] pair, see [`mixes_with`]) is also multiplied,
/// `y2 = x · W2ᵀ`, in the same launch. One-row products take the staged kernel
/// (weight rows copied whole into shared memory first) when [`staged`] says so and the rows
/// fit [`STAGED_MAX_SMEM`]. `xd` holds the scales and then the run sums
/// ([`crate::ops::int8_side_bytes`]). `grouped`: `xq` is in the grouped layout
/// ([`crate::ops::Int8Layout::grouped`]; one row of Q4_K or Q6_K).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemv_i8(
    g: &Gpu,
    w: &DeviceMatrix,
    more: &[(&DeviceMatrix, CUdeviceptr)],
    xq: CUdeviceptr,
    xd: CUdeviceptr,
    y: CUdeviceptr,
    t: usize,
    out: GemvOut,
    grouped: bool,
) -> Result<(), String> {
    if more.len() > 2 {
        return Err(format!(
            "an int8 GEMV launch takes 3 matrices, not {}",
            more.len() + 1
        ));
    }
    let mut mats = GemvMats {
        w: [w.buf.ptr(), 0, 0],
        y: [y, 0, 0],
        rows: [w.rows as i32, 0, 0],
        row_bytes3: w.row_bytes as i64,
    };
    for (i, (m, ym)) in more.iter().enumerate() {
        (mats.w[i + 1], mats.y[i + 1], mats.rows[i + 1]) = (m.buf.ptr(), *ym, m.rows as i32);
    }
    // A third matrix of another format: the mixed kernel of the pair (one activation row).
    let mixed = match more {
        [_, (w3, _)] if w3.format != w.format => {
            if t != 1 || !mixes_with(w, w3) {
                return Err(format!(
                    "no int8 GEMV takes {} with {} for {t} rows",
                    w.format, w3.format
                ));
            }
            mats.row_bytes3 = w3.row_bytes as i64;
            Some(w3.format)
        }
        _ => None,
    };
    let total: usize = mats.rows.iter().map(|&r| r as usize).sum();
    let split = gemv_split(w.format, w.cols, total, t, g.sm_count);
    let pair = t == 1
        && split == 1
        && mixed.is_none()
        && mats.rows.iter().all(|r| r % 2 == 0)
        && gemv_pairs();
    // Shared bytes of the staged kernel: one row per `split` warps.
    let units = GEMV_WARPS / split;
    let smem = staged_unit_bytes(w.row_bytes.max(mats.row_bytes3 as usize)) * units;
    let stage = t == 1 && !pair && staged() && smem <= STAGED_MAX_SMEM;
    let staging = match (stage, staged_early(), g.bulk_staging) {
        (false, ..) => Staging::Direct,
        (true, false, _) => Staging::Staged,
        (true, true, false) => Staging::Early,
        (true, true, true) => Staging::Bulk,
    };
    let f = if let Some(f3) = mixed {
        g.k.gemv_i8_mixed(w.format, f3, staging)
    } else if pair {
        g.k.gemv_i8_pair(w.format)
    } else if stage {
        g.k.gemv_i8_staged(w.format, staging)
    } else {
        g.k.gemv_i8(w.format, t)
    }
    .ok_or_else(|| format!("no int8 GEMV for {} with {t} rows", w.format))?;
    let rb = w.row_bytes as i64;
    g.declare_bytes(w.buf.bytes() + more.iter().map(|(m, _)| m.buf.bytes()).sum::<usize>());
    let [cols, t_i, split_i] = [w.cols, t, split].map(|v| v as i32);
    let accum = i32::from(out == GemvOut::Accumulate);
    let grouped = i32::from(grouped);
    let rows_per_block = GEMV_WARPS / split * if pair { 2 } else { 1 };
    g.launch_smem(
        f,
        (total.div_ceil(rows_per_block) as u32, 1, 1),
        ((32 * GEMV_WARPS) as u32, 1, 1),
        if stage { smem as u32 } else { 0 },
        &mut [
            arg(&mats),
            arg(&rb),
            arg(&xq),
            arg(&xd),
            arg(&cols),
            arg(&t_i),
            arg(&split_i),
            arg(&accum),
            arg(&grouped),
        ],
    )
}

/// Whether one-row int8 GEMV launches may take `w3` as the third matrix beside matrices like
/// `w` although its format differs: a pair of [`crate::kernels::INT8_GEMV_MIXES`], the same
/// width, unless `OXINFER_CUDA_GEMV_MIXED=0`.
pub(crate) fn mixes_with(w: &DeviceMatrix, w3: &DeviceMatrix) -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !std::env::var("OXINFER_CUDA_GEMV_MIXED").is_ok_and(|v| v == "0"))
        && w.cols == w3.cols
        && crate::kernels::INT8_GEMV_MIXES
            .iter()
            .any(|&(f, f3, _)| (f, f3) == (w.format, w3.format))
}

/// Most dynamic shared memory a staged GEMV block takes (its kernels are allowed this much,
/// kernels.rs).
pub(crate) const STAGED_MAX_SMEM: usize = 96 * 1024;

/// Shared bytes the staged GEMV gives one row (`staged_unit_bytes` in gemv.cu with R = 1): the
/// row rounded up to 16 bytes, plus 16 for its misalignment.
fn staged_unit_bytes(row_bytes: usize) -> usize {
    row_bytes.next_multiple_of(16) + 16
}

/// Whether one-row int8 GEMVs copy their weight rows into shared memory before the dot
/// products (unless `OXINFER_CUDA_GEMV_STAGED=0`; measured in docs/gpu.md).
fn staged() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !std::env::var("OXINFER_CUDA_GEMV_STAGED").is_ok_and(|v| v == "0"))
}

/// Whether the staged one-row GEMV fetches its weight rows before waiting for the previous
/// kernel (unless `OXINFER_CUDA_GEMV_EARLY=0`; measured in docs/gpu.md). Without programmatic
/// dependent launch (before compute 9.0, or `OXINFER_CUDA_PDL=0`) the two variants are the same.
fn staged_early() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !std::env::var("OXINFER_CUDA_GEMV_EARLY").is_ok_and(|v| v == "0"))
}

/// Which IQ4_XS / IQ4_NL int8 GEMV kernels run (`OXINFER_CUDA_IQ4_GEMV`, read once; for A/B on
/// the device).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Iq4Gemv {
    /// Session 11's: the sign-split table dot, eight lanes per IQ4_XS super-block.
    Default,
    /// `old`: session 10's (a table lookup per four codes, byte loads of the scales); the same
    /// integer sums and results as the default.
    Old,
    /// `wide`: one-row IQ4_XS with four lanes per super-block, two groups each (the sums in
    /// another order: within the GEMV test's bounds, not bit-identical).
    Wide,
}

/// The IQ4 GEMV kernels `OXINFER_CUDA_IQ4_GEMV` asks for (`old`, `wide`; anything else: the
/// default). Read once.
pub(crate) fn iq4_gemv() -> Iq4Gemv {
    static V: OnceLock<Iq4Gemv> = OnceLock::new();
    *V.get_or_init(|| match std::env::var("OXINFER_CUDA_IQ4_GEMV").as_deref() {
        Ok("old") => Iq4Gemv::Old,
        Ok("wide") => Iq4Gemv::Wide,
        _ => Iq4Gemv::Default,
    })
}

/// Warps that share one output row of an int8 GEMV over `cols`-wide rows of `format` for a grid
/// of `rows` output rows on a
/// device of `sm_count` multiprocessors: 1 (a warp per row, the fastest when the grid holds
/// several waves: 5–15 % faster on the H200, docs/gpu.md) unless the rows would give fewer than
/// 32 warps per multiprocessor; then as many as a row's blocks keep busy, up to [`GEMV_WARPS`]
/// (a warp's lanes take 8 Q4_K super-blocks per step for one activation row `t`, 2 for several
/// and for Q6_K, 4 of the IQ/TQ formats (8 of one-row IQ4_XS under [`Iq4Gemv::Wide`]), or 32
/// blocks of the 32-weight formats).
/// A row of at most two warp steps keeps one warp where the rows give every multiprocessor two
/// blocks of one-warp rows. `OXINFER_CUDA_GEMV_SPLIT=0`/`1` forces one
/// warp / four warps per row, `few4` four whenever the rows are few, `old` the rule without the
/// two-step exception (for measuring).
fn gemv_split(format: WeightFormat, cols: usize, rows: usize, t: usize, sm_count: usize) -> usize {
    static FORCED: OnceLock<Option<usize>> = OnceLock::new();
    let forced =
        *FORCED.get_or_init(
            || match std::env::var("OXINFER_CUDA_GEMV_SPLIT").as_deref() {
                Ok("0") => Some(1),
                Ok("1") => Some(GEMV_WARPS),
                // Session 7's rule: four warps per row whenever the rows are few.
                Ok("few4") => Some(0),
                // Before session 29: rows of one or two warp steps shared by two warps.
                Ok("old") => Some(usize::MAX),
                _ => None,
            },
        );
    match forced {
        Some(0) if rows < 32 * sm_count => return GEMV_WARPS,
        Some(s) if s > 0 && s != usize::MAX => return s,
        _ if rows >= 32 * sm_count => return 1,
        _ => {}
    }
    let (block_cols, per_step) = match format {
        WeightFormat::Q4K if t == 1 => (256, 8),
        WeightFormat::Q4K | WeightFormat::Q6K => (256, 2),
        WeightFormat::IQ4_XS if t == 1 && iq4_gemv() == Iq4Gemv::Wide => (256, 8),
        // The 256-weight IQ/TQ formats: eight lanes per super-block.
        f if f.block_size() == 256 => (256, 4),
        _ => (32, 32),
    };
    let warps = (cols / block_cols).div_ceil(per_step);
    // A row of at most two warp steps stays on one warp when that still gives every
    // multiprocessor two blocks: sharing it costs a block barrier and a reduction through
    // shared memory for one step saved (the 7B's 3,584 × 3,584 Q4_K output projection alone on
    // an H100: 5.3 µs with two warps a row, 4.1 with one; `OXINFER_CUDA_GEMV_SPLIT=old` keeps
    // sharing such rows).
    if warps <= 2 && rows >= 2 * GEMV_WARPS * sm_count && forced != Some(usize::MAX) {
        return 1;
    }
    warps.next_power_of_two().clamp(1, GEMV_WARPS)
}

/// Whether one-row int8 GEMVs give each warp two output rows (`OXINFER_CUDA_GEMV_ROWS=2`;
/// default one).
fn gemv_pairs() -> bool {
    static PAIRS: OnceLock<bool> = OnceLock::new();
    *PAIRS.get_or_init(|| std::env::var("OXINFER_CUDA_GEMV_ROWS").is_ok_and(|v| v == "2"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The split rule at the 7B's and SmolLM2's shapes on an H100 (132 multiprocessors), one
    /// activation row (no `OXINFER_CUDA_GEMV_SPLIT` in the test environment).
    #[test]
    fn split_rule_at_real_shapes() {
        let sm = 132;
        // q/k/v (4,608 rows): a warp per row for its many rows.
        assert_eq!(gemv_split(WeightFormat::Q4K, 3584, 4608, 1, sm), 1);
        // The output projection: 14 super-blocks a row, two warp steps: one warp.
        assert_eq!(gemv_split(WeightFormat::Q4K, 3584, 3584, 1, sm), 1);
        // The down projections: 74 super-blocks a row, four warps.
        assert_eq!(
            gemv_split(WeightFormat::Q4K, 18944, 3584, 1, sm),
            GEMV_WARPS
        );
        assert_eq!(
            gemv_split(WeightFormat::Q6K, 18944, 3584, 1, sm),
            GEMV_WARPS
        );
        // SmolLM2's down projection (576 rows of 48 Q4_1 blocks): too few rows for one warp
        // each to give every multiprocessor two blocks, so two warps share a row as before.
        assert_eq!(gemv_split(WeightFormat::Q4_1, 1536, 576, 1, sm), 2);
        // Several activation rows: Q4_K at two super-blocks a step.
        assert_eq!(gemv_split(WeightFormat::Q4K, 3584, 3584, 4, sm), GEMV_WARPS);
    }
}
