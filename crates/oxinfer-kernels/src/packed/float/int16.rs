//! Int16 GEMM for float weights: `y = x · Wᵀ` with both sides rounded to 16-bit integers and
//! multiplied with AVX-512 VNNI's `vpdpwssd` (two int16 products added into each int32 lane),
//! which does 32 multiply-adds per instruction where the f32 tile's `vfmadd` does 16: twice the
//! rate on the same ports (measured on Zen 4: both one 512-bit instruction per cycle). On AVX2
//! CPUs `vpmaddwd` + `vpaddd` do the same on 256-bit registers: on Zen 3 1.6× the f32 tile's
//! multiply-adds per cycle (`int16_avx2`).
//!
//! Scales: every weight row and every activation row (token) gets one f32 scale `s`, `q =
//! round(v · s)`, chosen so that `|q| ≤ 32767` and `‖q‖₂ ≤ 46340 · 0.999` (less half an integer
//! per element for the rounding). By Cauchy–Schwarz, every partial sum of `q_x · q_w` is then
//! below `46340² < 2³¹` in magnitude, so the int32 lanes cannot overflow, whatever the
//! values. A row of `k` values keeps about `46340 / √k` integer steps per rms value (1.2e-4
//! relative rounding at `k` = 1536), some 5–10× finer than bf16's 8-bit mantissa. On
//! all-MiniLM-L6-v2 the embeddings stay within cosine 0.9999993 of sentence-transformers' f32
//! ones (docs/embeddings.md). Opt-in: [`int16_gemm_pays`]. Results are
//! `f32(Σ q_x q_w) / (s_x s_w)`, plus the bias.
//!
//! [`PackedInt16Matrix`] stores panels of [`NR`] rows: for each pair of input features `(2j,
//! 2j+1)`, the 16 rows' two values, `panel[j * 32 + 2r + e] = q[16p + r][2j + e]` (odd widths
//! padded with a zero feature, the last panel with zero rows), so one 512-bit load gives the
//! 16 rows' pair and one broadcast of a token's pair feeds them all. The driver has the shape of
//! the f32 one (tasks of 96 tokens × ≤ 8 panels, the k loop in slices that keep the weight
//! slice in L1); the AVX-512 tile (12 tokens × 16 rows, `int16_x86`) and the AVX2 tile (6 tokens
//! × 16 rows in two 256-bit halves, `int16_avx2`) write `y` directly, the scalar twin through a
//! stack tile.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::dispatch::{detected_isa, Isa};
use crate::fast::SyncPtr;
use crate::format::WeightFormat;
use crate::matrix::WeightMatrix;
use crate::pool::parallel_for;

use super::{Epilogue, MAX_MR, NR};

/// Feature pairs per slice of the k loop (a `KP × 16` pair slice of weights is 16 KiB).
const KP: usize = 256;

/// Largest magnitude of one quantized element (never −32768, so no `vpmaddwd` pair can reach
/// `2 · 32768²`).
pub(super) const QMAX: f32 = 32767.0;

/// Bound on a quantized row's Euclidean norm: `NORM_BOUND² < 2³¹`, so the dot product of two
/// such rows, and every partial sum of it, fits an i32.
const NORM_BOUND: f64 = 46340.0 * 0.999;

/// The widest row this GEMM takes: beyond it a row keeps fewer than 256 integer steps per rms
/// value (`NORM_BOUND / √k`) and the f32 GEMM is used instead.
pub const MAX_INT16_COLS: usize = 32 * 1024;

/// The variable that, set to `1`, puts the encoders' float weights on the int16 GEMM (where the
/// CPU has AVX2 or AVX-512 VNNI); unset or anything else keeps them on the exact f32 GEMM. Read
/// once; [`set_int16_gemm`] overrides it.
pub const INT16_VAR: &str = "OXINFER_INT16_GEMM";

/// The process-wide choice of [`set_int16_gemm`]: 0 = as [`INT16_VAR`] says, 1 = on, 2 = off.
static CHOICE: AtomicU8 = AtomicU8::new(0);

/// Switches the int16 GEMM on (`Some(true)`) or off (`Some(false)`) for weights prepared from
/// now on (an encoder prepares each weight at its first product), or back to [`INT16_VAR`]'s
/// choice (`None`). Process-wide.
pub fn set_int16_gemm(choice: Option<bool>) {
    CHOICE.store(
        match choice {
            None => 0,
            Some(true) => 1,
            Some(false) => 2,
        },
        Ordering::Relaxed,
    );
}

