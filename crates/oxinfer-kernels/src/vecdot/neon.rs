//! aarch64 NEON dot-product kernels, each in two flavours chosen by a const `DOT`: plain NEON
//! (`smull` + pairwise widening adds, every aarch64 CPU) and the dot-product extension (`sdot`,
//! Armv8.2 `dotprod`). The int8 matrix-multiply kernels (`smmla`, `i8mm`) are in `neon_mm.rs`.
//! The dispatcher in `mod.rs` calls the `dotprod` entry points only after run-time detection.
//!
//! `sdot`, `smmla` and the f16 → f32 conversions are not yet stable as Rust intrinsics, so they
//! are written as one-instruction inline assembly below.
#![cfg(target_arch = "aarch64")]

use super::unpack::KBlock;
use crate::format::WeightFormat;
use crate::q8::{BlockQ8, BlockQ8K};
use std::arch::aarch64::*;
use std::arch::asm;

/// `acc + Σ a·b` over each group of four bytes (`sdot`).
#[inline]
#[target_feature(enable = "neon,dotprod")]
pub(super) fn sdot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: register-only arithmetic; the enclosing function requires `dotprod`.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// Lanes 0..4 of `h` (f16 bits) as f32 (`fcvtl`, base Armv8).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn f16x4_lo(h: uint16x8_t) -> float32x4_t {
    let r: float32x4_t;
    // SAFETY: register-only conversion available on every aarch64 CPU.
    unsafe {
        asm!(
            "fcvtl {r:v}.4s, {h:v}.4h",
            r = lateout(vreg) r,
            h = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    r
}

/// Lanes 4..8 of `h` (f16 bits) as f32 (`fcvtl2`).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn f16x4_hi(h: uint16x8_t) -> float32x4_t {
    let r: float32x4_t;
    // SAFETY: register-only conversion available on every aarch64 CPU.
    unsafe {
        asm!(
            "fcvtl2 {r:v}.4s, {h:v}.8h",
            r = lateout(vreg) r,
            h = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    r
}

/// The little-endian f16 at `p`, as f32 (`fcvt`).
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn f16_ptr(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees 2 readable bytes at `p`.
    let h = unsafe { std::ptr::read_unaligned(p as *const u16) };
    let r: f32;
    // SAFETY: register-only conversion available on every aarch64 CPU.
    unsafe {
        asm!(
            "fmov {t:s}, {h:w}",
            "fcvt {r:s}, {t:h}",
            h = in(reg) u32::from(h),
            t = out(vreg) _,
            r = lateout(vreg) r,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    r
}

/// `acc + Σ a·b`, summed into four i32 lanes (which lane holds which products differs between
/// the flavours; callers only use the total or per-16-byte totals).
#[inline(always)]
pub(super) unsafe fn dot16<const DOT: bool>(
    acc: int32x4_t,
    a: int8x16_t,
    b: int8x16_t,
) -> int32x4_t {
    if DOT {
        // SAFETY: DOT is true only inside `dotprod` entry points (see the callers).
        unsafe { sdot(acc, a, b) }
    } else {
        let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
        let hi = vmull_high_s8(a, b);
        vpadalq_s16(vpadalq_s16(acc, lo), hi)
    }
}

/// See `super::dot_float`.
#[target_feature(enable = "neon")]
pub unsafe fn dot_float(format: WeightFormat, w: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    let mut acc = [vdupq_n_f32(0.0); 4];
    let mut i = 0;
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    // SAFETY (all loads below): `w` holds `n` elements of the format (checked by the caller's
    // WeightMatrix), `x` holds `n` f32; every load ends at or before element `i + 16 <= n`.
    unsafe {
        while i + 16 <= n {
            let wv: [float32x4_t; 4] = match format {
                WeightFormat::F32 => {
                    let p = wp.add(4 * i) as *const f32;
                    [
                        vld1q_f32(p),
                        vld1q_f32(p.add(4)),
                        vld1q_f32(p.add(8)),
                        vld1q_f32(p.add(12)),
                    ]
                }
                WeightFormat::F16 => {
                    let p = wp.add(2 * i) as *const u16;
                    let (a, b) = (vld1q_u16(p), vld1q_u16(p.add(8)));
                    [f16x4_lo(a), f16x4_hi(a), f16x4_lo(b), f16x4_hi(b)]
                }
                _ => {
                    let p = wp.add(2 * i) as *const u16;
                    let (a, b) = (vld1q_u16(p), vld1q_u16(p.add(8)));
                    let bf = |v: uint32x4_t| vreinterpretq_f32_u32(v);
                    [
                        bf(vshll_n_u16::<16>(vget_low_u16(a))),
                        bf(vshll_high_n_u16::<16>(a)),
                        bf(vshll_n_u16::<16>(vget_low_u16(b))),
                        bf(vshll_high_n_u16::<16>(b)),
                    ]
                }
            };
            for (j, a) in acc.iter_mut().enumerate() {
                *a = vfmaq_f32(*a, wv[j], vld1q_f32(xp.add(i + 4 * j)));
            }
            i += 16;
        }
    }
    let sum = vaddvq_f32(vaddq_f32(
        vaddq_f32(acc[0], acc[1]),
        vaddq_f32(acc[2], acc[3]),
    ));
    let tail = &w[i * format.block_bytes()..];
    sum + super::scalar::dot_float(format, tail, &x[i..])
}

/// Format codes for the const-generic kernels (one monomorphized loop per format).
pub(super) const Q4_0: u8 = 0;
pub(super) const Q4_1: u8 = 1;
pub(super) const Q5_0: u8 = 2;
pub(super) const Q5_1: u8 = 3;
pub(super) const Q8_0: u8 = 4;
pub(super) const IQ4_NL: u8 = 5;
pub(super) const MXFP4: u8 = 6;

/// Block bytes of format code `F`.
pub(super) const fn block_bytes(f: u8) -> usize {
    match f {
        Q4_0 => 18,
        Q4_1 => 20,
        Q5_0 => 22,
        Q5_1 => 24,
        IQ4_NL => 18,
        MXFP4 => 17,
        _ => 34,
    }
}

/// The format code of a 32-weight format.
pub(super) fn code(format: WeightFormat) -> u8 {
    match format {
        WeightFormat::Q4_0 => Q4_0,
        WeightFormat::Q4_1 => Q4_1,
        WeightFormat::Q5_0 => Q5_0,
        WeightFormat::Q5_1 => Q5_1,
        WeightFormat::Q8_0 => Q8_0,
        WeightFormat::IQ4_NL => IQ4_NL,
        WeightFormat::MXFP4 => MXFP4,
        other => unreachable!("{other} is not a 32-weight format"),
    }
}

/// Bits 0..16 of `bits` → 16 bytes, `0xFF` where the bit is set (bit j → byte j).
#[inline]
#[target_feature(enable = "neon")]
fn bits_16(bits: u32) -> uint8x16_t {
    let b = vcombine_u8(vdup_n_u8(bits as u8), vdup_n_u8((bits >> 8) as u8));
    // Byte j of the mask is 1 << (j % 8).
    let mask = vreinterpretq_u8_u64(vdupq_n_u64(0x8040_2010_0804_0201));
    vtstq_u8(b, mask)
}

/// One block of format `F` at `p` as 32 signed quants (weights 0..16, 16..32), scale and min:
/// weight `j` is `d * q[j] + m`.
#[inline(always)]
pub(super) unsafe fn legacy_block<const F: u8>(p: *const u8) -> (int8x16_t, int8x16_t, f32, f32) {
    let lo4 = vdupq_n_u8(0x0F);
    // SAFETY: the caller guarantees one whole block of format F at `p`; the offsets follow the
    // llama.cpp layouts (scale, [min], [high bits], quants).
    unsafe {
        match F {
            Q4_0 | Q4_1 => {
                let at = if F == Q4_0 { 2 } else { 4 };
                let v = vld1q_u8(p.add(at));
                let (l, h) = (vandq_u8(v, lo4), vshrq_n_u8::<4>(v));
                let (l, h) = (vreinterpretq_s8_u8(l), vreinterpretq_s8_u8(h));
                if F == Q4_0 {
                    let eight = vdupq_n_s8(8);
                    (vsubq_s8(l, eight), vsubq_s8(h, eight), f16_ptr(p), 0.0)
                } else {
                    (l, h, f16_ptr(p), f16_ptr(p.add(2)))
                }
            }
            Q5_0 | Q5_1 => {
                let (hat, at) = if F == Q5_0 { (2, 6) } else { (4, 8) };
                let qh = std::ptr::read_unaligned(p.add(hat) as *const u32);
                let v = vld1q_u8(p.add(at));
                let b16 = vdupq_n_u8(0x10);
                let l = vorrq_u8(vandq_u8(v, lo4), vandq_u8(bits_16(qh), b16));
                let h = vorrq_u8(vshrq_n_u8::<4>(v), vandq_u8(bits_16(qh >> 16), b16));
                let (l, h) = (vreinterpretq_s8_u8(l), vreinterpretq_s8_u8(h));
                if F == Q5_0 {
                    let sixteen = vdupq_n_s8(16);
                    (vsubq_s8(l, sixteen), vsubq_s8(h, sixteen), f16_ptr(p), 0.0)
                } else {
                    (l, h, f16_ptr(p), f16_ptr(p.add(2)))
                }
            }
            IQ4_NL | MXFP4 => {
                let (table, at, d) = if F == IQ4_NL {
                    (&crate::dequant::KVALUES_IQ4NL, 2, f16_ptr(p))
                } else {
                    (
                        &crate::dequant::KVALUES_MXFP4,
                        1,
                        crate::dequant::iq::e8m0_half(*p),
                    )
                };
                let t = vld1q_s8(table.as_ptr());
                let v = vld1q_u8(p.add(at));
                let (l, h) = (vandq_u8(v, lo4), vshrq_n_u8::<4>(v));
                (vqtbl1q_s8(t, l), vqtbl1q_s8(t, h), d, 0.0)
            }
            _ => (
                vld1q_s8(p.add(2) as *const i8),
                vld1q_s8(p.add(18) as *const i8),
                f16_ptr(p),
                0.0,
            ),
        }
    }
}

/// See `super::dot_q8_x4` (plain NEON).
#[target_feature(enable = "neon")]
pub unsafe fn dot_q8_multi<const N: usize>(
    format: WeightFormat,
    w: &[u8],
    xs: [&[BlockQ8]; N],
    out: &mut [f32; N],
) {
    // SAFETY: forwarded contract.
    unsafe { dot_q8_any::<false, N>(format, w, xs, out) }
}

/// See `super::dot_q8_x4` (`sdot`).
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn dot_q8_multi_dot<const N: usize>(
    format: WeightFormat,
    w: &[u8],
    xs: [&[BlockQ8]; N],
    out: &mut [f32; N],
) {
    // SAFETY: forwarded contract; this entry point has `dotprod` for DOT = true.
    unsafe { dot_q8_any::<true, N>(format, w, xs, out) }
}

#[inline(always)]
unsafe fn dot_q8_any<const DOT: bool, const N: usize>(
    format: WeightFormat,
    w: &[u8],
    xs: [&[BlockQ8]; N],
    out: &mut [f32; N],
) {
    // SAFETY: forwarded contract.
    unsafe {
        match code(format) {
            Q4_0 => dot_q8_impl::<DOT, Q4_0, N>(w, xs, out),
            Q4_1 => dot_q8_impl::<DOT, Q4_1, N>(w, xs, out),
            Q5_0 => dot_q8_impl::<DOT, Q5_0, N>(w, xs, out),
            Q5_1 => dot_q8_impl::<DOT, Q5_1, N>(w, xs, out),
            IQ4_NL => dot_q8_impl::<DOT, IQ4_NL, N>(w, xs, out),
            MXFP4 => dot_q8_impl::<DOT, MXFP4, N>(w, xs, out),
            _ => dot_q8_impl::<DOT, Q8_0, N>(w, xs, out),
        }
    }
}

#[inline(always)]
unsafe fn dot_q8_impl<const DOT: bool, const F: u8, const N: usize>(
    w: &[u8],
    xs: [&[BlockQ8]; N],
    out: &mut [f32; N],
) {
    let bb = block_bytes(F);
    let nb = w.len() / bb;
    for x in &xs {
        assert!(x.len() >= nb, "activation row shorter than the weight row");
    }
    let with_min = F == Q4_1 || F == Q5_1;
    let mut acc = [vdupq_n_f32(0.0); N];
    let mut summ = [0f32; N];
    let mut p = w.as_ptr();
    for i in 0..nb {
        // SAFETY: block i spans bytes [i*bb, (i+1)*bb) of `w` (nb = w.len() / bb); every xs[k]
        // has at least nb blocks (asserted); DOT only in `dotprod` entry points.
        unsafe {
            let (q0, q1, d, m) = legacy_block::<F>(p);
            for k in 0..N {
                let y = xs[k].get_unchecked(i);
                let y0 = vld1q_s8(y.qs.as_ptr());
                let y1 = vld1q_s8(y.qs.as_ptr().add(16));
                let s = dot16::<DOT>(dot16::<DOT>(vdupq_n_s32(0), q0, y0), q1, y1);
                acc[k] = vfmaq_n_f32(acc[k], vcvtq_f32_s32(s), d * y.d);
                if with_min {
                    summ[k] += m * y.s;
                }
            }
            p = p.add(bb);
        }
    }
    for k in 0..N {
        out[k] = vaddvq_f32(acc[k]) + summ[k];
    }
}

/// Split formats (`Q8`, `Q4`), `N` tokens at once (plain NEON); see `super::dot_split`.
#[target_feature(enable = "neon")]
pub unsafe fn dot_split_multi<const N: usize>(
    format: WeightFormat,
    w: &[u8],
    s: &[u8],
    xs: [&[BlockQ8]; N],
    out: &mut [f32; N],
) {
    // SAFETY: forwarded contract.
    unsafe { dot_split_impl::<false, N>(format, w, s, xs, out) }
}

/// Split formats (`Q8`, `Q4`), `N` tokens at once (`sdot`); see `super::dot_split`.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn dot_split_multi_dot<const N: usize>(
    format: WeightFormat,
    w: &[u8],
    s: &[u8],
    xs: [&[BlockQ8]; N],
    out: &mut [f32; N],
) {
    // SAFETY: forwarded contract; this entry point has `dotprod` for DOT = true.
    unsafe { dot_split_impl::<true, N>(format, w, s, xs, out) }
}

#[inline(always)]
unsafe fn dot_split_impl<const DOT: bool, const N: usize>(
    format: WeightFormat,
    w: &[u8],
    s: &[u8],
    xs: [&[BlockQ8]; N],
    out: &mut [f32; N],
) {
    let q8 = format == WeightFormat::Q8;
    let (bb, sb) = if q8 { (32, 4) } else { (16, 2) };
    let nb = (w.len() / bb).min(s.len() / sb);
    for x in &xs {
        assert!(x.len() >= nb, "activation row shorter than the weight row");
    }
    let mut acc = [vdupq_n_f32(0.0); N];
    for i in 0..nb {
        // SAFETY: block i spans bytes [i*bb, (i+1)*bb) of `w` and [i*sb, (i+1)*sb) of `s`
        // (nb is bounded by both lengths); every xs[k] has at least nb blocks (asserted); DOT
        // only in `dotprod` entry points.
        unsafe {
            let (q0, q1, d) = if q8 {
                let p = w.as_ptr().add(32 * i) as *const i8;
                (
                    vld1q_s8(p),
                    vld1q_s8(p.add(16)),
                    std::ptr::read_unaligned(s.as_ptr().add(4 * i) as *const f32),
                )
            } else {
                let v = vld1q_u8(w.as_ptr().add(16 * i));
                let eight = vdupq_n_s8(8);
                let l = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F)));
                let h = vreinterpretq_s8_u8(vshrq_n_u8::<4>(v));
                (
                    vsubq_s8(l, eight),
                    vsubq_s8(h, eight),
                    f16_ptr(s.as_ptr().add(2 * i)),
                )
            };
            for k in 0..N {
                let y = xs[k].get_unchecked(i);
                let y0 = vld1q_s8(y.qs.as_ptr());
                let y1 = vld1q_s8(y.qs.as_ptr().add(16));
                let p = dot16::<DOT>(dot16::<DOT>(vdupq_n_s32(0), q0, y0), q1, y1);
                acc[k] = vfmaq_n_f32(acc[k], vcvtq_f32_s32(p), d * y.d);
            }
        }
    }
    for k in 0..N {
        out[k] = vaddvq_f32(acc[k]);
    }
}

