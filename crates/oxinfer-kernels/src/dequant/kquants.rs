//! K-quants: 256-weight super-blocks Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
//!
//! Each follows llama.cpp's `dequantize_row_q*_K` loop structure so the float operations (and
//! thus the rounding) are the same.

use super::float::f16_at;

/// Q2_K {u8 scales[16]; u8 qs[64]; f16 d, dmin}: 16 groups of 16 weights;
/// `y = d * (sc & 15) * q - dmin * (sc >> 4)`, 2-bit `q`.
///
/// Weights `128 h + 32 s + l` (h < 2, s < 4, l < 32) are bits `2s..2s+2` of `qs[32 h + l]`;
/// group `8 h + 2 s + l / 16` gives the scale byte.
pub(super) fn block_q2_k(b: &[u8; 84], y: &mut [f32; 256]) {
    let scales = &b[0..16];
    let qs = &b[16..80];
    let d = f16_at(b, 80);
    let dmin = f16_at(b, 82);
    let mut is = 0;
    for h in 0..2 {
        let q = &qs[32 * h..32 * h + 32];
        for s in 0..4 {
            let shift = 2 * s;
            for half in 0..2 {
                let sc = scales[is];
                is += 1;
                let dl = d * (sc & 0x0F) as f32;
                let ml = dmin * (sc >> 4) as f32;
                let base = 128 * h + 32 * s + 16 * half;
                for l in 0..16 {
                    let qv = (q[16 * half + l] >> shift) & 3;
                    y[base + l] = dl * qv as f32 - ml;
                }
            }
        }
    }
}

/// The 16 six-bit scales of Q3_K / (scales, mins) of Q4_K–Q5_K packing.
///
/// Q3_K: scale `i` has low 4 bits from nibble `i / 8` of byte `i % 8` and high 2 bits from bits
/// `2 (i / 4)..` of byte `8 + i % 4`; the value is that 6-bit number minus 32.
pub(crate) fn q3_k_scales(s: &[u8]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let low = if i < 8 { s[i] & 0x0F } else { s[i - 8] >> 4 };
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        *o = ((low | (high << 4)) as i8) - 32;
    }
    out
}

/// Q3_K {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}: 16 groups of 16 weights;
/// `y = d * (sc - 32) * (q - 4 * !hbit)`, 2 low bits from `qs`, high bit from `hmask`.
///
/// Weight `128 h + 32 s + l` uses bits `2s..2s+2` of `qs[32 h + l]` and bit `4 h + s` of
/// `hmask[l]` (a set bit means no `-4` offset).
pub(super) fn block_q3_k(b: &[u8; 110], y: &mut [f32; 256]) {
    let hmask = &b[0..32];
    let qs = &b[32..96];
    let scales = q3_k_scales(&b[96..108]);
    let d_all = f16_at(b, 108);
    let mut is = 0;
    let mut m: u8 = 1;
    for h in 0..2 {
        let q = &qs[32 * h..32 * h + 32];
        for s in 0..4 {
            let shift = 2 * s;
            for half in 0..2 {
                let dl = d_all * (scales[is] as i32) as f32;
                is += 1;
                let base = 128 * h + 32 * s + 16 * half;
                for l in 0..16 {
                    let k = 16 * half + l;
                    let low = ((q[k] >> shift) & 3) as i8;
                    let off = if hmask[k] & m != 0 { 0 } else { 4 };
                    y[base + l] = dl * (low - off) as f32;
                }
            }
            m <<= 1;
        }
    }
}

/// Scale and min `j` (< 8) of the 12-byte Q4_K/Q5_K packing (llama.cpp `get_scale_min_k4`).
#[inline(always)]
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]}: 8 groups of 32 weights;
/// `y = d * sc * q - dmin * m`, 4-bit `q`.
///
/// Weights `64 p + l` and `64 p + 32 + l` (p < 4, l < 32) are the low and high nibble of
/// `qs[32 p + l]`, groups `2 p` and `2 p + 1`.
pub(super) fn block_q4_k(b: &[u8; 144], y: &mut [f32; 256]) {
    let d = f16_at(b, 0);
    let min = f16_at(b, 2);
    let scales = &b[4..16];
    let qs = &b[16..144];
    for p in 0..4 {
        let (sc, m) = scale_min_k4(2 * p, scales);
        let d1 = d * sc as f32;
        let m1 = min * m as f32;
        let (sc, m) = scale_min_k4(2 * p + 1, scales);
        let d2 = d * sc as f32;
        let m2 = min * m as f32;
        let q = &qs[32 * p..32 * p + 32];
        for l in 0..32 {
            y[64 * p + l] = d1 * (q[l] & 0x0F) as f32 - m1;
        }
        for l in 0..32 {
            y[64 * p + 32 + l] = d2 * (q[l] >> 4) as f32 - m2;
        }
    }
}

