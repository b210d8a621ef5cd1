// The weight bytes as 32-bit words (binding 3) and readers of bytes, unaligned words, f16 and
// int8 values in them: spliced into the matmul and into the matvec of formats that read words.
@group(0) @binding(3) var<storage, read> W: array<u32>;
fn wbyte(o: u32) -> u32 { return (W[o >> 2u] >> ((o & 3u) * 8u)) & 0xffu; }
// The four bytes at byte offset o (any alignment) as one little-endian word: one load where o
// is a multiple of 4, else two and a funnel shift. (The word past the buffer's end that an
// unaligned read of its last bytes touches is clamped by WGSL's bounds rules; its bytes are
// shifted out.)
fn wword(o: u32) -> u32 {
    let i = o >> 2u;
    let s = (o & 3u) * 8u;
    let hi = select(W[i + 1u] << (32u - s), 0u, s == 0u);
    return (W[i] >> s) | hi;
}
// The 5-bit codes of weights j and j + 16 of a Q5_0/Q5_1 block: the low and high nibble of v's
// low byte, with bits j and j + 16 of the block's qh word on top.
fn q5_pair(v: u32, qh: u32, j: u32) -> vec2<f32> {
    let lo = (v & 15u) | (((qh >> j) & 1u) << 4u);
    let hi = ((v >> 4u) & 15u) | (((qh >> (j + 16u)) & 1u) << 4u);
    return vec2<f32>(f32(lo), f32(hi));
}
fn wf16(o: u32) -> f32 { return unpack2x16float(wword(o) & 0xffffu).x; }
fn i8f(b: u32) -> f32 { return f32(bitcast<i32>(b << 24u) >> 24u); }
