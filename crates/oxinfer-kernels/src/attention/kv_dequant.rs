//! Cached keys/values in a [`KvType`] back to f32, a head's slice of a row at a time, as the
//! attention kernels read them tile by tile. The scalar twin is [`crate::dequant`]'s reference
//! (bit-exact with llama.cpp); the AVX-512, AVX2 and NEON versions write the same bits (one
//! `d · q` product per value, exact half→single conversions), which the tests check.

use super::kv_type::KvType;
use crate::dispatch::Isa;

/// Writes `dst.len()` values decoded from `src` (`ty.row_bytes(dst.len())` bytes; for the
/// block types `dst.len()` is a multiple of 32) with the kernels of `isa`.
///
/// # Panics
/// When `src` has the wrong length for `dst`.
pub fn dequant(ty: KvType, src: &[u8], dst: &mut [f32], isa: Isa) {
    assert_eq!(
        src.len(),
        ty.row_bytes(dst.len()),
        "{ty} bytes for {} values",
        dst.len()
    );
    assert!(dst.len().is_multiple_of(ty.block()), "partial {ty} block");
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: an AVX2 level is only handed out when the CPU has AVX2 + FMA + F16C, and
        // the AVX-512 level only with AVX-512 F/BW/VL; lengths checked above.
        unsafe {
            if isa.has_vnni() {
                x86::dequant_avx512(ty, src, dst)
            } else {
                x86::dequant_avx2(ty, src, dst)
            }
        }
        return;
    }
    #[cfg(target_arch = "aarch64")]
    if isa.is_neon() {
        // SAFETY: NEON is part of every aarch64 CPU; lengths checked above.
        unsafe { neon::dequant(ty, src, dst) };
        return;
    }
    let _ = isa;
    scalar(ty, src, dst);
}