/// See `super::dot_kblock` (plain NEON).
#[target_feature(enable = "neon")]
pub unsafe fn dot_kblock(kb: &KBlock, y: &BlockQ8K) -> f32 {
    // SAFETY: DOT = false needs only NEON.
    unsafe { dot_kblock_impl::<false>(kb, y) }
}

/// See `super::dot_kblock` (`sdot`).
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn dot_kblock_dot(kb: &KBlock, y: &BlockQ8K) -> f32 {
    // SAFETY: this entry point has `dotprod` for DOT = true.
    unsafe { dot_kblock_impl::<true>(kb, y) }
}

#[inline(always)]
unsafe fn dot_kblock_impl<const DOT: bool>(kb: &KBlock, y: &BlockQ8K) -> f32 {
    let mut acc = vdupq_n_s32(0);
    let zero = vdupq_n_s32(0);
    for c in 0..4 {
        // SAFETY: groups 4c..4c+4 are bytes [64c, 64c + 64) < 256 of both quant arrays and
        // scales [4c, 4c + 4) < 16; DOT only in `dotprod` entry points.
        unsafe {
            let g = |j: usize| {
                let o = 64 * c + 16 * j;
                dot16::<DOT>(
                    zero,
                    vld1q_s8(kb.q.as_ptr().add(o)),
                    vld1q_s8(y.qs.as_ptr().add(o)),
                )
            };
            // Σ of each group of 16 in one lane each.
            let s = vpaddq_s32(vpaddq_s32(g(0), g(1)), vpaddq_s32(g(2), g(3)));
            let sc = vmovl_s16(vld1_s16(kb.sc.as_ptr().add(4 * c)));
            acc = vmlaq_s32(acc, s, sc);
        }
    }
    let sumi = vaddvq_s32(acc);
    let summ = if kb.dmin != 0.0 {
        // SAFETY: both arrays hold 16 i16.
        unsafe {
            let (m0, m1) = (vld1q_s16(kb.m.as_ptr()), vld1q_s16(kb.m.as_ptr().add(8)));
            let (s0, s1) = (
                vld1q_s16(y.bsums.as_ptr()),
                vld1q_s16(y.bsums.as_ptr().add(8)),
            );
            let a = vmlal_high_s16(vmull_s16(vget_low_s16(m0), vget_low_s16(s0)), m0, s0);
            let a = vmlal_s16(a, vget_low_s16(m1), vget_low_s16(s1));
            vaddvq_s32(vmlal_high_s16(a, m1, s1))
        }
    } else {
        0
    };
    y.d * (kb.d * sumi as f32 - kb.dmin * summ as f32)
}

