//! Legacy 32-weight blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//!
//! In the 4/5-bit formats, byte `qs[j]` holds weight `j` in its low nibble and weight `j + 16`
//! in its high nibble; in Q5, bit `j` of the little-endian u32 `qh` is the fifth bit of weight `j`.

use super::float::f16_at;

/// Q4_0 {f16 d; u8 qs[16]}: `y = d * (q - 8)`.
pub(super) fn block_q4_0(b: &[u8; 18], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        let x0 = (qs[j] & 0x0F) as i32 - 8;
        let x1 = (qs[j] >> 4) as i32 - 8;
        y[j] = x0 as f32 * d;
        y[j + 16] = x1 as f32 * d;
    }
}

/// Q4_1 {f16 d, m; u8 qs[16]}: `y = d * q + m`.
pub(super) fn block_q4_1(b: &[u8; 20], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qs = &b[4..20];
    for j in 0..16 {
        let x0 = (qs[j] & 0x0F) as f32;
        let x1 = (qs[j] >> 4) as f32;
        y[j] = x0 * d + m;
        y[j + 16] = x1 * d + m;
    }
}

/// Q5_0 {f16 d; u8 qh[4]; u8 qs[16]}: `y = d * (q - 16)`.
pub(super) fn block_q5_0(b: &[u8; 22], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + 16)) & 1) << 4;
        let x0 = ((qs[j] & 0x0F) as u32 | h0) as i32 - 16;
        let x1 = ((qs[j] >> 4) as u32 | h1) as i32 - 16;
        y[j] = x0 as f32 * d;
        y[j + 16] = x1 as f32 * d;
    }
}

/// Q5_1 {f16 d, m; u8 qh[4]; u8 qs[16]}: `y = d * q + m`.
pub(super) fn block_q5_1(b: &[u8; 24], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for j in 0..16 {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + 16)) & 1) << 4;
        let x0 = ((qs[j] & 0x0F) as u32 | h0) as f32;
        let x1 = ((qs[j] >> 4) as u32 | h1) as f32;
        y[j] = x0 * d + m;
        y[j + 16] = x1 * d + m;
    }
}

/// Q8_0 {f16 d; i8 qs[32]}: `y = d * q`.
pub(super) fn block_q8_0(b: &[u8; 34], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    for (yj, &q) in y.iter_mut().zip(&b[2..34]) {
        *yj = q as i8 as f32 * d;
    }
}