/// Whether the int16 GEMM should run for float weights of `format` with `cols` input features
/// here: asked for ([`set_int16_gemm`], else [`INT16_VAR`] `= 1`), an AVX2 CPU (with AVX-512
/// VNNI the 512-bit tile runs, else the 256-bit one), the packed float GEMM allowed
/// ([`float_packing_pays`](super::float_packing_pays)), and `cols ≤` [`MAX_INT16_COLS`]. It is
/// not the default: its results differ from the f32 product by the rounding of the module doc
/// (1e-4 relative), where the f32 GEMM matches transformers' float32 to the last bits that the
/// tiny-checkpoint tests check.
pub fn int16_gemm_pays(format: WeightFormat, cols: usize) -> bool {
    static FROM_ENV: OnceLock<bool> = OnceLock::new();
    let asked = match CHOICE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => *FROM_ENV.get_or_init(|| std::env::var(INT16_VAR).is_ok_and(|v| v.trim() == "1")),
    };
    asked
        && detected_isa().has_avx2()
        && cols <= MAX_INT16_COLS
        && super::float_packing_pays(format)
}

/// The scale of one row `v` (see the module doc): `q = round(v · s)` keeps `|q| ≤ 32767` and
/// `‖q‖₂ ≤ NORM_BOUND`. `None` when the row holds a non-finite value; `0` for an all-zero row.
/// On AVX-512 VNNI and AVX2 levels of `isa` the statistics come from their helpers (an f32 sum
/// of squares over 16 or 32 lanes: relative error about `k / 16 · 2⁻²⁴` at most, 1.2e-4 at the
/// widest rows, well inside the bound's 0.1 % margin), else from a scalar loop in f64.
fn row_scale(v: &[f32], isa: Isa) -> Option<f32> {
    let (absmax, sumsq) = row_stats(v, isa);
    // A NaN escapes `max` but not the sum of squares; an infinity reaches both.
    if !sumsq.is_finite() {
        // An f32 sum of squares may overflow on finite values: decide in f64.
        return match isa == Isa::Scalar {
            true => None,
            false => row_scale(v, Isa::Scalar),
        };
    }
    if absmax == 0.0 {
        return Some(0.0);
    }
    let by_norm = (NORM_BOUND - 0.5 * (v.len() as f64).sqrt()) / sumsq.sqrt();
    Some((f64::from(QMAX / absmax).min(by_norm)) as f32)
}

/// The largest `|v[j]|` and `Σ v[j]²` of a row, with the helpers of `isa` (module doc of
/// [`row_scale`]).
pub(super) fn row_stats(v: &[f32], isa: Isa) -> (f32, f64) {
    #[cfg(target_arch = "x86_64")]
    if isa.has_vnni() {
        // SAFETY: an Avx512Vnni level is only handed out when the CPU has AVX-512 F.
        let (m, s) = unsafe { super::int16_x86::absmax_sumsq(v) };
        return (m, f64::from(s));
    }
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: an AVX2 level is only handed out when the CPU has AVX2 and FMA.
        let (m, s) = unsafe { super::int16_avx2::absmax_sumsq(v) };
        return (m, f64::from(s));
    }
    let _ = isa;
    v.iter().fold((0f32, 0f64), |(m, s), &x| {
        (m.max(x.abs()), s + f64::from(x) * f64::from(x))
    })
}

