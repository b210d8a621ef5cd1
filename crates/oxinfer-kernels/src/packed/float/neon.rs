//! NEON register tile: up to 6 tokens × four 128-bit accumulators.

use std::arch::aarch64::*;

use super::NR;

/// NEON tile of up to 6 tokens.
///
/// # Safety
/// `a` points at `tile.len()` rows of `kc` floats `lda` apart, `b` at `kc * 16` floats;
/// `1 <= tile.len() <= 6`.
pub(super) unsafe fn tile(
    a: *const f32,
    lda: usize,
    b: *const f32,
    kc: usize,
    tile: &mut [[f32; NR]],
) {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        match tile.len() {
            1 => tile_n::<1>(a, lda, b, kc, tile),
            2 => tile_n::<2>(a, lda, b, kc, tile),
            3 => tile_n::<3>(a, lda, b, kc, tile),
            4 => tile_n::<4>(a, lda, b, kc, tile),
            5 => tile_n::<5>(a, lda, b, kc, tile),
            6 => tile_n::<6>(a, lda, b, kc, tile),
            n => unreachable!("a tile of {n} tokens"),
        }
    }
}

#[target_feature(enable = "neon")]
unsafe fn tile_n<const MR: usize>(
    a: *const f32,
    lda: usize,
    b: *const f32,
    kc: usize,
    tile: &mut [[f32; NR]],
) {
    // SAFETY: k < kc keeps b + 16k .. b + 16k + 16 and a + i*lda + k (i < MR) inside the
    // caller's slices; tile holds MR rows of 16 floats.
    unsafe {
        let mut acc = [[vdupq_n_f32(0.0); 4]; MR];
        for k in 0..kc {
            let w = [
                vld1q_f32(b.add(k * NR)),
                vld1q_f32(b.add(k * NR + 4)),
                vld1q_f32(b.add(k * NR + 8)),
                vld1q_f32(b.add(k * NR + 12)),
            ];
            for (i, c) in acc.iter_mut().enumerate() {
                let av = vdupq_n_f32(*a.add(i * lda + k));
                for (cj, wj) in c.iter_mut().zip(w) {
                    *cj = vfmaq_f32(*cj, av, wj);
                }
            }
        }
        for (row, c) in tile.iter_mut().zip(acc) {
            for (j, cj) in c.into_iter().enumerate() {
                vst1q_f32(row.as_mut_ptr().add(4 * j), cj);
            }
        }
    }
}