/// The reference: [`crate::dequantize_row`] of the matching weight format.
pub fn scalar(ty: KvType, src: &[u8], dst: &mut [f32]) {
    crate::dequantize_row(ty.format(), src, dst).expect("KV row of whole blocks");
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! AVX2 (8 lanes) and AVX-512 (16 lanes) decoders.

    use super::KvType;
    use crate::dequant::f16_at;
    use std::arch::x86_64::*;

    /// [`super::dequant`] on AVX2 + F16C.
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C; `src` holds `ty.row_bytes(dst.len())` bytes.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dequant_avx2(ty: KvType, src: &[u8], dst: &mut [f32]) {
        let n = dst.len();
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        // SAFETY: every load reads inside `src` and every store writes inside `dst` (the
        // byte count was checked against the value count by the caller).
        unsafe {
            match ty {
                KvType::F32 => std::ptr::copy_nonoverlapping(s, d.cast::<u8>(), 4 * n),
                KvType::F16 | KvType::Bf16 => {
                    let mut i = 0;
                    while i + 8 <= n {
                        let h = _mm_loadu_si128(s.add(2 * i).cast());
                        let f = if ty == KvType::F16 {
                            _mm256_cvtph_ps(h)
                        } else {
                            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
                        };
                        _mm256_storeu_ps(d.add(i), f);
                        i += 8;
                    }
                    super::scalar(ty, &src[2 * i..], &mut dst[i..]);
                }
                KvType::Q8_0 | KvType::Q4_0 => {
                    let bb = ty.format().block_bytes();
                    for b in 0..n / 32 {
                        let blk = s.add(b * bb);
                        let scale = _mm256_set1_ps(f16_at(src, b * bb));
                        let q = quants_avx2(ty, blk.add(2));
                        for (part, qi) in q.into_iter().enumerate() {
                            let v = _mm256_mul_ps(_mm256_cvtepi32_ps(qi), scale);
                            _mm256_storeu_ps(d.add(b * 32 + part * 8), v);
                        }
                    }
                }
            }
        }
    }

    /// The 32 quants of a Q8_0 / Q4_0 block at `q` (after the scale) as four i32 vectors of
    /// eight, in value order (Q4_0: `q − 8`).
    ///
    /// # Safety
    /// AVX2; 32 (Q8_0) or 16 (Q4_0) readable bytes at `q`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn quants_avx2(ty: KvType, q: *const u8) -> [__m256i; 4] {
        // SAFETY: reads the block's quant bytes only (caller's guarantee).
        unsafe {
            let (lo, hi) = if ty == KvType::Q8_0 {
                (_mm_loadu_si128(q.cast()), _mm_loadu_si128(q.add(16).cast()))
            } else {
                let b = _mm_loadu_si128(q.cast());
                let m = _mm_set1_epi8(0x0f);
                let eight = _mm_set1_epi8(8);
                (
                    _mm_sub_epi8(_mm_and_si128(b, m), eight),
                    _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16::<4>(b), m), eight),
                )
            };
            [
                _mm256_cvtepi8_epi32(lo),
                _mm256_cvtepi8_epi32(_mm_srli_si128::<8>(lo)),
                _mm256_cvtepi8_epi32(hi),
                _mm256_cvtepi8_epi32(_mm_srli_si128::<8>(hi)),
            ]
        }
    }

    /// [`super::dequant`] on AVX-512 (16 values per instruction).
    ///
    /// # Safety
    /// The CPU must have AVX-512 F (and AVX2/F16C for the tails); `src` holds
    /// `ty.row_bytes(dst.len())` bytes.
    #[target_feature(enable = "avx2,fma,f16c,avx512f")]
    pub(super) unsafe fn dequant_avx512(ty: KvType, src: &[u8], dst: &mut [f32]) {
        let n = dst.len();
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        // SAFETY: as in `dequant_avx2`: loads inside `src`, stores inside `dst`.
        unsafe {
            match ty {
                KvType::F16 | KvType::Bf16 => {
                    let mut i = 0;
                    while i + 16 <= n {
                        let h = _mm256_loadu_si256(s.add(2 * i).cast());
                        let f = if ty == KvType::F16 {
                            _mm512_cvtph_ps(h)
                        } else {
                            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
                        };
                        _mm512_storeu_ps(d.add(i), f);
                        i += 16;
                    }
                    dequant_avx2(ty, &src[2 * i..], &mut dst[i..]);
                }
                KvType::Q8_0 | KvType::Q4_0 => {
                    let bb = ty.format().block_bytes();
                    for b in 0..n / 32 {
                        let blk = s.add(b * bb + 2);
                        let scale = _mm512_set1_ps(f16_at(src, b * bb));
                        let (lo, hi) = if ty == KvType::Q8_0 {
                            (
                                _mm_loadu_si128(blk.cast()),
                                _mm_loadu_si128(blk.add(16).cast()),
                            )
                        } else {
                            let q = _mm_loadu_si128(blk.cast());
                            let m = _mm_set1_epi8(0x0f);
                            let eight = _mm_set1_epi8(8);
                            (
                                _mm_sub_epi8(_mm_and_si128(q, m), eight),
                                _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16::<4>(q), m), eight),
                            )
                        };
                        for (part, qi) in [lo, hi].into_iter().enumerate() {
                            let v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(qi));
                            _mm512_storeu_ps(d.add(b * 32 + part * 16), _mm512_mul_ps(v, scale));
                        }
                    }
                }
                KvType::F32 => dequant_avx2(ty, src, dst),
            }
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    //! NEON decoders (4 lanes; f16 through `fcvtl`, base Armv8).

    use super::KvType;
    use crate::dequant::f16_at;
    use crate::vecdot::neon::{f16x4_hi, f16x4_lo};
    use std::arch::aarch64::*;

    /// [`super::dequant`] on NEON.
    ///
    /// # Safety
    /// `src` holds `ty.row_bytes(dst.len())` bytes.
    #[target_feature(enable = "neon")]
    pub(super) unsafe fn dequant(ty: KvType, src: &[u8], dst: &mut [f32]) {
        let n = dst.len();
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        // SAFETY: loads inside `src`, stores inside `dst` (lengths checked by the caller).
        unsafe {
            match ty {
                KvType::F32 => std::ptr::copy_nonoverlapping(s, d.cast::<u8>(), 4 * n),
                KvType::F16 | KvType::Bf16 => {
                    let mut i = 0;
                    while i + 8 <= n {
                        let h = vld1q_u16(s.add(2 * i).cast());
                        let (a, b) = if ty == KvType::F16 {
                            (f16x4_lo(h), f16x4_hi(h))
                        } else {
                            (
                                vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_low_u16(h))),
                                vreinterpretq_f32_u32(vshll_high_n_u16::<16>(h)),
                            )
                        };
                        vst1q_f32(d.add(i), a);
                        vst1q_f32(d.add(i + 4), b);
                        i += 8;
                    }
                    super::scalar(ty, &src[2 * i..], &mut dst[i..]);
                }
                KvType::Q8_0 | KvType::Q4_0 => {
                    let bb = ty.format().block_bytes();
                    for b in 0..n / 32 {
                        let blk = s.add(b * bb + 2);
                        let scale = vdupq_n_f32(f16_at(src, b * bb));
                        let (lo, hi) = if ty == KvType::Q8_0 {
                            (vld1q_s8(blk.cast()), vld1q_s8(blk.add(16).cast()))
                        } else {
                            let q = vld1q_u8(blk);
                            let m = vdupq_n_u8(0x0f);
                            let eight = vdupq_n_s8(8);
                            (
                                vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, m)), eight),
                                vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(q)), eight),
                            )
                        };
                        for (part, q) in [lo, hi].into_iter().enumerate() {
                            let w = [vmovl_s8(vget_low_s8(q)), vmovl_high_s8(q)];
                            for (half, w) in w.into_iter().enumerate() {
                                let x = [vmovl_s16(vget_low_s16(w)), vmovl_high_s16(w)];
                                for (quarter, x) in x.into_iter().enumerate() {
                                    let v = vmulq_f32(vcvtq_f32_s32(x), scale);
                                    let at = b * 32 + part * 16 + half * 8 + quarter * 4;
                                    vst1q_f32(d.add(at), v);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::available_isas;

    /// Every instruction set writes the scalar reference's bits, for every type, on rows with
    /// ragged float tails and blocks whose scale is zero.
    #[test]
    fn every_isa_matches_the_scalar_twin() {
        for ty in KvType::ALL {
            for n in [32usize, 64, 96, 136, 256] {
                let n = ty.padded(n);
                let x: Vec<f32> = (0..n)
                    .map(|i| {
                        if (32..64).contains(&i) {
                            0.0
                        } else {
                            ((i * 7919 % 1013) as f32 - 506.0) / 97.0
                        }
                    })
                    .collect();
                let mut bytes = Vec::new();
                ty.quantize_row(&x, &mut bytes);
                let mut want = vec![0f32; n];
                scalar(ty, &bytes, &mut want);
                for isa in available_isas() {
                    let mut got = vec![f32::NAN; n];
                    dequant(ty, &bytes, &mut got, isa);
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{ty} n={n} on {}", isa.name());
                }
            }
        }
    }
}
