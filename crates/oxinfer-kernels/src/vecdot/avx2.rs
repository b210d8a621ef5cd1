//! AVX2 + FMA + F16C dot-product kernels. Every function here requires those features; the
//! dispatcher in `mod.rs` only calls them after run-time detection.
#![cfg(target_arch = "x86_64")]

use super::unpack::KBlock;
use crate::format::WeightFormat;
use crate::q8::{BlockQ8, BlockQ8K};
use std::arch::x86_64::*;

#[inline]
#[target_feature(enable = "avx2,fma")]
fn hsum_ps(v: __m256) -> f32 {
    let lo = _mm256_castps256_ps128(v);
    let hi = _mm256_extractf128_ps::<1>(v);
    let s = _mm_add_ps(lo, hi);
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

#[inline]
#[target_feature(enable = "avx2")]
fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// 16 packed bytes → 32 nibbles: low nibbles in bytes 0..16, high nibbles in 16..32.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn nibbles_32(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes at `p`.
    let t = unsafe { _mm_loadu_si128(p as *const __m128i) };
    let b = _mm256_set_m128i(_mm_srli_epi16::<4>(t), t);
    _mm256_and_si256(b, _mm256_set1_epi8(0x0F))
}

/// The 32 bits of `qh` → 32 bytes, `0xFF` where the bit is set.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn bits_32(qh: u32) -> __m256i {
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), shuf);
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe));
    _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
}

/// Σ of u8 × i8 products in 8 i32 lanes (pairs summed in i16 first: callers keep products
/// small enough not to saturate).
#[inline]
#[target_feature(enable = "avx2")]
fn dot_u8_i8(a: __m256i, b: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))
}

/// See `super::dot_float`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_float(format: WeightFormat, w: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    let main = n / 8 * 8;
    let mut acc0 = _mm256_setzero_ps();
    let mut acc1 = _mm256_setzero_ps();
    let mut i = 0;
    // SAFETY (all loads below): `w` holds `n` elements of the format (checked by the caller's
    // WeightMatrix), `x` holds `n` f32; indices stay below `main <= n`.
    unsafe {
        while i + 16 <= main {
            let (w0, w1) = match format {
                WeightFormat::F32 => (
                    _mm256_loadu_ps(w.as_ptr().add(4 * i) as *const f32),
                    _mm256_loadu_ps(w.as_ptr().add(4 * i + 32) as *const f32),
                ),
                WeightFormat::F16 => (
                    _mm256_cvtph_ps(_mm_loadu_si128(w.as_ptr().add(2 * i) as *const __m128i)),
                    _mm256_cvtph_ps(_mm_loadu_si128(w.as_ptr().add(2 * i + 16) as *const __m128i)),
                ),
                _ => (
                    bf16x8(w.as_ptr().add(2 * i)),
                    bf16x8(w.as_ptr().add(2 * i + 16)),
                ),
            };
            acc0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x.as_ptr().add(i)), acc0);
            acc1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x.as_ptr().add(i + 8)), acc1);
            i += 16;
        }
    }
    let mut sum = hsum_ps(_mm256_add_ps(acc0, acc1));
    let tail = &w[i * format.block_bytes()..];
    sum += super::scalar::dot_float(format, tail, &x[i..]);
    sum
}

#[inline]
#[target_feature(enable = "avx2")]
unsafe fn bf16x8(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 16 readable bytes at `p`.
    let h = unsafe { _mm_loadu_si128(p as *const __m128i) };
    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
}

/// Format codes for the const-generic kernel (one monomorphized loop per format).
const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q5_0: u8 = 2;
const Q5_1: u8 = 3;
const Q8_0: u8 = 4;
const IQ4_NL: u8 = 5;
const MXFP4: u8 = 6;

