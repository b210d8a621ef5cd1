//! Packed float GEMM: `y = x · Wᵀ` for f32, f16 and bf16 weights with f32 activations, the
//! matmuls of encoders (BERT-style embedding models), whose batches of hundreds of tokens make
//! the product compute-bound.
//!
//! [`PackedFloatMatrix`] widens the weights to f32 once and stores them as panels of [`NR`]
//! consecutive rows: panel `p` holds rows `16p .. 16p + 16` as `cols` groups of 16 values,
//! `panel[k * 16 + r] = W[16p + r][k]` (the last panel padded with zero rows). A register tile
//! of `MR` tokens × 16 rows then reads one contiguous run of 16 weights per input feature and
//! broadcasts one activation per token: AVX-512 keeps 12 tokens × one 512-bit accumulator,
//! AVX2 6 tokens × two 256-bit ones, NEON 6 tokens × four 128-bit ones, the scalar twin 4
//! tokens × 16 rows.
//!
//! The driver splits tokens into blocks of [`TOKEN_BLOCK`] and panels into chunks, one pool task
//! per (token block, panel chunk), and walks the input features in slices of [`KC`] so that
//! the current weight slice (`KC × 16` floats) stays in L1 while the token block's activations
//! stay in L2. The AVX-512 tile stores its sums straight into `y` with masked stores (the bias
//! of [`matmul_float_packed_bias`] added with the first k slice); the other tiles go through a
//! stack tile. Every product is the exact f32 sum of the widened weights times the activations;
//! only the summation order differs between instruction sets (results agree to rounding).

pub mod int16;
#[cfg(target_arch = "x86_64")]
mod int16_avx2;
#[cfg(test)]
mod int16_tests;
#[cfg(target_arch = "x86_64")]
mod int16_x86;
#[cfg(target_arch = "aarch64")]
mod neon;
mod scalar;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;

use crate::dispatch::{detected_isa, Isa};
use crate::fast::SyncPtr;
use crate::format::WeightFormat;
use crate::huge::HugeF32;
use crate::matrix::WeightMatrix;
use crate::pool::{parallel_for, pool_threads};

/// Rows per panel (output features a register tile covers).
pub const NR: usize = 16;

/// The most tokens of one register tile on any instruction set.
pub const MAX_MR: usize = 12;

/// Input features per slice of the k loop (a `KC × NR` weight slice is 16 KiB).
const KC: usize = 256;

/// Tokens of one task's block (a multiple of every tile height).
const TOKEN_BLOCK: usize = 96;

/// Most panels one task covers.
const MAX_PANEL_CHUNK: usize = 8;

/// Register tile rows: tokens per tile on `isa`.
fn tile_tokens(isa: Isa) -> usize {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => 12,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => 6,
        #[cfg(target_arch = "aarch64")]
        Isa::Neon | Isa::NeonDot | Isa::NeonI8mm => 6,
        _ => 4,
    }
}

/// A `[rows, cols]` f32 / f16 / bf16 weight matrix widened to f32 and packed into panels of
/// [`NR`] rows (see the module doc). Owns `ceil(rows / 16) * 16 * cols` floats.
#[derive(Clone, Debug)]
pub struct PackedFloatMatrix {
    format: WeightFormat,
    rows: usize,
    cols: usize,
    /// On huge pages from [`crate::huge::HUGE_MIN`] bytes on: Stable Diffusion keeps ~6 GB of
    /// these panels, and fresh 4 KiB pages made a fifth of its start-up page faults.
    data: HugeF32,
}

impl PackedFloatMatrix {
    /// Whether `format` is one this packing takes (F32, F16, BF16).
    pub fn supports(format: WeightFormat) -> bool {
        matches!(
            format,
            WeightFormat::F32 | WeightFormat::F16 | WeightFormat::BF16
        )
    }