/// `q[j] = round(v[j] · s)`, to nearest with ties to even, within ±32767 (the caller's `q` as
/// long as `v`), with the helpers of `isa` (all give the same values).
pub(super) fn quantize_into(v: &[f32], s: f32, q: &mut [i16], isa: Isa) {
    #[cfg(target_arch = "x86_64")]
    if isa.has_vnni() {
        // SAFETY: an Avx512Vnni level is only handed out when the CPU has AVX-512 F; q is as
        // long as v.
        unsafe { super::int16_x86::quantize(v, s, &mut q[..v.len()]) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: an AVX2 level is only handed out when the CPU has AVX2; q is as long as v.
        unsafe { super::int16_avx2::quantize(v, s, &mut q[..v.len()]) };
        return;
    }
    let _ = isa;
    for (d, &x) in q.iter_mut().zip(v) {
        *d = (x * s).round_ties_even().clamp(-QMAX, QMAX) as i16;
    }
}

/// A `[rows, cols]` f32 / f16 / bf16 weight matrix rounded to int16 per row and packed into
/// panels of [`NR`] rows of feature pairs (module doc). Owns `ceil(rows / 16) · 16 ·
/// ceil(cols / 2) · 2` values and one `1 / s` per row.
#[derive(Clone, Debug)]
pub struct PackedInt16Matrix {
    rows: usize,
    cols: usize,
    data: Vec<i16>,
    /// `1 / s` of each row (rows of the last panel's padding: 0).
    unscale: Vec<f32>,
}

impl PackedInt16Matrix {
    /// Rounds and packs `w` (parallel over panels on the pool); `None` when its format is not
    /// f32 / f16 / bf16 or a row holds a non-finite value.
    pub fn pack(w: &WeightMatrix) -> Option<Self> {
        if !super::PackedFloatMatrix::supports(w.format) {
            return None;
        }
        let (rows, cols) = (w.rows, w.cols);
        let (panels, pairs) = (rows.div_ceil(NR), cols.div_ceil(2));
        let mut data = vec![0i16; panels * NR * pairs * 2];
        let mut unscale = vec![0f32; panels * NR];
        let ok = AtomicBool::new(true);
        let isa = detected_isa();
        let (dp, up) = (SyncPtr(data.as_mut_ptr()), SyncPtr(unscale.as_mut_ptr()));
        parallel_for(panels, &|p| {
            let len = NR * pairs * 2;
            // SAFETY: panel p owns values [p*len, (p+1)*len) of `data` and [p*NR, (p+1)*NR) of
            // `unscale`, which outlive parallel_for; no two tasks share a panel.
            let (panel, inv) = unsafe {
                (
                    std::slice::from_raw_parts_mut(dp.get().add(p * len), len),
                    std::slice::from_raw_parts_mut(up.get().add(p * NR), NR),
                )
            };
            let mut row = vec![0f32; cols];
            let mut q = vec![0i16; pairs * 2];
            for r in 0..NR.min(rows - p * NR) {
                w.dequantize_row_into(p * NR + r, &mut row);
                let Some(s) = row_scale(&row, isa) else {
                    ok.store(false, Ordering::Relaxed);
                    return;
                };
                quantize_into(&row, s, &mut q, isa);
                inv[r] = if s == 0.0 { 0.0 } else { 1.0 / s };
                for (j, pair) in q.chunks_exact(2).enumerate() {
                    panel[j * 2 * NR + 2 * r..][..2].copy_from_slice(pair);
                }
            }
        });
        ok.into_inner().then_some(PackedInt16Matrix {
            rows,
            cols,
            data,
            unscale,
        })
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
        self.data.len() * 2 + self.unscale.len() * 4
    }

    fn pairs(&self) -> usize {
        self.cols.div_ceil(2)
    }

    fn panel(&self, p: usize) -> &[i16] {
        let len = NR * self.pairs() * 2;
        &self.data[p * len..(p + 1) * len]
    }
}

/// Activations rounded per token: `[t, 2 · pairs]` int16 (odd widths padded with a zero) and
/// each token's `1 / s` (NaN for a token holding a non-finite value, so that it comes out NaN).
pub(super) struct Int16Rows {
    data: Vec<i16>,
    unscale: Vec<f32>,
}

impl Int16Rows {
    /// Rounds the `t` rows of `cols` values of `x` (with the helpers of `isa`).
    pub(super) fn quantize(x: &[f32], t: usize, cols: usize, isa: Isa) -> Self {
        let width = cols.div_ceil(2) * 2;
        let mut data = vec![0i16; t * width];
        if cols == 0 {
            return Int16Rows {
                data,
                unscale: vec![0.0; t],
            };
        }
        let unscale = x
            .chunks_exact(cols)
            .zip(data.chunks_exact_mut(width))
            .map(|(v, q)| match row_scale(v, isa) {
                Some(s) if s > 0.0 => {
                    quantize_into(v, s, q, isa);
                    1.0 / s
                }
                Some(_) => 0.0,
                None => f32::NAN,
            })
            .collect();
        Int16Rows { data, unscale }
    }
}

/// Where a tile's sums go: token `i`'s `live` values (rows `0 .. live` of the panel) at `ptr
/// + i * ldo`, as `sum · xs[i] · ws[r]` stored (`first`: the first k slice, plus `bias` when
/// not null) or added to what is there. `xs` holds the tile's tokens' `1 / s`, `ws` the
/// panel's 16 rows' `1 / s`.
pub(super) struct Dest16 {
    pub ptr: *mut f32,
    pub ldo: usize,
    pub live: usize,
    pub first: bool,
    pub bias: *const f32,
    pub xs: *const f32,
    pub ws: *const f32,
}

/// `y[t][rows] = x[t][cols] · Wᵀ (+ bias)`, then `post` on finished runs of outputs inside the
/// same pool tasks, as [`matmul_float_packed_post`](super::matmul_float_packed_post) does for
/// the f32 GEMM, with the int16 weights `w`, on the pool.
///
/// # Panics
/// If `x.len() != t * cols`, `y.len() != t * rows` or a bias's length is not `rows`.
pub fn matmul_int16_packed_post(
    w: &PackedInt16Matrix,
    x: &[f32],
    t: usize,
    bias: Option<&[f32]>,
    y: &mut [f32],
    post: Option<Epilogue<'_>>,
) {
    let _p = crate::profile::scope(
        || "matmul packed-i16".to_string(),
        w.size_bytes() as u64,
        2 * (w.rows * w.cols * t) as u64,
    );
    matmul_int16_packed_isa(w, x, t, bias, y, post, detected_isa());
}

/// [`matmul_int16_packed_post`] on a given instruction set: the AVX-512 VNNI tile, the AVX2
/// tile, or the scalar twin for any other value (the activations rounded with the same level's
/// helpers).
///
/// # Panics
/// As [`matmul_int16_packed_post`].
pub fn matmul_int16_packed_isa(
    w: &PackedInt16Matrix,
    x: &[f32],
    t: usize,
    bias: Option<&[f32]>,
    y: &mut [f32],
    post: Option<Epilogue<'_>>,
    isa: Isa,
) {
    let (rows, cols) = (w.rows, w.cols);
    crate::matrix::check_io(x.len(), y.len(), t, rows, cols);
    if let Some(b) = bias {
        assert_eq!(b.len(), rows, "bias length must be the rows of the matrix");
    }
    if rows == 0 || t == 0 {
        return;
    }
    let xq = Int16Rows::quantize(x, t, cols, isa);
    run_rounded(w, &xq, bias, y, post, isa);
}

/// Tokens of one register tile on `isa`.
fn tile_tokens(isa: Isa) -> usize {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => MAX_MR,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => super::int16_avx2::MR,
        _ => 4,
    }
}