/// The 16-entry i8 `table` in both 128-bit lanes, for `_mm256_shuffle_epi8` lookups.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn table_256(table: &[i8; 16]) -> __m256i {
    // SAFETY: `table` is 16 readable bytes.
    let t = unsafe { _mm_loadu_si128(table.as_ptr() as *const __m128i) };
    _mm256_set_m128i(t, t)
}

/// The f16 at `p`, converted by the F16C unit.
#[inline(always)]
unsafe fn f16_ptr(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees 2 readable bytes at `p`; the enclosing kernel has f16c.
    unsafe {
        let h = std::ptr::read_unaligned(p as *const u16);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
    }
}

/// See `super::dot_q8`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q8(format: WeightFormat, w: &[u8], x: &[BlockQ8]) -> f32 {
    let mut out = [0f32; 1];
    // SAFETY: same contract as this function.
    unsafe { dot_q8_multi::<1>(format, w, [x], &mut out) };
    out[0]
}

/// `N` tokens at once: each weight block is unpacked once and dotted with every token's block.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q8_multi<const N: usize>(
    format: WeightFormat,
    w: &[u8],
    xs: [&[BlockQ8]; N],
    out: &mut [f32; N],
) {
    // SAFETY: forwarded contract; each instantiation requires the same features.
    unsafe {
        match format {
            WeightFormat::Q4_0 => dot_q8_impl::<Q4_0, N>(w, xs, out),
            WeightFormat::Q4_1 => dot_q8_impl::<Q4_1, N>(w, xs, out),
            WeightFormat::Q5_0 => dot_q8_impl::<Q5_0, N>(w, xs, out),
            WeightFormat::Q5_1 => dot_q8_impl::<Q5_1, N>(w, xs, out),
            WeightFormat::IQ4_NL => dot_q8_impl::<IQ4_NL, N>(w, xs, out),
            WeightFormat::MXFP4 => dot_q8_impl::<MXFP4, N>(w, xs, out),
            _ => dot_q8_impl::<Q8_0, N>(w, xs, out),
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q8_impl<const F: u8, const N: usize>(
    w: &[u8],
    xs: [&[BlockQ8]; N],
    out: &mut [f32; N],
) {
    let bb = match F {
        Q4_0 => 18,
        Q4_1 => 20,
        Q5_0 => 22,
        Q5_1 => 24,
        IQ4_NL => 18,
        MXFP4 => 17,
        _ => 34,
    };
    // SAFETY: the enclosing kernel has avx2.
    let table = unsafe {
        match F {
            IQ4_NL => table_256(&crate::dequant::KVALUES_IQ4NL),
            _ => table_256(&crate::dequant::KVALUES_MXFP4),
        }
    };
    let nb = w.len() / bb;
    for x in &xs {
        assert!(x.len() >= nb, "activation row shorter than the weight row");
    }
    let unsigned = F == Q4_1 || F == Q5_1;
    let mut acc = [_mm256_setzero_ps(); N];
    let mut summ = [0f32; N];
    let mut p = w.as_ptr();
    for i in 0..nb {
        // SAFETY: block i spans bytes [i*bb, (i+1)*bb) of `w` (nb = w.len() / bb); the offsets
        // below follow each format's layout; every xs[k] has at least nb blocks (asserted).
        unsafe {
            let (q, d, m) = match F {
                Q4_0 => (
                    _mm256_sub_epi8(nibbles_32(p.add(2)), _mm256_set1_epi8(8)),
                    f16_ptr(p),
                    0.0,
                ),
                Q4_1 => (nibbles_32(p.add(4)), f16_ptr(p), f16_ptr(p.add(2))),
                IQ4_NL => (
                    _mm256_shuffle_epi8(table, nibbles_32(p.add(2))),
                    f16_ptr(p),
                    0.0,
                ),
                MXFP4 => (
                    _mm256_shuffle_epi8(table, nibbles_32(p.add(1))),
                    crate::dequant::iq::e8m0_half(*p),
                    0.0,
                ),
                Q5_0 => {
                    let qh = std::ptr::read_unaligned(p.add(2) as *const u32);
                    // High bit clear → nibble - 16 (as i8: nibble | 0xF0); set → nibble.
                    let hi = _mm256_andnot_si256(bits_32(qh), _mm256_set1_epi8(0xF0u8 as i8));
                    (_mm256_or_si256(nibbles_32(p.add(6)), hi), f16_ptr(p), 0.0)
                }
                Q5_1 => {
                    let qh = std::ptr::read_unaligned(p.add(4) as *const u32);
                    let hi = _mm256_and_si256(bits_32(qh), _mm256_set1_epi8(0x10));
                    (
                        _mm256_or_si256(nibbles_32(p.add(8)), hi),
                        f16_ptr(p),
                        f16_ptr(p.add(2)),
                    )
                }
                _ => (
                    _mm256_loadu_si256(p.add(2) as *const __m256i),
                    f16_ptr(p),
                    0.0,
                ),
            };
            let qa = if unsigned { q } else { _mm256_sign_epi8(q, q) };
            for k in 0..N {
                let y = xs[k].get_unchecked(i);
                let yq = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
                let yq = if unsigned {
                    yq
                } else {
                    _mm256_sign_epi8(yq, q)
                };
                let sumi = dot_u8_i8(qa, yq);
                acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d * y.d), _mm256_cvtepi32_ps(sumi), acc[k]);
                if unsigned {
                    summ[k] += m * y.s;
                }
            }
            p = p.add(bb);
        }
    }
    for k in 0..N {
        out[k] = hsum_ps(acc[k]) + summ[k];
    }
}

/// Split formats (`Q8` here, `Q4` in [`dot_split_q4`]), `N` tokens at once; see
/// `super::dot_split`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_split_multi<const N: usize>(
    format: WeightFormat,
    w: &[u8],
    s: &[u8],
    xs: [&[BlockQ8]; N],
    out: &mut [f32; N],
) {
    if format != WeightFormat::Q8 {
        // SAFETY: forwarded contract.
        return unsafe { dot_split_q4::<N>(w, s, xs, out) };
    }
    let nb = (w.len() / 32).min(s.len() / 4);
    for x in &xs {
        assert!(x.len() >= nb, "activation row shorter than the weight row");
    }
    let mut acc = [_mm256_setzero_ps(); N];
    for i in 0..nb {
        // SAFETY: block i spans bytes [32i, 32i + 32) of `w` and [4i, 4i + 4) of `s` (nb is
        // bounded by both lengths); every xs[k] has at least nb blocks (asserted).
        unsafe {
            let q = _mm256_loadu_si256(w.as_ptr().add(32 * i) as *const __m256i);
            let d = std::ptr::read_unaligned(s.as_ptr().add(4 * i) as *const f32);
            let qa = _mm256_sign_epi8(q, q);
            for k in 0..N {
                let y = xs[k].get_unchecked(i);
                let yq = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
                let sumi = dot_u8_i8(qa, _mm256_sign_epi8(yq, q));
                acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d * y.d), _mm256_cvtepi32_ps(sumi), acc[k]);
            }
        }
    }
    for k in 0..N {
        out[k] = hsum_ps(acc[k]);
    }
}

