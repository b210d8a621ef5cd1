//! The fast matmul: activations quantized to int8 once per call, integer dot products with
//! the packed weights (SIMD where the CPU has it), output rows spread over the thread pool.

use crate::dispatch::Isa;
use crate::format::WeightFormat;
use crate::matrix::WeightMatrix;
use crate::pool::{parallel_for, pool_threads};
use crate::q8::{quantize_q8, quantize_q8k, BlockQ8, BlockQ8K};
use crate::vecdot::{self, act_kind, ActKind, KBlock};

/// Raw pointer into a buffer whose disjoint parts are written by different tasks.
pub(crate) struct SyncPtr<T>(pub(crate) *mut T);
impl<T> Clone for SyncPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SyncPtr<T> {}
// SAFETY: every user writes only the elements its task owns, while the buffer is alive.
unsafe impl<T> Send for SyncPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SyncPtr<T> {}
impl<T> SyncPtr<T> {
    /// The pointer (a method, so closures capture the whole `Sync` wrapper).
    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}

/// Activations of all `t` tokens in the format the weight's kernels take.
pub(crate) enum Acts<'a> {
    F32(&'a [f32]),
    Q8(Vec<BlockQ8>),
    Q8K(Vec<BlockQ8K>),
}

pub(crate) fn quantize_acts(format: WeightFormat, x: &[f32], t: usize, cols: usize) -> Acts<'_> {
    match act_kind(format) {
        ActKind::F32 => Acts::F32(x),
        ActKind::Q8 => {
            let mut q = vec![BlockQ8::default(); t * cols / 32];
            let per = cols / 32;
            let qp = SyncPtr(q.as_mut_ptr());
            parallel_for(t, &|ti| {
                // SAFETY: token ti owns blocks [ti*per, (ti+1)*per) of `q`, alive for the call.
                let dst = unsafe { std::slice::from_raw_parts_mut(qp.get().add(ti * per), per) };
                quantize_q8(&x[ti * cols..(ti + 1) * cols], dst);
            });
            Acts::Q8(q)
        }
        ActKind::Q8K => {
            let mut q = vec![BlockQ8K::default(); t * cols / 256];
            let per = cols / 256;
            let qp = SyncPtr(q.as_mut_ptr());
            parallel_for(t, &|ti| {
                // SAFETY: token ti owns blocks [ti*per, (ti+1)*per) of `q`, alive for the call.
                let dst = unsafe { std::slice::from_raw_parts_mut(qp.get().add(ti * per), per) };
                quantize_q8k(&x[ti * cols..(ti + 1) * cols], dst);
            });
            Acts::Q8K(q)
        }
    }
}

