//! Matrix multiplication with packed weights: `y = x · Wᵀ`.
//!
//! Weights are dequantized one row at a time into a per-thread f32 scratch row, and each row is
//! dotted with all `t` input vectors before moving on, so every weight is decoded once per call.
//! Work is split over output rows across scoped threads (a persistent pool comes later).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::dequant::dequantize_row_split;
use crate::error::KernelError;
use crate::format::WeightFormat;

/// A row-major weight matrix `[rows = n_out, cols = n_in]` stored in `format`, rows contiguous
/// (`format.row_bytes(cols)` bytes each, `rows * row_bytes(cols)` bytes in all). Borrowed, never
/// copied: `data` may point straight into a memory-mapped model file.
///
/// Split formats (`Q8`, `Q4`) also carry `scales`: `rows * format.row_scale_bytes(cols)` bytes,
/// each row's block scales back to back; for every other format `scales` is empty.
#[derive(Clone, Copy, Debug)]
pub struct WeightMatrix<'a> {
    /// Storage format of the weights.
    pub format: WeightFormat,
    /// The packed weights, rows back to back.
    pub data: &'a [u8],
    /// The per-block scales of a split format, rows back to back (empty otherwise).
    pub scales: &'a [u8],
    /// Number of rows (output features).
    pub rows: usize,
    /// Number of columns (input features, weights per row).
    pub cols: usize,
}

impl<'a> WeightMatrix<'a> {
    /// Wraps `data` as a `[rows, cols]` matrix in `format`.
    ///
    /// # Errors
    /// [`KernelError::NotBlockMultiple`] when `cols` is not a multiple of the block size,
    /// [`KernelError::Overflow`] when the size overflows, [`KernelError::MatrixBytes`] when
    /// `data.len() != rows * format.row_bytes(cols)`, [`KernelError::Scales`] for a split format
    /// (use [`WeightMatrix::new_split`]).
    pub fn new(
        format: WeightFormat,
        data: &'a [u8],
        rows: usize,
        cols: usize,
    ) -> Result<Self, KernelError> {
        Self::new_split(format, data, &[], rows, cols)
    }

    /// Wraps `data` (and, for a split format, its `scales`) as a `[rows, cols]` matrix.
    ///
    /// # Errors
    /// As [`WeightMatrix::new`], and [`KernelError::Scales`] when `scales` is not
    /// `rows * format.row_scale_bytes(cols)` bytes (empty for non-split formats).
    pub fn new_split(
        format: WeightFormat,
        data: &'a [u8],
        scales: &'a [u8],
        rows: usize,
        cols: usize,
    ) -> Result<Self, KernelError> {
        let row_bytes = format.row_bytes(cols).ok_or_else(|| {
            if !cols.is_multiple_of(format.block_size()) {
                KernelError::NotBlockMultiple {
                    format,
                    n: cols,
                    block_size: format.block_size(),
                }
            } else {
                KernelError::Overflow {
                    format,
                    what: format!("a row of {cols} weights"),
                }
            }
        })?;
        let expected = row_bytes
            .checked_mul(rows)
            .ok_or_else(|| KernelError::Overflow {
                format,
                what: format!("a [{rows} x {cols}] matrix"),
            })?;
        if data.len() != expected {
            return Err(KernelError::MatrixBytes {
                format,
                rows,
                cols,
                expected,
                actual: data.len(),
            });
        }
        let want_scales = format
            .row_scale_bytes(cols)
            .and_then(|s| s.checked_mul(rows))
            .unwrap_or(usize::MAX);
        if scales.len() != want_scales {
            return Err(KernelError::Scales {
                format,
                what: format!(
                    "a [{rows} x {cols}] matrix takes {want_scales} scale bytes, but {} were given",
                    scales.len()
                ),
            });
        }
        Ok(Self {
            format,
            data,
            scales,
            rows,
            cols,
        })
    }

    /// Bytes of one row's scales (`format.row_scale_bytes(cols)`; 0 for non-split formats).
    pub fn row_scale_bytes(&self) -> usize {
        self.format.row_scale_bytes(self.cols).unwrap_or(0)
    }

    /// The scales of row `r` (empty for non-split formats).
    ///
    /// # Panics
    /// If `r >= rows`.
    pub fn row_scales(&self, r: usize) -> &'a [u8] {
        assert!(r < self.rows, "row {r} out of range");
        let sb = self.row_scale_bytes();
        &self.scales[r * sb..(r + 1) * sb]
    }

    /// Bytes of one row (`format.row_bytes(cols)`).
    pub fn row_bytes(&self) -> usize {
        // new() checked that this exists; a hand-built struct with a bad `cols` gets 0 rows' worth.
        self.format.row_bytes(self.cols).unwrap_or(0)
    }

    /// The packed bytes of row `r`.
    ///
    /// # Panics
    /// If `r >= rows`.
    pub fn row(&self, r: usize) -> &'a [u8] {
        assert!(
            r < self.rows,
            "row {r} out of range for a matrix of {} rows",
            self.rows
        );
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }

    /// Dequantizes row `r` into `dst` (`cols` f32 values).
    ///
    /// # Panics
    /// If `r >= rows` or `dst.len() != cols`, or if the struct was built by hand with
    /// inconsistent sizes (use [`WeightMatrix::new`]).
    pub fn dequantize_row_into(&self, r: usize, dst: &mut [f32]) {
        assert_eq!(dst.len(), self.cols, "destination length must equal cols");
        if let Err(e) = dequantize_row_split(self.format, self.row(r), self.row_scales(r), dst) {
            panic!("inconsistent WeightMatrix: {e}");
        }
    }
}

