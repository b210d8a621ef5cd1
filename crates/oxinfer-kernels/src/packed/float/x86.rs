//! AVX-512 and AVX2 register tiles: `MR` tokens × 16 rows of accumulators, one FMA per
//! (token, register) per input feature with the activation broadcast from memory. The AVX-512
//! tile writes its sums into the output itself (masked stores of the panel's live rows).

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

/// Where an AVX-512 tile's sums go: token `i`'s `live` values (rows `0 .. live` of the panel,
/// `live <= 16`) at `ptr + i * ldo`, stored (`first`: the first k slice, plus `bias` when it is
/// not null, `live` floats) or added to what is there.
pub(super) struct Dest {
    pub ptr: *mut f32,
    pub ldo: usize,
    pub live: usize,
    pub first: bool,
    pub bias: *const f32,
}

/// AVX-512 tile of `n` tokens (1 ..= 12): one 512-bit accumulator per token, stored straight
/// into the output with masked stores (`dest`).
///
/// # Safety
/// The CPU has AVX-512 F; `a` points at `n` rows of `kc` floats `lda` apart, `b` at `kc * 16`
/// floats; `dest.ptr + i * dest.ldo .. + dest.live` for `i < n` and `dest.bias .. + dest.live`
/// (when not null) are valid, the first writable by this call alone.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn tile_avx512(
    a: *const f32,
    lda: usize,
    b: *const f32,
    kc: usize,
    n: usize,
    dest: &Dest,
) {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        match n {
            1 => tile_avx512_n::<1>(a, lda, b, kc, dest),
            2 => tile_avx512_n::<2>(a, lda, b, kc, dest),
            3 => tile_avx512_n::<3>(a, lda, b, kc, dest),
            4 => tile_avx512_n::<4>(a, lda, b, kc, dest),
            5 => tile_avx512_n::<5>(a, lda, b, kc, dest),
            6 => tile_avx512_n::<6>(a, lda, b, kc, dest),
            7 => tile_avx512_n::<7>(a, lda, b, kc, dest),
            8 => tile_avx512_n::<8>(a, lda, b, kc, dest),
            9 => tile_avx512_n::<9>(a, lda, b, kc, dest),
            10 => tile_avx512_n::<10>(a, lda, b, kc, dest),
            11 => tile_avx512_n::<11>(a, lda, b, kc, dest),
            12 => tile_avx512_n::<12>(a, lda, b, kc, dest),
            n => unreachable!("a tile of {n} tokens"),
        }
    }
}

#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512_n<const MR: usize>(
    a: *const f32,
    lda: usize,
    b: *const f32,
    kc: usize,
    dest: &Dest,
) {
    // SAFETY: (for the whole body) k < kc, so b + 16k .. b + 16k + 16 and a + i*lda + k for
    // i < MR stay inside the caller's slices; the masked loads and stores touch only the
    // `live` floats of each destination row and of the bias (the contract).
    unsafe {
        let mut acc = [_mm512_setzero_ps(); MR];
        for k in 0..kc {
            let w = _mm512_loadu_ps(b.add(k * NR));
            for (i, c) in acc.iter_mut().enumerate() {
                *c = _mm512_fmadd_ps(_mm512_set1_ps(*a.add(i * lda + k)), w, *c);
            }
        }
        let mask: __mmask16 = if dest.live >= NR {
            0xffff
        } else {
            (1u16 << dest.live) - 1
        };
        let base = if !dest.first || dest.bias.is_null() {
            _mm512_setzero_ps()
        } else {
            _mm512_maskz_loadu_ps(mask, dest.bias)
        };
        for (i, c) in acc.into_iter().enumerate() {
            let p = dest.ptr.add(i * dest.ldo);
            let add = if dest.first {
                base
            } else {
                _mm512_maskz_loadu_ps(mask, p)
            };
            _mm512_mask_storeu_ps(p, mask, _mm512_add_ps(c, add));
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