/// `y[t][rows] = x[t][cols] · Wᵀ` with int8 activations (f32 for float weights), on `isa`.
///
/// # Panics
/// If `x.len() != t * cols` or `y.len() != t * rows`, or (for a hand-built matrix) a row of
/// `w` is not `cols` weights of its format.
pub fn matmul_fast(w: &WeightMatrix, x: &[f32], t: usize, y: &mut [f32], isa: Isa) {
    let (rows, cols) = (w.rows, w.cols);
    crate::matrix::check_io(x.len(), y.len(), t, rows, cols);
    if rows == 0 || t == 0 {
        return;
    }
    let acts = quantize_acts(w.format, x, t, cols);
    let rb = w.row_bytes();
    let sb = w.row_scale_bytes();
    // Enough tasks to balance the threads, few enough to keep per-task overhead small.
    let target = pool_threads() * 4;
    let chunk = rows.div_ceil(target).clamp(8, 256).min(rows.max(1));
    let n_tasks = rows.div_ceil(chunk);
    let out = SyncPtr(y.as_mut_ptr());
    let format = w.format;
    let quarters = t == 1 && !format.is_split() && vecdot::groups_rows4(isa);
    parallel_for(n_tasks, &|task| {
        let r0 = task * chunk;
        let r1 = (r0 + chunk).min(rows);
        if quarters {
            if let Acts::Q8(q) = &acts {
                // SAFETY: rows r0..r1 of the single output row belong to this task only; `y`
                // (t * rows = rows elements) outlives parallel_for.
                let y = unsafe { std::slice::from_raw_parts_mut(out.get().add(r0), r1 - r0) };
                gemv_quarters(w, q, r0..r1, y, isa);
                return;
            }
        }
        let mut kb: Vec<KBlock> = (0..ROW_GROUP).map(|_| KBlock::default()).collect();
        // acc[g * t + ti]: row g of the current group, token ti.
        let mut acc = vec![0f32; ROW_GROUP * t];
        let mut g0 = r0;
        while g0 < r1 {
            let g1 = (g0 + ROW_GROUP).min(r1);
            let row = |r: usize| &w.data[r * rb..(r + 1) * rb];
            let sc = |r: usize| &w.scales[r * sb..(r + 1) * sb];
            // Tokens outer, the group's rows inner: each token's activations are read once per
            // group (from L1 after the first row) and the group's weight rows stay in L1 across
            // all tokens.
            match &acts {
                Acts::F32(x) => {
                    for ti in 0..t {
                        let xt = &x[ti * cols..(ti + 1) * cols];
                        for r in g0..g1 {
                            acc[(r - g0) * t + ti] = vecdot::dot_float(format, row(r), xt, isa);
                        }
                    }
                }
                Acts::Q8(q) => {
                    let per = cols / 32;
                    let tok = |ti: usize| &q[ti * per..(ti + 1) * per];
                    let split = format.is_split();
                    // Two rows at a time where a two-row kernel pays (int8 matrix multiply).
                    let pair = !split && vecdot::pairs_rows(isa);
                    let mut ti = 0;
                    while ti + 4 <= t {
                        let xs = [tok(ti), tok(ti + 1), tok(ti + 2), tok(ti + 3)];
                        let mut r_single = g0;
                        while pair && r_single + 2 <= g1 {
                            let r = r_single;
                            let o = vecdot::dot_q8_2x4(format, [row(r), row(r + 1)], xs, isa);
                            for (j, oj) in o.iter().enumerate() {
                                let g = (r + j - g0) * t;
                                acc[g + ti..g + ti + 4].copy_from_slice(oj);
                            }
                            r_single += 2;
                        }
                        for r in r_single..g1 {
                            let r4 = if split {
                                vecdot::dot_split_x4(format, row(r), sc(r), xs, isa)
                            } else {
                                vecdot::dot_q8_x4(format, row(r), xs, isa)
                            };
                            let g = (r - g0) * t;
                            acc[g + ti..g + ti + 4].copy_from_slice(&r4);
                        }
                        ti += 4;
                    }
                    for k in ti..t {
                        for r in g0..g1 {
                            acc[(r - g0) * t + k] = if split {
                                vecdot::dot_split(format, row(r), sc(r), tok(k), isa)
                            } else {
                                vecdot::dot_q8(format, row(r), tok(k), isa)
                            };
                        }
                    }
                }
                Acts::Q8K(q) => {
                    let per = cols / 256;
                    if format == WeightFormat::Q8K {
                        for ti in 0..t {
                            for r in g0..g1 {
                                acc[(r - g0) * t + ti] =
                                    vecdot::dot_q8k_row(row(r), &q[ti * per..(ti + 1) * per]);
                            }
                        }
                    } else {
                        acc.fill(0.0);
                        let bb = format.block_bytes();
                        for bi in 0..per {
                            for r in g0..g1 {
                                let b = &row(r)[bi * bb..(bi + 1) * bb];
                                vecdot::unpack_k_isa(format, b, &mut kb[r - g0], isa);
                            }
                            for ti in 0..t {
                                let y = &q[ti * per + bi];
                                for r in g0..g1 {
                                    acc[(r - g0) * t + ti] +=
                                        vecdot::dot_kblock(&kb[r - g0], y, isa);
                                }
                            }
                        }
                    }
                }
            }
            for r in g0..g1 {
                for ti in 0..t {
                    // SAFETY: index ti*rows + r < t*rows = y.len(); rows r0..r1 belong to this
                    // task only, so no two tasks write the same element; `y` outlives
                    // parallel_for.
                    unsafe { *out.get().add(ti * rows + r) = acc[(r - g0) * t + ti] };
                }
            }
            g0 = g1;
        }
    });
}