/// Thread count set by [`set_num_threads`]; 0 = default.
static NUM_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Sets how many threads [`matmul`] uses at most; `0` restores the default
/// (`std::thread::available_parallelism`). Process-wide.
pub fn set_num_threads(n: usize) {
    NUM_THREADS.store(n, Ordering::Relaxed);
}

/// How many threads [`matmul`] uses at most: the value of [`set_num_threads`], else
/// `std::thread::available_parallelism()` (1 if unknown).
pub fn num_threads() -> usize {
    match NUM_THREADS.load(Ordering::Relaxed) {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// Below this many multiply-adds (`rows * cols * t`) [`matmul`] stays on the calling thread.
pub const SINGLE_THREAD_WORK: usize = 1 << 16;

/// `y = x · Wᵀ`: for each of `t` input vectors (`x` is `[t, cols]` row-major f32) computes the
/// `rows` outputs (`y` is `[t, rows]` row-major f32, overwritten).
///
/// Each weight row is dequantized once and dotted with all `t` inputs; output rows are split
/// over up to [`num_threads`] threads (one thread when `rows * cols * t` < [`SINGLE_THREAD_WORK`]).
///
/// # Panics
/// If `x.len() != t * cols` or `y.len() != t * rows`.
pub fn matmul(w: &WeightMatrix, x: &[f32], t: usize, y: &mut [f32]) {
    let (rows, cols) = (w.rows, w.cols);
    assert_eq!(x.len(), t * cols, "x must be [t = {t}, cols = {cols}]");
    assert_eq!(y.len(), t * rows, "y must be [t = {t}, rows = {rows}]");
    if rows == 0 || t == 0 {
        return;
    }
    let _p = crate::profile::scope(
        || format!("matmul {}", w.format),
        (w.data.len() + w.scales.len()) as u64,
        2 * (rows * cols * t) as u64,
    );
    if crate::dispatch::kernel_set() == crate::dispatch::KernelSet::Auto {
        crate::fast::matmul_fast(w, x, t, y, crate::vecdot::detected_isa());
        return;
    }
    matmul_reference(w, x, t, y);
}

/// The scalar reference matmul (what `OXINFER_KERNELS=scalar` runs): f32 activations, each
/// weight row dequantized once and dotted with all `t` inputs, rows split over scoped threads.
///
/// # Panics
/// If `x.len() != t * cols` or `y.len() != t * rows`.
pub fn matmul_reference(w: &WeightMatrix, x: &[f32], t: usize, y: &mut [f32]) {
    let (rows, cols) = (w.rows, w.cols);
    assert_eq!(x.len(), t * cols, "x must be [t = {t}, cols = {cols}]");
    assert_eq!(y.len(), t * rows, "y must be [t = {t}, rows = {rows}]");
    if rows == 0 || t == 0 {
        return;
    }
    let work = rows.saturating_mul(cols).saturating_mul(t);
    let threads = if work < SINGLE_THREAD_WORK {
        1
    } else {
        num_threads().clamp(1, rows)
    };
    if threads == 1 {
        rows_into(w, x, t, 0..rows, y, rows);
        return;
    }
    let chunk = rows.div_ceil(threads);
    if t == 1 {
        // y is one contiguous row of outputs: hand each thread its slice directly.
        std::thread::scope(|s| {
            for (i, out) in y.chunks_mut(chunk).enumerate() {
                let r0 = i * chunk;
                let r1 = r0 + out.len();
                s.spawn(move || rows_into(w, x, 1, r0..r1, out, r1 - r0));
            }
        });
        return;
    }
    // t > 1: outputs of a row range are strided in y; each thread fills a local [t, chunk]
    // block, then the blocks are copied into place.
    let parts: Vec<(usize, Vec<f32>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..rows)
            .step_by(chunk)
            .map(|r0| {
                let r1 = (r0 + chunk).min(rows);
                s.spawn(move || {
                    let mut out = vec![0.0f32; t * (r1 - r0)];
                    rows_into(w, x, t, r0..r1, &mut out, r1 - r0);
                    (r0, out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    for (r0, out) in parts {
        let n = out.len() / t;
        for (ti, src) in out.chunks_exact(n).enumerate() {
            y[ti * rows + r0..ti * rows + r0 + n].copy_from_slice(src);
        }
    }
}

/// Computes output rows `rs` for all `t` inputs into `out`, where output `(ti, r)` goes to
/// `out[ti * stride + (r - rs.start)]`.
fn rows_into(
    w: &WeightMatrix,
    x: &[f32],
    t: usize,
    rs: std::ops::Range<usize>,
    out: &mut [f32],
    stride: usize,
) {
    let cols = w.cols;
    let mut scratch = vec![0.0f32; cols];
    for (i, r) in rs.enumerate() {
        w.dequantize_row_into(r, &mut scratch);
        for ti in 0..t {
            out[ti * stride + i] = dot(&scratch, &x[ti * cols..(ti + 1) * cols]);
        }
    }
}

/// Dot product of two equal-length f32 slices, with 8 independent accumulators so the compiler
/// can keep them in one SIMD register (the summation order differs from a sequential loop).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0.0f32; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (xa, xb) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += xa[k] * xb[k];
        }
    }
    let mut tail = 0.0f32;
    for (p, q) in ta.iter().zip(tb) {
        tail += p * q;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}
