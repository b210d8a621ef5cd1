//! The AVX2 tile of the int16 GEMM ([`super::int16`]) and its row helpers. AVX2 has no
//! `vpdpwssd`: each (token, feature pair) is one `vpmaddwd` (16 int16 products, pairs added
//! into 8 int32 lanes) and one `vpaddd` per 256-bit accumulator, rows 0–7 in one and 8–15 in
//! the other (the panel's 32 values of a pair are two 256-bit loads). Zen 3 issues two
//! `vpmaddwd ymm` per cycle on their own (measured: as many as FMAs of 8 floats), but with a
//! `vpaddd` after each about 1.6: this tile's k loop ran at 80 G multiply-adds/s on one core
//! (L1-resident panel) where the f32 AVX2 tile's ran at 51 (1.58×), and the same pairs with
//! the broadcasts taken out reach no more. The sums are then scaled to f32 and written into
//! the output with the scalar twin's operations in its order, so both give the same bits.

use std::arch::x86_64::*;

use super::int16::{Dest16, QMAX};
use super::x86::by_tokens;
use super::NR;

/// Tokens of one AVX2 tile: 6 tokens × 2 accumulators, the pair's two weight registers and a
/// broadcast take 15 of the 16 ymm registers.
pub(super) const MR: usize = 6;

/// Tile of `n` tokens (1 ..= [`MR`]) over `kp` feature pairs.
///
/// No int32 lane can overflow: `vpmaddwd`'s own sum of two products overflows only for
/// `(−32768)² + (−32768)²`, which the quantizers never give (they clamp to ±32767), and every
/// partial sum after it stays below `46340²` by the Cauchy–Schwarz bound of the module doc
/// ([`super::int16`]), which covers each pair as well.
///
/// # Safety
/// The CPU has AVX2; `a` points at `n` rows of `2 · kp` int16 values `lda` apart, `b` at
/// `kp · 32`; `dest` is valid as [`Dest16`] says for `n` tokens, its rows writable by this call
/// alone.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn tile(
    a: *const i16,
    lda: usize,
    b: *const i16,
    kp: usize,
    n: usize,
    dest: &Dest16,
) {
    // SAFETY: forwarded from this function's contract.
    unsafe { by_tokens!(tile_n, n, (a, lda, b, kp, dest); 1 2 3 4 5 6) }
}

#[target_feature(enable = "avx2")]
unsafe fn tile_n<const M: usize>(
    a: *const i16,
    lda: usize,
    b: *const i16,
    kp: usize,
    dest: &Dest16,
) {
    let mut acc = [[_mm256_setzero_si256(); 2]; M];
    // SAFETY: j < kp, so b + 32j .. b + 32j + 32 and the pair at a + i*lda + 2j for i < M stay
    // inside the caller's slices (the contract).
    unsafe {
        for j in 0..kp {
            let w0 = _mm256_loadu_si256(b.add(j * 2 * NR).cast());
            let w1 = _mm256_loadu_si256(b.add(j * 2 * NR + NR).cast());
            for (i, [lo, hi]) in acc.iter_mut().enumerate() {
                let pair = std::ptr::read_unaligned(a.add(i * lda + 2 * j).cast::<i32>());
                let x = _mm256_set1_epi32(pair);
                *lo = _mm256_add_epi32(*lo, _mm256_madd_epi16(x, w0));
                *hi = _mm256_add_epi32(*hi, _mm256_madd_epi16(x, w1));
            }
        }
    }
    for h in 0..2 {
        let live = dest.live.saturating_sub(8 * h).min(8);
        if live == 0 {
            break;
        }
        let mut half = [_mm256_setzero_si256(); M];
        for (s, c) in half.iter_mut().zip(&acc) {
            *s = c[h];
        }
        // SAFETY: the half's `live` rows start 8h rows into each destination row and the bias,
        // which hold `dest.live` floats, and into ws (16); xs holds M values (the contract).
        unsafe { store_half(half, live, 8 * h, dest) };
    }
}