    /// Widens and packs `w` (parallel over panels on the pool); `None` when its format is not
    /// a float format.
    pub fn pack(w: &WeightMatrix) -> Option<Self> {
        if !Self::supports(w.format) {
            return None;
        }
        let (rows, cols) = (w.rows, w.cols);
        let panels = rows.div_ceil(NR);
        let mut data = HugeF32::zeroed(panels * NR * cols);
        let dp = SyncPtr(data.as_mut_ptr());
        parallel_for(panels, &|p| {
            // SAFETY: panel p owns floats [p*NR*cols, (p+1)*NR*cols) of `data`, which outlives
            // parallel_for; no two tasks share a panel.
            let panel =
                unsafe { std::slice::from_raw_parts_mut(dp.get().add(p * NR * cols), NR * cols) };
            let mut row = vec![0f32; cols];
            for r in 0..NR.min(rows - p * NR) {
                w.dequantize_row_into(p * NR + r, &mut row);
                for (k, &v) in row.iter().enumerate() {
                    panel[k * NR + r] = v;
                }
            }
        });
        Some(PackedFloatMatrix {
            format: w.format,
            rows,
            cols,
            data,
        })
    }

    /// Packs the f32 `[rows, cols]` matrix whose row `r` is `row(r)` (`cols` floats), on the
    /// calling thread: for small matrices made per call (an attention head's keys, each a row
    /// of the head's slice of the key projection).
    pub fn from_rows<'a>(rows: usize, cols: usize, row: impl Fn(usize) -> &'a [f32]) -> Self {
        let mut m = Self::zeroed(rows, cols);
        for (p, panel) in m.data.chunks_exact_mut(NR * cols.max(1)).enumerate() {
            for r in 0..NR.min(rows - p * NR) {
                for (group, &v) in panel.chunks_exact_mut(NR).zip(&row(p * NR + r)[..cols]) {
                    group[r] = v;
                }
            }
        }
        m
    }

    /// Packs the f32 `[rows, cols]` matrix whose column `k` is `column(k)` (`rows` floats), on
    /// the calling thread: an attention head's values as `Vᵀ` (row `e` of the packed matrix is
    /// feature `e` over the tokens, column `k` is token `k`'s value vector).
    pub fn from_columns<'a>(rows: usize, cols: usize, column: impl Fn(usize) -> &'a [f32]) -> Self {
        let mut m = Self::zeroed(rows, cols);
        for (p, panel) in m.data.chunks_exact_mut(NR * cols.max(1)).enumerate() {
            let (r0, live) = (p * NR, NR.min(rows - p * NR));
            for (k, group) in panel.chunks_exact_mut(NR).enumerate() {
                group[..live].copy_from_slice(&column(k)[r0..r0 + live]);
            }
        }
        m
    }

    /// All-zero f32 panels for a `[rows, cols]` matrix (on huge pages where large): the start
    /// of the other constructors, and for a caller that writes the values itself through
    /// [`Self::panels_mut`] (a convolution kernel packed straight from its file layout).
    pub fn zeroed(rows: usize, cols: usize) -> Self {
        PackedFloatMatrix {
            format: WeightFormat::F32,
            rows,
            cols,
            data: HugeF32::zeroed(rows.div_ceil(NR) * NR * cols),
        }
    }

    /// `count` all-zero f32 `[rows, cols]` matrices as [`Self::zeroed`], sharing one huge-page
    /// mapping where each alone would be too small for one ([`HugeF32::zeroed_parts`]).
    pub fn zeroed_many(count: usize, rows: usize, cols: usize) -> Vec<Self> {
        HugeF32::zeroed_parts(&vec![rows.div_ceil(NR) * NR * cols; count])
            .into_iter()
            .map(|data| PackedFloatMatrix {
                format: WeightFormat::F32,
                rows,
                cols,
                data,
            })
            .collect()
    }

    /// The `ceil(rows / 16)` panels in order, each `cols` groups of [`NR`] floats: panel `p`'s
    /// `[k * NR + r]` is row `NR · p + r`, column `k`. The padding rows of the last panel (past
    /// `rows`) must stay zero.
    pub fn panels_mut(&mut self) -> std::slice::ChunksExactMut<'_, f32> {
        let len = NR * self.cols.max(1);
        self.data.chunks_exact_mut(len)
    }

    /// Storage format of the original weights.
    pub fn format(&self) -> WeightFormat {
        self.format
    }

    /// Number of rows (output features).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns (input features).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes held.
    pub fn size_bytes(&self) -> usize {
        self.data.len() * 4
    }

    fn panels(&self) -> usize {
        self.rows.div_ceil(NR)
    }

    fn panel(&self, p: usize) -> &[f32] {
        &self.data[p * NR * self.cols..(p + 1) * NR * self.cols]
    }
}

