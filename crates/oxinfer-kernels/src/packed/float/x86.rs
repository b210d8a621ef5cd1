//! AVX-512 and AVX2 register tiles: `MR` tokens × 16 rows of accumulators, one FMA per
//! (token, register) per input feature with the activation broadcast from memory. The AVX-512
//! tile writes its sums into the output itself (masked stores of the panel's live rows).

use std::arch::x86_64::*;

use super::NR;

/// Calls `$kern::<N>` with the parenthesized arguments `$args` for the tile's token count
/// `$n` (one of the listed counts).
macro_rules! by_tokens {
    ($kern:ident, $n:expr, $args:tt; $($k:literal)+) => {
        match $n {
            $($k => $kern::<$k> $args,)+
            n => unreachable!("a tile of {n} tokens"),
        }
    };
}
pub(super) use by_tokens;

/// The lanes of a panel's `live` rows (`live <= 16`), for the AVX-512 tiles' masked stores.
pub(super) fn live_mask(live: usize) -> __mmask16 {
    if live >= NR {
        0xffff
    } else {
        (1u16 << live) - 1
    }
}

/// What a tile's first k slice adds its sums to: the `mask`ed `bias` on the `first` slice when
/// there is one, else zero.
///
/// # Safety
/// The CPU has AVX-512 F; `bias` (when not null and `first`) holds the mask's floats.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn slice_base(first: bool, bias: *const f32, mask: __mmask16) -> __m512 {
    if !first || bias.is_null() {
        _mm512_setzero_ps()
    } else {
        // SAFETY: the contract.
        unsafe { _mm512_maskz_loadu_ps(mask, bias) }
    }
}

/// What an output row's sums are added to: `base` on the first k slice, else the `mask`ed
/// values already at `p`.
///
/// # Safety
/// The CPU has AVX-512 F; `p` holds the mask's floats.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn row_prior(
    p: *const f32,
    first: bool,
    base: __m512,
    mask: __mmask16,
) -> __m512 {
    if first {
        base
    } else {
        // SAFETY: the contract.
        unsafe { _mm512_maskz_loadu_ps(mask, p) }
    }
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
    unsafe { by_tokens!(tile_avx512_n, n, (a, lda, b, kc, dest); 1 2 3 4 5 6 7 8 9 10 11 12) }
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
    // i < MR stay inside the caller's slices; the stores are store_tile's contract, which is
    // this function's.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); MR];
        for k in 0..kc {
            let w = _mm512_loadu_ps(b.add(k * NR));
            for (i, c) in acc.iter_mut().enumerate() {
                *c = _mm512_fmadd_ps(_mm512_set1_ps(*a.add(i * lda + k)), w, *c);
            }
        }
        store_tile(acc, dest);
    }
}

/// AVX-512 tile of `n` tokens (1 ..= 12) over two panels (32 rows): two accumulators per
/// token share each broadcast activation, so a k step loads 2 weight vectors and `n`
/// activations for `2n` FMAs (the one-panel tile loads `1 + n` for `n`). Each output is the
/// same FMA chain as in [`tile_avx512`], so the results are bit-identical.
///
/// # Safety
/// As [`tile_avx512`] for `b0` with `dest0` and for `b1` with `dest1`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn tile_avx512_pair(
    a: *const f32,
    lda: usize,
    (b0, b1): (*const f32, *const f32),
    kc: usize,
    n: usize,
    (dest0, dest1): (&Dest, &Dest),
) {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        by_tokens!(tile_avx512_pair_n, n, (a, lda, b0, b1, kc, dest0, dest1); 1 2 3 4 5 6 7 8 9 10 11 12)
    }
}

#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512_pair_n<const MR: usize>(
    a: *const f32,
    lda: usize,
    b0: *const f32,
    b1: *const f32,
    kc: usize,
    dest0: &Dest,
    dest1: &Dest,
) {
    // SAFETY: as in tile_avx512_n, for each of the two panels.
    unsafe {
        let mut acc0 = [_mm512_setzero_ps(); MR];
        let mut acc1 = [_mm512_setzero_ps(); MR];
        for k in 0..kc {
            let w0 = _mm512_loadu_ps(b0.add(k * NR));
            let w1 = _mm512_loadu_ps(b1.add(k * NR));
            for i in 0..MR {
                let av = _mm512_set1_ps(*a.add(i * lda + k));
                acc0[i] = _mm512_fmadd_ps(av, w0, acc0[i]);
                acc1[i] = _mm512_fmadd_ps(av, w1, acc1[i]);
            }
        }
        store_tile(acc0, dest0);
        store_tile(acc1, dest1);
    }
}

/// Stores (or adds, after the first k slice) a tile's `MR` accumulators into `dest`.
///
/// # Safety
/// The CPU has AVX-512 F; `dest.ptr + i * dest.ldo .. + dest.live` for `i < MR` and
/// `dest.bias .. + dest.live` (when not null) are valid, the first writable; the masked loads
/// and stores touch only those `live` floats.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn store_tile<const MR: usize>(acc: [__m512; MR], dest: &Dest) {
    // SAFETY: the contract.
    unsafe {
        let mask = live_mask(dest.live);
        let base = slice_base(dest.first, dest.bias, mask);
        for (i, c) in acc.into_iter().enumerate() {
            let p = dest.ptr.add(i * dest.ldo);
            let add = row_prior(p, dest.first, base, mask);
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
    unsafe { by_tokens!(tile_avx2_n, tile.len(), (a, lda, b, kc, tile); 1 2 3 4 5 6) }
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
