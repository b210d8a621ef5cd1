//! Float formats: F32, F16, BF16 (one weight per "block").

/// Little-endian f32 bytes → f32.
pub(super) fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(4).zip(dst.iter_mut()) {
        *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

/// Little-endian IEEE f16 bytes → f32 (exact).
pub(super) fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(2).zip(dst.iter_mut()) {
        *y = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
    }
}

/// Little-endian bf16 bytes → f32: the 16 bits become the upper half of the f32 (exact, NaN
/// payloads kept, as ggml does).
pub(super) fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(2).zip(dst.iter_mut()) {
        *y = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
    }
}

/// Reads the little-endian f16 at `b[i..i + 2]` as f32.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}