/// Whether the packed float GEMM should run here: the kernel set is `auto` (with
/// `OXINFER_KERNELS=scalar` the reference matmul runs) and packing is not switched off
/// (`OXINFER_PACKED=0`).
pub fn float_packing_pays(format: WeightFormat) -> bool {
    crate::dispatch::packing_enabled()
        && crate::dispatch::kernel_set() == crate::dispatch::KernelSet::Auto
        && PackedFloatMatrix::supports(format)
}

/// Products with at least this many activation rows pack a float weight for the call
/// ([`pack_for_call`]): the packing reads and writes the matrix once, about `1 / t` of the
/// product's work.
pub const PACK_FOR_CALL_MIN_ROWS: usize = 32;

/// `w` widened and packed for one product of `t` activation rows (a convolution's unfolded
/// pixels, a diffusion model's linear layers over every pixel), when that pays: a float format,
/// `t ≥` [`PACK_FOR_CALL_MIN_ROWS`] and [`float_packing_pays`]. `None`: use the row kernels
/// (`crate::matmul`). The packed copy lives as long as the caller keeps it, so no weight is
/// held twice between calls.
pub fn pack_for_call(w: &WeightMatrix, t: usize) -> Option<PackedFloatMatrix> {
    if t < PACK_FOR_CALL_MIN_ROWS || !float_packing_pays(w.format) {
        return None;
    }
    PackedFloatMatrix::pack(w)
}

/// `y[t][rows] = x[t][cols] · Wᵀ` with the packed weights `w`, on the best instruction set of
/// this CPU, on the pool.
///
/// # Panics
/// If `x.len() != t * cols` or `y.len() != t * rows`.
pub fn matmul_float_packed(w: &PackedFloatMatrix, x: &[f32], t: usize, y: &mut [f32]) {
    let _p = crate::profile::scope(
        || format!("matmul {} packed-f32", w.format),
        w.size_bytes() as u64,
        2 * (w.rows * w.cols * t) as u64,
    );
    matmul_float_packed_isa(w, x, t, y, detected_isa());
}

/// [`matmul_float_packed`] plus a bias: `y[t][r] = x[t] · W[r] + bias[r]` (the bias added as
/// the first k slice is stored, so it costs no pass over `y` of its own).
///
/// # Panics
/// If `x.len() != t * cols`, `y.len() != t * rows` or `bias.len() != rows`.
pub fn matmul_float_packed_bias(
    w: &PackedFloatMatrix,
    x: &[f32],
    t: usize,
    bias: &[f32],
    y: &mut [f32],
) {
    matmul_float_packed_post(w, x, t, Some(bias), y, None);
}

/// An element-wise function applied to finished outputs (an activation), called on runs of
/// consecutive output features of one token.
pub type Epilogue<'a> = &'a (dyn Fn(&mut [f32]) + Sync);