/// Split `Q4` (quants `w`, 16 bytes per block; f16 scales `s`), `N` tokens at once.
///
/// Cheaper per block than the signed form (`q - 8` through the sign trick, as GGUF's Q4_0
/// kernel does): the nibbles go to `maddubs` as they are (unsigned 0..15) and `8 Σ y` is taken
/// off in 16 bits (`maddubs(8, y)`; both terms fit). Blocks go by eight: their f16 scales are
/// converted by one instruction, the quants of two blocks come from one 32-byte load, and even
/// and odd blocks feed separate accumulators (so the loop is not bound by FMA latency).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_split_q4<const N: usize>(
    w: &[u8],
    s: &[u8],
    xs: [&[BlockQ8]; N],
    out: &mut [f32; N],
) {
    let nb = (w.len() / 16).min(s.len() / 2);
    for x in &xs {
        assert!(x.len() >= nb, "activation row shorter than the weight row");
    }
    let m4 = _mm256_set1_epi8(0x0F);
    let eight = _mm256_set1_epi8(8);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); 2]; N];
    let groups = nb / 8;
    let mut dw = [0f32; 8];
    for g in 0..groups {
        let i0 = 8 * g;
        // SAFETY: blocks i0..i0 + 8 lie within `w` (16 bytes each) and `s` (2 bytes each) as
        // i0 + 8 <= nb; every xs[k] has at least nb blocks (asserted); `dw` holds 8 f32.
        unsafe {
            _mm256_storeu_ps(
                dw.as_mut_ptr(),
                _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().add(2 * i0) as *const __m128i)),
            );
            for p in 0..4 {
                let i = i0 + 2 * p;
                let v = _mm256_loadu_si256(w.as_ptr().add(16 * i) as *const __m256i);
                let lo = _mm256_and_si256(v, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                let q = [
                    _mm256_permute2x128_si256::<0x20>(lo, hi),
                    _mm256_permute2x128_si256::<0x31>(lo, hi),
                ];
                for (j, qj) in q.iter().enumerate() {
                    let d = dw[2 * p + j];
                    for k in 0..N {
                        let y = xs[k].get_unchecked(i + j);
                        let yq = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
                        let p16 = _mm256_sub_epi16(
                            _mm256_maddubs_epi16(*qj, yq),
                            _mm256_maddubs_epi16(eight, yq),
                        );
                        let sumi = _mm256_madd_epi16(p16, ones);
                        acc[k][j] = _mm256_fmadd_ps(
                            _mm256_set1_ps(d * y.d),
                            _mm256_cvtepi32_ps(sumi),
                            acc[k][j],
                        );
                    }
                }
            }
        }
    }
    for i in 8 * groups..nb {
        // SAFETY: block i < nb lies within `w` and `s`; xs[k] has at least nb blocks.
        unsafe {
            let q = nibbles_32(w.as_ptr().add(16 * i));
            let d = f16_ptr(s.as_ptr().add(2 * i));
            for k in 0..N {
                let y = xs[k].get_unchecked(i);
                let yq = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
                let p16 =
                    _mm256_sub_epi16(_mm256_maddubs_epi16(q, yq), _mm256_maddubs_epi16(eight, yq));
                let sumi = _mm256_madd_epi16(p16, ones);
                acc[k][0] =
                    _mm256_fmadd_ps(_mm256_set1_ps(d * y.d), _mm256_cvtepi32_ps(sumi), acc[k][0]);
            }
        }
    }
    for k in 0..N {
        out[k] = hsum_ps(_mm256_add_ps(acc[k][0], acc[k][1]));
    }
}