/// Q5_K {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: as Q4_K with a fifth bit:
/// bit `2 p` (low nibble) / `2 p + 1` (high nibble) of `qh[l]` adds 16.
pub(super) fn block_q5_k(b: &[u8; 176], y: &mut [f32; 256]) {
    let d = f16_at(b, 0);
    let min = f16_at(b, 2);
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..176];
    for p in 0..4 {
        let (sc, m) = scale_min_k4(2 * p, scales);
        let d1 = d * sc as f32;
        let m1 = min * m as f32;
        let (sc, m) = scale_min_k4(2 * p + 1, scales);
        let d2 = d * sc as f32;
        let m2 = min * m as f32;
        let u1 = 1u8 << (2 * p);
        let u2 = 2u8 << (2 * p);
        let ql = &qs[32 * p..32 * p + 32];
        for l in 0..32 {
            let hi = if qh[l] & u1 != 0 { 16 } else { 0 };
            y[64 * p + l] = d1 * ((ql[l] & 0x0F) + hi) as f32 - m1;
        }
        for l in 0..32 {
            let hi = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[64 * p + 32 + l] = d2 * ((ql[l] >> 4) + hi) as f32 - m2;
        }
    }
}

/// Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: 16 groups of 16 weights;
/// `y = d * sc * (q - 32)`, 6-bit `q` = 4 bits from `ql` + 2 bits from `qh`.
///
/// In half `h` (128 weights), for l < 32: weights `l`, `l + 32`, `l + 64`, `l + 96` take the
/// low nibble of `ql[64h + l]`, low nibble of `ql[64h + 32 + l]`, high nibble of `ql[64h + l]`,
/// high nibble of `ql[64h + 32 + l]`, with bits `0..2`, `2..4`, `4..6`, `6..8` of `qh[32h + l]`.
pub(super) fn block_q6_k(b: &[u8; 210], y: &mut [f32; 256]) {
    let ql_all = &b[0..128];
    let qh_all = &b[128..192];
    let sc_all = &b[192..208];
    let d = f16_at(b, 208);
    for h in 0..2 {
        let ql = &ql_all[64 * h..64 * h + 64];
        let qh = &qh_all[32 * h..32 * h + 32];
        let sc = &sc_all[8 * h..8 * h + 8];
        let yh = &mut y[128 * h..128 * h + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i8 - 32;
            let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            yh[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            yh[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            yh[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            yh[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}

/// Q8_K {f32 d; i8 qs[256]; i16 bsums[16]}: `y = d * q` (`bsums`, the sums of groups of 16
/// quants, are not needed to dequantize).
pub(super) fn block_q8_k(b: &[u8; 292], y: &mut [f32; 256]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for (yj, &q) in y.iter_mut().zip(&b[4..260]) {
        *yj = d * q as i8 as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q3_k_scale_unpacking_matches_llama_cpp_bit_twiddling() {
        // llama.cpp unpacks with u32 masks; check the per-index formula against it.
        let mut s = [0u8; 12];
        for (i, v) in s.iter_mut().enumerate() {
            *v = (i as u8).wrapping_mul(97).wrapping_add(13);
        }
        let mut aux = [0u32; 4];
        for (i, a) in aux.iter_mut().take(3).enumerate() {
            *a = u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
        }
        let (kmask1, kmask2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
        let tmp = aux[2];
        aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
        aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
        aux[0] = (aux[0] & kmask2) | ((tmp & kmask1) << 4);
        aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
        let bytes: Vec<i8> = aux
            .iter()
            .flat_map(|a| a.to_le_bytes())
            .map(|b| b as i8)
            .collect();
        let ours = q3_k_scales(&s);
        for i in 0..16 {
            assert_eq!(ours[i], bytes[i] - 32, "scale {i}");
        }
    }
}