/// One token's outputs `y` for the rows `rs` of a 32-weight format `w` with the four-row
/// kernel ([`vecdot::dot_q8_rows4`]), taking the range's four quarters side by side: row `i`
/// of each quarter in one call. Four rows next to each other would interleave four reads in
/// one 4 KiB page, which the hardware prefetchers (one stream per page) follow badly; the
/// quarters are four sequential streams in different pages. Each output is its row's own dot
/// product, so the order of the rows changes no bits.
fn gemv_quarters(
    w: &WeightMatrix,
    x: &[BlockQ8],
    rs: std::ops::Range<usize>,
    y: &mut [f32],
    isa: Isa,
) {
    let rb = w.row_bytes();
    let row = |r: usize| &w.data[r * rb..(r + 1) * rb];
    let n = rs.len();
    let q = n / 4;
    for i in 0..q {
        let r = [i, q + i, 2 * q + i, 3 * q + i];
        let o = vecdot::dot_q8_rows4(w.format, r.map(|j| row(rs.start + j)), x, isa);
        for (j, v) in r.into_iter().zip(o) {
            y[j] = v;
        }
    }
    for (j, out) in y.iter_mut().enumerate().take(n).skip(4 * q) {
        *out = vecdot::dot_q8(w.format, row(rs.start + j), x, isa);
    }
}

/// Weight rows processed together by one task step (their activations are shared).
const ROW_GROUP: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::available_isas;
    use crate::test_util::panic_message;

    /// The one-token path through the four-row kernel (rows taken from the quarters of each
    /// task, odd row counts left over) gives each row the bits of the scalar row kernels.
    #[test]
    fn four_row_decode_path_matches_the_scalar_rows() {
        for format in [WeightFormat::Q4_0, WeightFormat::Q4_1, WeightFormat::Q8_0] {
            for (rows, blocks) in [(1, 1), (7, 2), (45, 3), (301, 5), (1030, 2)] {
                let cols = 32 * blocks;
                let data = crate::vecdot::tests::random_matrix_rows(format, rows, cols, 3);
                let w = WeightMatrix::new(format, &data, rows, cols).unwrap();
                let x: Vec<f32> = (0..cols)
                    .map(|i| ((i * 13) % 29) as f32 / 7.0 - 2.0)
                    .collect();
                let mut want = vec![0f32; rows];
                matmul_fast(&w, &x, 1, &mut want, crate::dispatch::Isa::Scalar);
                for isa in available_isas() {
                    let mut y = vec![0f32; rows];
                    matmul_fast(&w, &x, 1, &mut y, isa);
                    for (r, (a, b)) in y.iter().zip(&want).enumerate() {
                        if crate::vecdot::groups_rows4(isa) {
                            assert_eq!(
                                a.to_bits(),
                                b.to_bits(),
                                "{format} {rows} rows {isa:?}: row {r}"
                            );
                        } else {
                            assert!(
                                (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                                "{format} {isa:?} row {r}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// `matmul_fast` is a safe public entry point that writes `y` through a raw pointer: an
    /// output or input of the wrong length must panic before any write (it wrote past `y`).
    #[test]
    #[cfg_attr(
        panic = "abort",
        ignore = "catches a panic; panics abort on this target (wasm)"
    )]
    fn wrong_buffer_lengths_panic_before_writing() {
        let data = vec![0u8; 4 * 34];
        let w = WeightMatrix::new(WeightFormat::Q8_0, &data, 4, 32).unwrap();
        let x = vec![0.25f32; 3 * 32];
        for isa in available_isas() {
            let mut short = vec![0f32; 3 * 4 - 1];
            let m = panic_message(|| matmul_fast(&w, &x, 3, &mut short, isa));
            assert!(m.contains("y must be [t = 3, rows = 4]"), "{isa:?}: {m}");
            let mut y = vec![0f32; 3 * 4];
            let m = panic_message(|| matmul_fast(&w, &x[..64], 3, &mut y, isa));
            assert!(m.contains("x must be [t = 3, cols = 32]"), "{isa:?}: {m}");
            // A hand-built matrix whose output size overflows: the check's product is checked.
            let huge = WeightMatrix {
                format: WeightFormat::F32,
                data: &[],
                scales: &[],
                rows: usize::MAX / 2 + 1,
                cols: 1,
            };
            let m = panic_message(|| matmul_fast(&huge, &x[..2], 2, &mut y, isa));
            assert!(m.contains("y must be [t = 2"), "{isa:?}: {m}");
            matmul_fast(&w, &x, 3, &mut y, isa);
            assert!(
                y.iter().all(|&v| v == 0.0),
                "{isa:?}: zero weights give zeros"
            );
        }
    }
}