/// [`matmul_float_packed`] with an optional bias, then `post` on the results inside the same
/// pool tasks (no pass over `y` of its own): every output value goes through `post` exactly
/// once, after its sum (and bias) is complete, as part of a run of consecutive features of one
/// token.
///
/// # Panics
/// If `x.len() != t * cols`, `y.len() != t * rows` or a bias's length is not `rows`.
pub fn matmul_float_packed_post(
    w: &PackedFloatMatrix,
    x: &[f32],
    t: usize,
    bias: Option<&[f32]>,
    y: &mut [f32],
    post: Option<Epilogue<'_>>,
) {
    let _p = crate::profile::scope(
        || format!("matmul {} packed-f32", w.format),
        w.size_bytes() as u64,
        2 * (w.rows * w.cols * t) as u64,
    );
    if let Some(b) = bias {
        assert_eq!(
            b.len(),
            w.rows,
            "bias length must be the rows of the matrix"
        );
    }
    run_packed(w, x, t, y, detected_isa(), bias, post);
}

/// [`matmul_float_packed`] on a given instruction set (AVX-512, AVX2, NEON, or the scalar twin
/// for any other value; an [`Isa`] is only ever one the CPU has).
///
/// # Panics
/// If `x.len() != t * cols` or `y.len() != t * rows`.
pub fn matmul_float_packed_isa(
    w: &PackedFloatMatrix,
    x: &[f32],
    t: usize,
    y: &mut [f32],
    isa: Isa,
) {
    run_packed(w, x, t, y, isa, None, None);
}

/// The driver of [`matmul_float_packed_isa`] and [`matmul_float_packed_post`].
fn run_packed(
    w: &PackedFloatMatrix,
    x: &[f32],
    t: usize,
    y: &mut [f32],
    isa: Isa,
    bias: Option<&[f32]>,
    post: Option<Epilogue<'_>>,
) {
    let (rows, cols) = (w.rows, w.cols);
    crate::matrix::check_io(x.len(), y.len(), t, rows, cols);
    if rows == 0 || t == 0 {
        return;
    }
    if cols == 0 {
        match bias {
            Some(b) => y.chunks_exact_mut(rows).for_each(|r| r.copy_from_slice(b)),
            None => y.fill(0.0),
        }
        if let Some(f) = post {
            y.chunks_exact_mut(rows).for_each(f);
        }
        return;
    }
    let mr = tile_tokens(isa);
    for_each_task(t, rows, w.panels(), y, post, &|(t0, t1), (p0, p1), out| {
        let mut tile = [[0f32; NR]; MAX_MR];
        for k0 in (0..cols).step_by(KC) {
            let kc = KC.min(cols - k0);
            #[cfg(target_arch = "x86_64")]
            if isa.has_vnni() {
                avx512_slice(w, x, (t0, t1), (p0, p1), (k0, kc), bias, out);
                continue;
            }
            for p in p0..p1 {
                let b = &w.panel(p)[k0 * NR..(k0 + kc) * NR];
                let live = NR.min(rows - p * NR);
                let panel_bias = bias.map(|bs| &bs[p * NR..p * NR + live]);
                for i0 in (t0..t1).step_by(mr) {
                    let n = mr.min(t1 - i0);
                    let a = &x[i0 * cols + k0..(i0 + n - 1) * cols + k0 + kc];
                    run_tile(isa, a, cols, b, kc, &mut tile[..n]);
                    for (i, acc) in tile[..n].iter().enumerate() {
                        // SAFETY: token i0 + i < t and rows p*16 .. p*16 + live <= rows, so the
                        // `live` values lie inside y ([t, rows]); the (token block, panel chunk)
                        // of this task is written by no other task; y outlives parallel_for.
                        let dst = unsafe {
                            std::slice::from_raw_parts_mut(
                                out.get().add((i0 + i) * rows + p * NR),
                                live,
                            )
                        };
                        store_rows(dst, acc, k0 == 0, panel_bias);
                    }
                }
            }
        }
    });
}

