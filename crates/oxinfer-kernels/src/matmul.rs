//! Matrix multiplication with packed weights: `y = x · Wᵀ`.
//!
//! Weights are dequantized one row at a time into a per-thread f32 scratch row, and each row is
//! dotted with all `t` input vectors before moving on, so every weight is decoded once per call.
//! That is the scalar reference ([`matmul_reference`], `OXINFER_KERNELS=scalar`): it splits
//! output rows over scoped threads of its own. The default kernel set runs [`crate::fast`]
//! (int8 activations, SIMD dot products) on the persistent pool ([`crate::pool`]).

pub use crate::matrix::WeightMatrix;
use crate::pool::num_threads;

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
    crate::matrix::check_io(x.len(), y.len(), t, rows, cols);
    if rows == 0 || t == 0 {
        return;
    }
    let _p = crate::profile::scope(
        || format!("matmul {}", w.format),
        (w.data.len() + w.scales.len()) as u64,
        2 * (rows * cols * t) as u64,
    );
    if crate::dispatch::kernel_set() == crate::dispatch::KernelSet::Auto {
        crate::fast::matmul_fast(w, x, t, y, crate::dispatch::detected_isa());
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
    crate::matrix::check_io(x.len(), y.len(), t, rows, cols);
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
