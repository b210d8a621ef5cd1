//! The fast matmul: activations quantized to int8 once per call, integer dot products with
//! the packed weights (SIMD where the CPU has it), output rows spread over the thread pool.

use crate::format::WeightFormat;
use crate::matmul::WeightMatrix;
use crate::pool::{parallel_for, pool_threads};
use crate::q8::{quantize_q8, quantize_q8k, BlockQ8, BlockQ8K};
use crate::vecdot::{self, act_kind, ActKind, Isa, KBlock};

/// Raw pointer into a buffer whose disjoint parts are written by different tasks.
struct SyncPtr<T>(*mut T);
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
    fn get(self) -> *mut T {
        self.0
    }
}

/// Activations of all `t` tokens in the format the weight's kernels take.
enum Acts<'a> {
    F32(&'a [f32]),
    Q8(Vec<BlockQ8>),
    Q8K(Vec<BlockQ8K>),
}

fn quantize_acts(format: WeightFormat, x: &[f32], t: usize, cols: usize) -> Acts<'_> {
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

/// `y[t][rows] = x[t][cols] · Wᵀ` with int8 activations (f32 for float weights).
pub fn matmul_fast(w: &WeightMatrix, x: &[f32], t: usize, y: &mut [f32], isa: Isa) {
    let (rows, cols) = (w.rows, w.cols);
    let acts = quantize_acts(w.format, x, t, cols);
    let rb = w.row_bytes();
    let sb = w.row_scale_bytes();
    // Enough tasks to balance the threads, few enough to keep per-task overhead small.
    let target = pool_threads() * 4;
    let chunk = rows.div_ceil(target).clamp(8, 256).min(rows.max(1));
    let n_tasks = rows.div_ceil(chunk);
    let out = SyncPtr(y.as_mut_ptr());
    let format = w.format;
    parallel_for(n_tasks, &|task| {
        let r0 = task * chunk;
        let r1 = (r0 + chunk).min(rows);
        let mut kb = KBlock::default();
        let mut acc = vec![0f32; t];
        for r in r0..r1 {
            let row = &w.data[r * rb..(r + 1) * rb];
            let sc = &w.scales[r * sb..(r + 1) * sb];
            match &acts {
                Acts::F32(x) => {
                    for (ti, a) in acc.iter_mut().enumerate() {
                        *a = vecdot::dot_float(format, row, &x[ti * cols..(ti + 1) * cols], isa);
                    }
                }
                Acts::Q8(q) => {
                    let per = cols / 32;
                    let tok = |ti: usize| &q[ti * per..(ti + 1) * per];
                    let mut ti = 0;
                    if format.is_split() {
                        while ti + 4 <= t {
                            let xs = [tok(ti), tok(ti + 1), tok(ti + 2), tok(ti + 3)];
                            let r4 = vecdot::dot_split_x4(format, row, sc, xs, isa);
                            acc[ti..ti + 4].copy_from_slice(&r4);
                            ti += 4;
                        }
                        for (k, a) in acc.iter_mut().enumerate().skip(ti) {
                            *a = vecdot::dot_split(format, row, sc, tok(k), isa);
                        }
                        ti = t;
                    }
                    while ti + 4 <= t {
                        let r4 = vecdot::dot_q8_x4(
                            format,
                            row,
                            [tok(ti), tok(ti + 1), tok(ti + 2), tok(ti + 3)],
                            isa,
                        );
                        acc[ti..ti + 4].copy_from_slice(&r4);
                        ti += 4;
                    }
                    for (k, a) in acc.iter_mut().enumerate().skip(ti) {
                        *a = vecdot::dot_q8(format, row, tok(k), isa);
                    }
                }
                Acts::Q8K(q) => {
                    let per = cols / 256;
                    if format == WeightFormat::Q8K {
                        for (ti, a) in acc.iter_mut().enumerate() {
                            *a = vecdot::dot_q8k_row(row, &q[ti * per..(ti + 1) * per]);
                        }
                    } else {
                        acc.fill(0.0);
                        let bb = format.block_bytes();
                        for (bi, b) in row.chunks_exact(bb).enumerate() {
                            vecdot::unpack_k_isa(format, b, &mut kb, isa);
                            for (ti, a) in acc.iter_mut().enumerate() {
                                *a += vecdot::dot_kblock(&kb, &q[ti * per + bi], isa);
                            }
                        }
                    }
                }
            }
            for (ti, &a) in acc.iter().enumerate() {
                // SAFETY: index ti*rows + r < t*rows = y.len(); rows r0..r1 belong to this task
                // only, so no two tasks write the same element; `y` outlives parallel_for.
                unsafe { *out.get().add(ti * rows + r) = a };
            }
        }
    });
}