/// One k slice (`k0 .. k0 + kc`) of a task of [`run_packed`] on the AVX-512 tiles: panels two
/// at a time ([`x86::tile_avx512_pair`]; an odd last one alone), each pair's `kc × 32` weights
/// staying in L1 while the task's tokens pass in tiles of 12, sums stored straight into `y`.
#[cfg(target_arch = "x86_64")]
fn avx512_slice(
    w: &PackedFloatMatrix,
    x: &[f32],
    (t0, t1): (usize, usize),
    (p0, p1): (usize, usize),
    (k0, kc): (usize, usize),
    bias: Option<&[f32]>,
    out: SyncPtr<f32>,
) {
    let (rows, cols) = (w.rows, w.cols);
    let dest = |p: usize, i0: usize| {
        let live = NR.min(rows - p * NR);
        x86::Dest {
            // SAFETY: token i0 < t and rows p*16 .. p*16 + live <= rows: the offset lies
            // inside y ([t, rows]).
            ptr: unsafe { out.get().add(i0 * rows + p * NR) },
            ldo: rows,
            live,
            first: k0 == 0,
            bias: bias.map_or(std::ptr::null(), |b| b[p * NR..].as_ptr()),
        }
    };
    let mr = tile_tokens(Isa::Avx512Vnni);
    let mut p = p0;
    while p < p1 {
        let pair = p + 1 < p1;
        let b0 = &w.panel(p)[k0 * NR..(k0 + kc) * NR];
        let b1 = pair.then(|| &w.panel(p + 1)[k0 * NR..(k0 + kc) * NR]);
        for i0 in (t0..t1).step_by(mr) {
            let n = mr.min(t1 - i0);
            let a = &x[i0 * cols + k0..(i0 + n - 1) * cols + k0 + kc];
            let d0 = dest(p, i0);
            // SAFETY: an Avx512Vnni level is only handed out when the CPU has AVX-512 F (the
            // caller checked `has_vnni`); `a` holds n <= 12 rows of kc activations `cols`
            // apart and `b0` / `b1` kc × 16 weights each (the slicing above); the destination
            // rows (`live` values of tokens i0 .. i0 + n, `rows` apart, of panels p and p + 1)
            // lie in y and belong to this task's (token block, panel chunk) alone; each bias
            // pointer holds its panel's `live` values.
            unsafe {
                match b1 {
                    Some(b1) => x86::tile_avx512_pair(
                        a.as_ptr(),
                        cols,
                        (b0.as_ptr(), b1.as_ptr()),
                        kc,
                        n,
                        (&d0, &dest(p + 1, i0)),
                    ),
                    None => x86::tile_avx512(a.as_ptr(), cols, b0.as_ptr(), kc, n, &d0),
                }
            }
        }
        p += if pair { 2 } else { 1 };
    }
}

/// One task of [`for_each_task`]: its tokens `(t0, t1)`, its panels `(p0, p1)` and `y`.
pub(super) type TaskBody<'a> = &'a (dyn Fn((usize, usize), (usize, usize), SyncPtr<f32>) + Sync);

/// The pool tasks of a packed GEMM writing `y` (`[t, rows]`, `panels` panels of [`NR`] rows):
/// blocks of [`TOKEN_BLOCK`] tokens × chunks of consecutive panels (about four tasks per
/// thread). Each task runs `body((t0, t1), (p0, p1), y)`, which must write only features
/// `p0·NR .. min(p1·NR, rows)` of tokens `t0 .. t1`, then `post` over those finished outputs
/// (the f32 and int16 GEMMs' shared schedule).
pub(super) fn for_each_task(
    t: usize,
    rows: usize,
    panels: usize,
    y: &mut [f32],
    post: Option<Epilogue<'_>>,
    body: TaskBody<'_>,
) {
    let token_blocks = t.div_ceil(TOKEN_BLOCK);
    let panel_tasks = (pool_threads() * 4).div_ceil(token_blocks).max(1);
    let chunk = panels.div_ceil(panel_tasks).clamp(1, MAX_PANEL_CHUNK);
    let panel_chunks = panels.div_ceil(chunk);
    let out = SyncPtr(y.as_mut_ptr());
    parallel_for(token_blocks * panel_chunks, &|task| {
        let (tb, pc) = (task / panel_chunks, task % panel_chunks);
        let (t0, t1) = (tb * TOKEN_BLOCK, ((tb + 1) * TOKEN_BLOCK).min(t));
        let (p0, p1) = (pc * chunk, ((pc + 1) * chunk).min(panels));
        body((t0, t1), (p0, p1), out);
        if let Some(f) = post {
            let (r0, r1) = (p0 * NR, (p1 * NR).min(rows));
            for i in t0..t1 {
                // SAFETY: features r0 .. r1 of token i lie inside y ([t, rows]) and belong to
                // this task alone; its sums are complete (`body` did every k slice).
                f(
                    unsafe {
                        std::slice::from_raw_parts_mut(out.get().add(i * rows + r0), r1 - r0)
                    },
                );
            }
        }
    });
}

