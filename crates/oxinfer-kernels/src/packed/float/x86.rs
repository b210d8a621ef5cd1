//! AVX-512 and AVX2 register tiles: `MR` tokens × 16 rows of accumulators, one FMA per
//! (token, register) per input feature with the activation broadcast from memory.

use std::arch::x86_64::*;

use super::NR;

/// Calls `$kern::<N>` for the tile's token count `N` (1 ..= the listed maximum).
macro_rules! by_tokens {
    ($kern:ident, $a:expr, $lda:expr, $b:expr, $kc:expr, $tile:expr; $($n:literal)+) => {
        match $tile.len() {
            $($n => $kern::<$n>($a, $lda, $b, $kc, $tile),)+
            n => unreachable!("a tile of {n} tokens"),
        }
    };
}

/// AVX-512 tile of up to 12 tokens: one 512-bit accumulator per token.
///
/// # Safety
/// The CPU has AVX-512 F; `a` points at `tile.len()` rows of `kc` floats `lda` apart, `b` at
/// `kc * 16` floats; `1 <= tile.len() <= 12`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn tile_avx512(
    a: *const f32,
    lda: usize,
    b: *const f32,
    kc: usize,
    tile: &mut [[f32; NR]],
) {
    // SAFETY: forwarded from this function's contract.
    unsafe { by_tokens!(tile_avx512_n, a, lda, b, kc, tile; 1 2 3 4 5 6 7 8 9 10 11 12) }
}

#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512_n<const MR: usize>(
    a: *const f32,
    lda: usize,
    b: *const f32,
    kc: usize,
    tile: &mut [[f32; NR]],
) {
    // SAFETY: (for the whole body) k < kc, so b + 16k .. b + 16k + 16 and a + i*lda + k for
    // i < MR stay inside the caller's slices; tile holds MR rows of 16 floats.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); MR];
        for k in 0..kc {
            let w = _mm512_loadu_ps(b.add(k * NR));
            for (i, c) in acc.iter_mut().enumerate() {
                *c = _mm512_fmadd_ps(_mm512_set1_ps(*a.add(i * lda + k)), w, *c);
            }
        }
        for (row, c) in tile.iter_mut().zip(acc) {
            _mm512_storeu_ps(row.as_mut_ptr(), c);
        }
    }
}

/// AVX2 tile of up to 6 tokens: two 256-bit accumulators per token.
///
/// # Safety
/// The CPU has AVX2 and FMA; `a` points at `tile.len()` rows of `kc` floats `lda` apart, `b`
/// at `kc * 16` floats; `1 <= tile.len() <= 6`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn tile_avx2(
    a: *const f32,
    lda: usize,
    b: *const f32,
    kc: usize,
    tile: &mut [[f32; NR]],
) {
    // SAFETY: forwarded from this function's contract.
    unsafe { by_tokens!(tile_avx2_n, a, lda, b, kc, tile; 1 2 3 4 5 6) }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2_n<const MR: usize>(
    a: *const f32,
    lda: usize,
    b: *const f32,
    kc: usize,
    tile: &mut [[f32; NR]],
) {
    // SAFETY: as in tile_avx512_n.
    unsafe {
        let mut lo = [_mm256_setzero_ps(); MR];
        let mut hi = [_mm256_setzero_ps(); MR];
        for k in 0..kc {
            let w0 = _mm256_loadu_ps(b.add(k * NR));
            let w1 = _mm256_loadu_ps(b.add(k * NR + 8));
            for i in 0..MR {
                let av = _mm256_broadcast_ss(&*a.add(i * lda + k));
                lo[i] = _mm256_fmadd_ps(av, w0, lo[i]);
                hi[i] = _mm256_fmadd_ps(av, w1, hi[i]);
            }
        }
        for (i, row) in tile.iter_mut().enumerate() {
            _mm256_storeu_ps(row.as_mut_ptr(), lo[i]);
            _mm256_storeu_ps(row.as_mut_ptr().add(8), hi[i]);
        }
    }
}