/// The driver of [`matmul_int16_packed_isa`] on activations already rounded (`xq`, as many
/// tokens as `y` has rows of `w.rows`), with the tile of `isa`.
pub(super) fn run_rounded(
    w: &PackedInt16Matrix,
    xq: &Int16Rows,
    bias: Option<&[f32]>,
    y: &mut [f32],
    post: Option<Epilogue<'_>>,
    isa: Isa,
) {
    let (rows, cols, t) = (w.rows, w.cols, xq.unscale.len());
    let (pairs, width) = (w.pairs(), cols.div_ceil(2) * 2);
    assert!(xq.data.len() == t * width && y.len() == t * rows);
    if rows == 0 || t == 0 {
        return;
    }
    let mr = tile_tokens(isa);
    let panels = rows.div_ceil(NR);
    super::for_each_task(t, rows, panels, y, post, &|(t0, t1), (p0, p1), out| {
        // With no input features the k loop runs once, on an empty slice, to store the bias.
        for j0 in (0..pairs.max(1)).step_by(KP) {
            let kp = KP.min(pairs - j0.min(pairs));
            for p in p0..p1 {
                let b = &w.panel(p)[j0 * 2 * NR..(j0 + kp) * 2 * NR];
                let live = NR.min(rows - p * NR);
                for i0 in (t0..t1).step_by(mr) {
                    let n = mr.min(t1 - i0);
                    let a = &xq.data[i0 * width + 2 * j0..(i0 + n - 1) * width + 2 * (j0 + kp)];
                    let dest = Dest16 {
                        // SAFETY: token i0 + n - 1 < t and rows p*16 .. p*16 + live <= rows:
                        // the offset lies inside y ([t, rows]).
                        ptr: unsafe { out.get().add(i0 * rows + p * NR) },
                        ldo: rows,
                        live,
                        first: j0 == 0,
                        bias: bias.map_or(std::ptr::null(), |bs| bs[p * NR..].as_ptr()),
                        xs: xq.unscale[i0..i0 + n].as_ptr(),
                        ws: w.unscale[p * NR..(p + 1) * NR].as_ptr(),
                    };
                    #[cfg(target_arch = "x86_64")]
                    if isa.has_vnni() {
                        // SAFETY: an Avx512Vnni level is only handed out when the CPU has
                        // AVX-512 F and VNNI; `a` holds n <= 12 rows of 2·kp values `width`
                        // apart and `b` kp × 32 (the slicing above); the destination rows
                        // (`live` values of tokens i0 .. i0 + n, `rows` apart) lie in y and
                        // belong to this task's (token block, panel chunk) alone; the bias
                        // holds `live` values from p*16, xs n and ws 16.
                        unsafe {
                            super::int16_x86::tile(a.as_ptr(), width, b.as_ptr(), kp, n, &dest)
                        };
                        continue;
                    }
                    #[cfg(target_arch = "x86_64")]
                    if isa.has_avx2() {
                        // SAFETY: an AVX2 level is only handed out when the CPU has AVX2; n <= 6
                        // (tile_tokens) and the slices and destination as for the VNNI tile.
                        unsafe {
                            super::int16_avx2::tile(a.as_ptr(), width, b.as_ptr(), kp, n, &dest)
                        };
                        continue;
                    }
                    let sums = tile_scalar(a, width, b, kp, n);
                    // SAFETY: as for the AVX-512 tile: the destination rows lie in y and belong
                    // to this task alone; xs holds n values, ws 16, the bias `live`.
                    unsafe { store_scaled(&sums[..n], &dest) };
                }
            }
        }
    });
}

