//! oxinfer's split formats: quants and per-32 scales in two buffers (see `format.rs`).

/// Q8: `y = d * q`, i8 `q`, one little-endian f32 `d` per 32 weights. Sizes checked by the caller.
pub(super) fn dequantize_q8(qs: &[u8], scales: &[u8], dst: &mut [f32]) {
    for ((q, s), y) in qs
        .chunks_exact(32)
        .zip(scales.chunks_exact(4))
        .zip(dst.chunks_exact_mut(32))
    {
        let d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        for (yj, &qj) in y.iter_mut().zip(q) {
            *yj = qj as i8 as f32 * d;
        }
    }
}

/// Q4: `y = d * (q - 8)`; byte `j` of a block holds weight `j` (low nibble) and `j + 16` (high
/// nibble); one little-endian f16 `d` per 32 weights. Sizes checked by the caller.
pub(super) fn dequantize_q4(qs: &[u8], scales: &[u8], dst: &mut [f32]) {
    for ((q, s), y) in qs
        .chunks_exact(16)
        .zip(scales.chunks_exact(2))
        .zip(dst.chunks_exact_mut(32))
    {
        let d = half::f16::from_le_bytes([s[0], s[1]]).to_f32();
        for j in 0..16 {
            y[j] = ((q[j] & 0x0F) as i32 - 8) as f32 * d;
            y[j + 16] = ((q[j] >> 4) as i32 - 8) as f32 * d;
        }
    }
}