/// `dst = acc[..dst.len()] (+ bias)` (`first`: the first k slice) or `dst += acc[..dst.len()]`,
/// with the length a constant on the usual whole-panel path (a run-time length made each tile
/// row a `memmove` call: 4 % of an encoder's time). `bias` is as long as `dst`.
#[inline(always)]
fn store_rows(dst: &mut [f32], acc: &[f32; NR], first: bool, bias: Option<&[f32]>) {
    let add = |d: &mut [f32], v: &[f32]| d.iter_mut().zip(v).for_each(|(d, v)| *d += v);
    if let Ok(whole) = <&mut [f32; NR]>::try_from(&mut *dst) {
        if first {
            *whole = *acc;
            if let Some(b) = bias.and_then(|b| <&[f32; NR]>::try_from(b).ok()) {
                add(whole, b);
            }
        } else {
            add(whole, acc);
        }
    } else if first {
        dst.copy_from_slice(&acc[..dst.len()]);
        if let Some(b) = bias {
            add(dst, b);
        }
    } else {
        add(dst, acc);
    }
}

/// `tile[i][r] = Σ_{k < kc} a[i * lda + k] · b[k * 16 + r]` for the `tile.len()` tokens
/// (at most the tile height of `isa`) of `a`.
fn run_tile(isa: Isa, a: &[f32], lda: usize, b: &[f32], kc: usize, tile: &mut [[f32; NR]]) {
    let n = tile.len();
    debug_assert!(n >= 1 && n <= tile_tokens(isa));
    debug_assert!(a.len() >= (n - 1) * lda + kc && b.len() >= kc * NR);
    #[cfg(target_arch = "x86_64")]
    if isa.has_vnni() {
        let dest = x86::Dest {
            ptr: tile.as_mut_ptr().cast(),
            ldo: NR,
            live: NR,
            first: true,
            bias: std::ptr::null(),
        };
        // SAFETY: an Avx512Vnni level is only handed out when the CPU has AVX-512 F/VL (with
        // AVX2, FMA); `a` holds n rows of kc activations `lda` apart and `b` kc × 16 weights
        // (checked by the slicing in the caller), n <= 12; the destination is `tile`, n rows
        // of 16 floats, borrowed mutably here.
        unsafe { x86::tile_avx512(a.as_ptr(), lda, b.as_ptr(), kc, n, &dest) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: an AVX2 level is only handed out when the CPU has AVX2 and FMA; bounds as
        // above, n <= 6.
        unsafe { x86::tile_avx2(a.as_ptr(), lda, b.as_ptr(), kc, tile) };
        return;
    }
    #[cfg(target_arch = "aarch64")]
    if isa.is_neon() {
        // SAFETY: NEON is present on every aarch64 CPU; bounds as above, n <= 6.
        unsafe { neon::tile(a.as_ptr(), lda, b.as_ptr(), kc, tile) };
        return;
    }
    scalar::tile(a, lda, b, kc, tile);
}