/// The scalar twin of the SIMD tiles: `sums[i][r] = Σ_{j < kp} Σ_e a[i·lda + 2j + e] · b[32j +
/// 2r + e]` for the `n ≤ 12` tokens of `a`, in i32 (exact: the scales keep every partial sum in
/// range).
pub(super) fn tile_scalar(
    a: &[i16],
    lda: usize,
    b: &[i16],
    kp: usize,
    n: usize,
) -> [[i32; NR]; MAX_MR] {
    let mut sums = [[0i32; NR]; MAX_MR];
    for (i, acc) in sums.iter_mut().enumerate().take(n) {
        let row = &a[i * lda..i * lda + 2 * kp];
        for (xp, wp) in row.chunks_exact(2).zip(b.chunks_exact(2 * NR)) {
            for (r, s) in acc.iter_mut().enumerate() {
                *s += i32::from(xp[0]) * i32::from(wp[2 * r])
                    + i32::from(xp[1]) * i32::from(wp[2 * r + 1]);
            }
        }
    }
    sums
}

/// Stores (first slice, with the bias) or adds `sums[i][r] · (xs[i] · ws[r])` into `dest` (the
/// AVX2 tile does the same operations in the same order: the same bits).
///
/// # Safety
/// `dest` is valid as [`Dest16`] says for `sums.len()` tokens.
pub(super) unsafe fn store_scaled(sums: &[[i32; NR]], dest: &Dest16) {
    for (i, acc) in sums.iter().enumerate() {
        // SAFETY: the contract: xs holds a value per token, ws 16, the row `live` floats, the
        // bias (when not null) `live`.
        unsafe {
            let xs = *dest.xs.add(i);
            let row = std::slice::from_raw_parts_mut(dest.ptr.add(i * dest.ldo), dest.live);
            for (r, d) in row.iter_mut().enumerate() {
                let v = acc[r] as f32 * (xs * *dest.ws.add(r));
                *d = if !dest.first {
                    *d + v
                } else if dest.bias.is_null() {
                    v
                } else {
                    v + *dest.bias.add(r)
                };
            }
        }
    }
}
