//! aarch64 int8 matrix-multiply kernels (`smmla`, Armv8.6 `i8mm`): two weight rows against
//! pairs of tokens. One `smmla` multiplies a 2×8 block of weights (8 bytes of each row) by the
//! transpose of a 2×8 block of activations (8 bytes of each token) into 2×2 i32 sums, twice the
//! work of an `sdot` per instruction, so it pays only when two rows meet two tokens (prefill).
#![cfg(target_arch = "aarch64")]

use super::neon::{block_bytes, code, legacy_block, IQ4_NL, MXFP4, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
use crate::format::WeightFormat;
use crate::q8::BlockQ8;
use std::arch::aarch64::*;
use std::arch::asm;

/// `acc + a · bᵀ` with `a`, `b` 2×8 int8 (row-major, one row per 64-bit half) and `acc` 2×2
/// i32: lanes `[a0·b0, a0·b1, a1·b0, a1·b1]` (`smmla`).
#[inline]
#[target_feature(enable = "neon,i8mm")]
fn smmla(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: register-only arithmetic; the enclosing function requires `i8mm`.
    unsafe {
        asm!(
            "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// The first 8 bytes of `a` and of `b`, then the last 8 of each: two 2×8 blocks.
#[inline]
#[target_feature(enable = "neon")]
fn rows2(a: int8x16_t, b: int8x16_t) -> (int8x16_t, int8x16_t) {
    let (a, b) = (vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b));
    (
        vreinterpretq_s8_s64(vzip1q_s64(a, b)),
        vreinterpretq_s8_s64(vzip2q_s64(a, b)),
    )
}

/// See `super::dot_q8_2x4`: `out[r][k]` = row `w[r]` · token `xs[k]`.
#[target_feature(enable = "neon,dotprod,i8mm")]
pub unsafe fn dot_q8_2x4(
    format: WeightFormat,
    w: [&[u8]; 2],
    xs: [&[BlockQ8]; 4],
    out: &mut [[f32; 4]; 2],
) {
    // SAFETY: forwarded contract; this entry point has `i8mm`.
    unsafe {
        match code(format) {
            Q4_0 => impl_2x4::<Q4_0>(w, xs, out),
            Q4_1 => impl_2x4::<Q4_1>(w, xs, out),
            Q5_0 => impl_2x4::<Q5_0>(w, xs, out),
            Q5_1 => impl_2x4::<Q5_1>(w, xs, out),
            IQ4_NL => impl_2x4::<IQ4_NL>(w, xs, out),
            MXFP4 => impl_2x4::<MXFP4>(w, xs, out),
            _ => impl_2x4::<Q8_0>(w, xs, out),
        }
    }
}

#[inline(always)]
unsafe fn impl_2x4<const F: u8>(w: [&[u8]; 2], xs: [&[BlockQ8]; 4], out: &mut [[f32; 4]; 2]) {
    let bb = block_bytes(F);
    let nb = w[0].len() / bb;
    assert_eq!(w[0].len(), w[1].len(), "weight rows of different lengths");
    for x in &xs {
        assert!(x.len() >= nb, "activation row shorter than the weight row");
    }
    let with_min = F == Q4_1 || F == Q5_1;
    // acc[t] holds token pair (2t, 2t+1): lanes [r0·a, r0·b, r1·a, r1·b].
    let mut acc = [vdupq_n_f32(0.0); 2];
    let mut accm = [vdupq_n_f32(0.0); 2];
    let (mut p0, mut p1) = (w[0].as_ptr(), w[1].as_ptr());
    for i in 0..nb {
        // SAFETY: block i spans bytes [i*bb, (i+1)*bb) of both rows (equal lengths, asserted);
        // every xs[k] has at least nb blocks (asserted); this code runs only inside the `i8mm`
        // entry point above.
        unsafe {
            let (a0, a1, da, ma) = legacy_block::<F>(p0);
            let (b0, b1, db, mb) = legacy_block::<F>(p1);
            let (w0, w1) = rows2(a0, b0);
            let (w2, w3) = rows2(a1, b1);
            let dw = vcombine_f32(vdup_n_f32(da), vdup_n_f32(db));
            let mw = vcombine_f32(vdup_n_f32(ma), vdup_n_f32(mb));
            for t in 0..2 {
                let (ya, yb) = (xs[2 * t].get_unchecked(i), xs[2 * t + 1].get_unchecked(i));
                let (y0, y1) = rows2(vld1q_s8(ya.qs.as_ptr()), vld1q_s8(yb.qs.as_ptr()));
                let (y2, y3) = rows2(
                    vld1q_s8(ya.qs.as_ptr().add(16)),
                    vld1q_s8(yb.qs.as_ptr().add(16)),
                );
                let mut s = smmla(vdupq_n_s32(0), w0, y0);
                s = smmla(s, w1, y1);
                s = smmla(s, w2, y2);
                s = smmla(s, w3, y3);
                let dy = [ya.d, yb.d, ya.d, yb.d];
                let scale = vmulq_f32(dw, vld1q_f32(dy.as_ptr()));
                acc[t] = vfmaq_f32(acc[t], vcvtq_f32_s32(s), scale);
                if with_min {
                    let sy = [ya.s, yb.s, ya.s, yb.s];
                    accm[t] = vfmaq_f32(accm[t], mw, vld1q_f32(sy.as_ptr()));
                }
            }
            p0 = p0.add(bb);
            p1 = p1.add(bb);
        }
    }
    for t in 0..2 {
        let mut lanes = [0f32; 4];
        // SAFETY: `lanes` holds 4 f32.
        unsafe { vst1q_f32(lanes.as_mut_ptr(), vaddq_f32(acc[t], accm[t])) };
        out[0][2 * t] = lanes[0];
        out[0][2 * t + 1] = lanes[1];
        out[1][2 * t] = lanes[2];
        out[1][2 * t + 1] = lanes[3];
    }
}