/// See `super::dot_kblock`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_kblock(kb: &KBlock, y: &BlockQ8K) -> f32 {
    let mut acc = _mm256_setzero_si256();
    for c in 0..8 {
        // SAFETY: 32 bytes at offset 32c < 256 of both arrays.
        let (q, v) = unsafe {
            (
                _mm256_loadu_si256(kb.q.as_ptr().add(32 * c) as *const __m256i),
                _mm256_loadu_si256(y.qs.as_ptr().add(32 * c) as *const __m256i),
            )
        };
        let p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(v, q));
        let sc = _mm256_set_m128i(
            _mm_set1_epi16(kb.sc[2 * c + 1]),
            _mm_set1_epi16(kb.sc[2 * c]),
        );
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, sc));
    }
    let sumi = hsum_epi32(acc);
    let summ = if kb.dmin != 0.0 {
        // SAFETY: both arrays hold 16 i16 (32 bytes).
        let (m, s) = unsafe {
            (
                _mm256_loadu_si256(kb.m.as_ptr() as *const __m256i),
                _mm256_loadu_si256(y.bsums.as_ptr() as *const __m256i),
            )
        };
        hsum_epi32(_mm256_madd_epi16(m, s))
    } else {
        0
    };
    y.d * (kb.d * sumi as f32 - kb.dmin * summ as f32)
}