/// Unpacks the quants of a Q4_K, Q5_K or Q6_K super-block with NEON (scales and mins are
/// decoded by the scalar unpacker). Other formats: `false`.
#[target_feature(enable = "neon")]
pub unsafe fn unpack_quants(format: WeightFormat, b: &[u8], q: &mut [i8; 256]) -> bool {
    let lo = vdupq_n_u8(0x0F);
    let out = q.as_mut_ptr();
    let bp = b.as_ptr();
    let st = |o: usize, v: uint8x16_t| {
        // SAFETY: o + 16 <= 256 at every call below.
        unsafe { vst1q_s8(out.add(o), vreinterpretq_s8_u8(v)) }
    };
    // SAFETY (all loads): `b` is one whole super-block of `format` (checked by the caller's
    // WeightMatrix); offsets follow the Q4_K/Q5_K/Q6_K layouts.
    unsafe {
        match format {
            WeightFormat::Q4K | WeightFormat::Q5K => {
                let (qs, qh) = if format == WeightFormat::Q4K {
                    (bp.add(16), None)
                } else {
                    (
                        bp.add(48),
                        Some([vld1q_u8(bp.add(16)), vld1q_u8(bp.add(32))]),
                    )
                };
                let b16 = vdupq_n_u8(0x10);
                for p in 0..4 {
                    for half in 0..2 {
                        let v = vld1q_u8(qs.add(32 * p + 16 * half));
                        let mut l = vandq_u8(v, lo);
                        let mut h = vshrq_n_u8::<4>(v);
                        if let Some(bits) = qh {
                            // Bit 2p of qh → bit 4 of the low quant, bit 2p+1 → of the high.
                            let hb = bits[half];
                            let sl = vdupq_n_s8(4 - 2 * p as i8);
                            let sh = vdupq_n_s8(3 - 2 * p as i8);
                            l = vorrq_u8(l, vandq_u8(vshlq_u8(hb, sl), b16));
                            h = vorrq_u8(h, vandq_u8(vshlq_u8(hb, sh), b16));
                        }
                        st(64 * p + 16 * half, l);
                        st(64 * p + 32 + 16 * half, h);
                    }
                }
                true
            }
            WeightFormat::Q6K => {
                let m30 = vdupq_n_u8(0x30);
                let m32 = vdupq_n_u8(32);
                for h in 0..2 {
                    for half in 0..2 {
                        let o = 16 * half;
                        let a = vld1q_u8(bp.add(64 * h + o));
                        let c = vld1q_u8(bp.add(64 * h + 32 + o));
                        let hb = vld1q_u8(bp.add(128 + 32 * h + o));
                        let q0 = vorrq_u8(vandq_u8(a, lo), vandq_u8(vshlq_n_u8::<4>(hb), m30));
                        let q1 = vorrq_u8(vandq_u8(c, lo), vandq_u8(vshlq_n_u8::<2>(hb), m30));
                        let q2 = vorrq_u8(vshrq_n_u8::<4>(a), vandq_u8(hb, m30));
                        let q3 = vorrq_u8(vshrq_n_u8::<4>(c), vandq_u8(vshrq_n_u8::<2>(hb), m30));
                        let base = 128 * h + o;
                        st(base, vsubq_u8(q0, m32));
                        st(base + 32, vsubq_u8(q1, m32));
                        st(base + 64, vsubq_u8(q2, m32));
                        st(base + 96, vsubq_u8(q3, m32));
                    }
                }
                true
            }
            _ => false,
        }
    }
}