/// Writes rows `r0 .. r0 + live` (`live <= 8`) of the tile: `sums[i] · (xs[i] · ws[r])`,
/// stored on the first k slice (plus the bias when there is one), else added to what is there;
/// whole halves with plain loads and stores, a ragged one with `vmaskmovps`.
///
/// # Safety
/// The CPU has AVX2; `dest` is valid as [`Dest16`] says for `M` tokens with `r0 + live <=
/// dest.live`.
#[target_feature(enable = "avx2")]
unsafe fn store_half<const M: usize>(sums: [__m256i; M], live: usize, r0: usize, dest: &Dest16) {
    let mask = _mm256_cmpgt_epi32(
        _mm256_set1_epi32(live as i32),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    );
    // SAFETY: the loads and stores touch the `live` floats from a destination row or the bias,
    // offset by r0 rows, which the contract makes valid; ws holds 16 floats, xs M.
    unsafe {
        let ws = _mm256_loadu_ps(dest.ws.add(r0));
        let bias = match dest.first && !dest.bias.is_null() {
            true => Some(load_live(dest.bias.add(r0), live, mask)),
            false => None,
        };
        for (i, s) in sums.into_iter().enumerate() {
            let p = dest.ptr.add(i * dest.ldo + r0);
            let scale = _mm256_mul_ps(_mm256_set1_ps(*dest.xs.add(i)), ws);
            let v = _mm256_mul_ps(_mm256_cvtepi32_ps(s), scale);
            let v = match (dest.first, bias) {
                (false, _) => _mm256_add_ps(load_live(p, live, mask), v),
                (true, Some(b)) => _mm256_add_ps(v, b),
                (true, None) => v,
            };
            if live == 8 {
                _mm256_storeu_ps(p, v);
            } else {
                _mm256_maskstore_ps(p, mask, v);
            }
        }
    }
}

/// The `live` floats at `p` (8: a plain load, fewer: the lanes of `mask`, the others zero).
///
/// # Safety
/// The CPU has AVX2; `p` holds `live` floats, `mask` has the first `live` lanes set.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn load_live(p: *const f32, live: usize, mask: __m256i) -> __m256 {
    // SAFETY: the contract.
    unsafe {
        match live {
            8 => _mm256_loadu_ps(p),
            _ => _mm256_maskload_ps(p, mask),
        }
    }
}

/// The largest `|v[j]|` and `Σ v[j]²` (in f32, 32 lanes in four registers: four chains of FMA
/// latency), the statistics of one row's scale.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn absmax_sumsq(v: &[f32]) -> (f32, f32) {
    const L: usize = 4;
    let chunks = v.chunks_exact(8 * L);
    let rest = chunks.remainder();
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
    let mut m = [_mm256_setzero_ps(); L];
    let mut s = [_mm256_setzero_ps(); L];
    // SAFETY: each chunk holds 8L floats.
    unsafe {
        for c in chunks {
            for h in 0..L {
                let x = _mm256_loadu_ps(c.as_ptr().add(8 * h));
                m[h] = _mm256_max_ps(m[h], _mm256_and_ps(x, abs));
                s[h] = _mm256_fmadd_ps(x, x, s[h]);
            }
        }
    }
    let (mut mx, mut sum) = (0f32, 0f32);
    for h in 0..L {
        let (mut ml, mut sl) = ([0f32; 8], [0f32; 8]);
        // SAFETY: each array holds 8 floats.
        unsafe {
            _mm256_storeu_ps(ml.as_mut_ptr(), m[h]);
            _mm256_storeu_ps(sl.as_mut_ptr(), s[h]);
        }
        // `max` skips a NaN lane; the sum of squares carries it (the caller's check).
        mx = ml.iter().fold(mx, |a, &b| a.max(b));
        sum += sl.iter().sum::<f32>();
    }
    for &x in rest {
        mx = mx.max(x.abs());
        sum += x * x;
    }
    (mx, sum)
}

/// `q[j] = round(v[j] · s)` (to nearest, ties to even), clamped to ±32767 as the scalar
/// rounding does (same values); `q` as long as `v`.
///
/// # Safety
/// The CPU has AVX2; `q.len() >= v.len()`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quantize(v: &[f32], s: f32, q: &mut [i16]) {
    let scale = _mm256_set1_ps(s);
    let mut j = 0;
    // SAFETY: j + 16 <= v.len() <= q.len() in the loop.
    unsafe {
        while j + 16 <= v.len() {
            let a = round8(v.as_ptr().add(j), scale);
            let b = round8(v.as_ptr().add(j + 8), scale);
            // packs works per 128-bit lane: [a0..3 b0..3 a4..7 b4..7] back into order.
            let r = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(a, b));
            _mm256_storeu_si256(q.as_mut_ptr().add(j).cast(), r);
            j += 16;
        }
    }
    for (d, &x) in q[j..].iter_mut().zip(&v[j..]) {
        *d = (x * s).round_ties_even().clamp(-QMAX, QMAX) as i16;
    }
}

/// `round(p[k] · scale)` for 8 floats, clamped to ±32767 (clamping before the rounding gives
/// the clamped rounding: ±32767 are integers).
///
/// # Safety
/// The CPU has AVX2; `p` holds 8 floats.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn round8(p: *const f32, scale: __m256) -> __m256i {
    // SAFETY: the contract.
    let x = _mm256_mul_ps(unsafe { _mm256_loadu_ps(p) }, scale);
    let clamped = _mm256_min_ps(
        _mm256_max_ps(x, _mm256_set1_ps(-QMAX)),
        _mm256_set1_ps(QMAX),
    );
    _mm256_cvtps_epi32(clamped)
}