/// Unpacks the quants of a Q4_K, Q5_K or Q6_K super-block with SIMD (scales and mins are
/// decoded by the scalar unpacker, which then skips its quant loop). Other formats: `false`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn unpack_quants(format: WeightFormat, b: &[u8], q: &mut [i8; 256]) -> bool {
    let lo = _mm256_set1_epi8(0x0F);
    let out = q.as_mut_ptr() as *mut __m256i;
    // SAFETY (all loads/stores): `b` is one whole super-block of `format` (checked by the
    // caller's WeightMatrix); `q` holds 256 bytes = 8 stores of 32.
    unsafe {
        match format {
            WeightFormat::Q4K | WeightFormat::Q5K => {
                let (qs, qh) = if format == WeightFormat::Q4K {
                    (b.as_ptr().add(16), None)
                } else {
                    (
                        b.as_ptr().add(48),
                        Some(_mm256_loadu_si256(b.as_ptr().add(16) as *const __m256i)),
                    )
                };
                for p in 0..4 {
                    let v = _mm256_loadu_si256(qs.add(32 * p) as *const __m256i);
                    let mut l = _mm256_and_si256(v, lo);
                    let mut h = _mm256_and_si256(_mm256_srli_epi16::<4>(v), lo);
                    if let Some(bits) = qh {
                        let one = _mm256_set1_epi8(1);
                        let s1 = _mm_cvtsi32_si128((2 * p) as i32);
                        let s2 = _mm_cvtsi32_si128((2 * p + 1) as i32);
                        let b1 = _mm256_and_si256(_mm256_srl_epi16(bits, s1), one);
                        let b2 = _mm256_and_si256(_mm256_srl_epi16(bits, s2), one);
                        l = _mm256_or_si256(l, _mm256_slli_epi16::<4>(b1));
                        h = _mm256_or_si256(h, _mm256_slli_epi16::<4>(b2));
                    }
                    _mm256_storeu_si256(out.add(2 * p), l);
                    _mm256_storeu_si256(out.add(2 * p + 1), h);
                }
                true
            }
            WeightFormat::Q6K => {
                let m30 = _mm256_set1_epi8(0x30);
                let m32 = _mm256_set1_epi8(32);
                for h in 0..2 {
                    let a = _mm256_loadu_si256(b.as_ptr().add(64 * h) as *const __m256i);
                    let c = _mm256_loadu_si256(b.as_ptr().add(64 * h + 32) as *const __m256i);
                    let hb = _mm256_loadu_si256(b.as_ptr().add(128 + 32 * h) as *const __m256i);
                    let q0 = _mm256_or_si256(
                        _mm256_and_si256(a, lo),
                        _mm256_and_si256(_mm256_slli_epi16::<4>(hb), m30),
                    );
                    let q1 = _mm256_or_si256(
                        _mm256_and_si256(c, lo),
                        _mm256_and_si256(_mm256_slli_epi16::<2>(hb), m30),
                    );
                    let q2 = _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(a), lo),
                        _mm256_and_si256(hb, m30),
                    );
                    let q3 = _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(c), lo),
                        _mm256_and_si256(_mm256_srli_epi16::<2>(hb), m30),
                    );
                    _mm256_storeu_si256(out.add(4 * h), _mm256_sub_epi8(q0, m32));
                    _mm256_storeu_si256(out.add(4 * h + 1), _mm256_sub_epi8(q1, m32));
                    _mm256_storeu_si256(out.add(4 * h + 2), _mm256_sub_epi8(q2, m32));
                    _mm256_storeu_si256(out.add(4 * h + 3), _mm256_sub_epi8(q3, m32));
                }
                true
            }
            _ => false,
        }
    }
}
