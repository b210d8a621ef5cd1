// Per weight format, the pieces of `matvec.wgsl`: QK weights per block, CPB chunks per block,
// `xload(x4, c)` (the activations of chunk c; x4 is the row's first vec4) and `wdot(rb, c, x)`
// (chunk c of the row whose bytes start at rb, dotted with x). Weights are decoded to the values
// the CPU dequantizes (oxinfer_kernels::dequant). Each block is marked `//@FORMAT` … `//@END`;
// formats that read 32-bit words get `words.wgsl` spliced in before their block, and the
// 32-weight formats the `//@B32` block (one chunk per block: its 32 activations).
//@B32
const QK: u32 = 32u;
const CPB: u32 = 1u;
fn xload(x4: u32, c: u32) -> X8 { return x16x2(x4 + 8u * c, x4 + 8u * c + 4u); }
//@END
//@Q4_0
fn wdot(rb: u32, c: u32, x: X8) -> f32 {
    let b = rb + c * 18u;
    let d = wf16(b);
    let q = vec4<u32>(wword(b + 2u), wword(b + 6u), wword(b + 10u), wword(b + 14u));
    return affine_dot(nibbles(q), x, vec2<f32>(d, -8.0 * d), vec2<f32>(d, -8.0 * d));
}
//@END
//@Q4_1
fn wdot(rb: u32, c: u32, x: X8) -> f32 {
    let b = rb + c * 20u;
    let dm = unpack2x16float(wword(b));
    let q = vec4<u32>(wword(b + 4u), wword(b + 8u), wword(b + 12u), wword(b + 16u));
    return affine_dot(nibbles(q), x, dm, dm);
}
//@END
//@Q5_0
fn wdot(rb: u32, c: u32, x: X8) -> f32 {
    let b = rb + c * 22u;
    let d = wf16(b);
    let q = vec4<u32>(wword(b + 6u), wword(b + 10u), wword(b + 14u), wword(b + 18u));
    return affine_dot(fifth_bits(nibbles(q), wword(b + 2u)), x, vec2<f32>(d, -16.0 * d),
                      vec2<f32>(d, -16.0 * d));
}
//@END
//@Q5_1
fn wdot(rb: u32, c: u32, x: X8) -> f32 {
    let b = rb + c * 24u;
    let dm = unpack2x16float(wword(b));
    let q = vec4<u32>(wword(b + 8u), wword(b + 12u), wword(b + 16u), wword(b + 20u));
    return affine_dot(fifth_bits(nibbles(q), wword(b + 4u)), x, dm, dm);
}
//@END
//@Q8_0
fn wdot(rb: u32, c: u32, x: X8) -> f32 {
    let b = rb + c * 34u;
    let d = wf16(b);
    let q = X8(i8x4(wword(b + 2u)), i8x4(wword(b + 6u)), i8x4(wword(b + 10u)),
               i8x4(wword(b + 14u)), i8x4(wword(b + 18u)), i8x4(wword(b + 22u)),
               i8x4(wword(b + 26u)), i8x4(wword(b + 30u)));
    return affine_dot(q, x, vec2<f32>(d, 0.0), vec2<f32>(d, 0.0));
}
//@END
//@Q4K
// Blocks of 144 bytes (16-byte aligned in every row): d, dmin, 12 scale bytes, then 128 bytes
// of nibbles. Chunk j of a block is 16 bytes at 16 + 16·j: the low nibbles are weights
// 64·(j/2) + 16·(j%2) + 0..15 (sub-block j/2·2), the high nibbles the same + 32 (the next).
@group(0) @binding(3) var<storage, read> W4: array<vec4<u32>>;
const QK: u32 = 256u;
const CPB: u32 = 8u;
fn xload(x4: u32, c: u32) -> X8 {
    let j = c % 8u;
    let at = x4 + 64u * (c / 8u) + 16u * (j / 2u) + 4u * (j % 2u);
    return x16x2(at, at + 8u);
}
// Scale byte i of a block's header words (bytes 4..15 of the block are hd.y, hd.z, hd.w).
fn kbyte(hd: vec4<u32>, i: u32) -> u32 { return (hd[1u + i / 4u] >> (8u * (i % 4u))) & 0xffu; }
// 6-bit scale and min of sub-block s (get_scale_min_k4).
fn kscale_min(hd: vec4<u32>, s: u32) -> vec2<f32> {
    if (s < 4u) {
        return vec2<f32>(f32(kbyte(hd, s) & 63u), f32(kbyte(hd, s + 4u) & 63u));
    }
    let sc = (kbyte(hd, s + 4u) & 15u) | ((kbyte(hd, s - 4u) >> 6u) << 4u);
    let mn = (kbyte(hd, s + 4u) >> 4u) | ((kbyte(hd, s) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(mn));
}
fn wdot(rb: u32, c: u32, x: X8) -> f32 {
    let i = rb / 16u + 9u * (c / 8u);
    let j = c % 8u;
    let hd = W4[i];
    let q = W4[i + 1u + j];
    let dm = unpack2x16float(hd.x);
    let a = kscale_min(hd, j & 6u);
    let b = kscale_min(hd, (j & 6u) + 1u);
    let lo = vec2<f32>(dm.x * a.x, -(dm.y * a.y));
    let hi = vec2<f32>(dm.x * b.x, -(dm.y * b.y));
    return affine_dot(nibbles(q), x, lo, hi);
}
//@END
//@Q6K
// Blocks of 210 bytes: ql[128], qh[64], 16 int8 scales, d. Chunk j (16 per block) takes bytes
// 4·(j%8) .. +4 of each quarter of half j/8: 16 weights, 4 at each of the offsets 0, 32, 64, 96.
const QK: u32 = 256u;
const CPB: u32 = 16u;
fn xload(x4: u32, c: u32) -> X8 {
    let j = c % 16u;
    let at = x4 + 64u * (c / 16u) + 32u * (j / 8u) + j % 8u;
    let z = vec4<f32>();
    return X8(X4[at], X4[at + 8u], X4[at + 16u], X4[at + 24u], z, z, z, z);
}
fn wdot(rb: u32, c: u32, x: X8) -> f32 {
    let b = rb + 210u * (c / 16u);
    let j = c % 16u;
    let half = j / 8u;
    let l4 = 4u * (j % 8u);
    let qa = wword(b + 64u * half + l4);
    let qb = wword(b + 64u * half + 32u + l4);
    let qh = wword(b + 128u + 32u * half + l4);
    // Scale bytes s, s + 2 (first word) and s + 4, s + 6 (second) of the half, s = l4 / 16.
    let sh = 8u * (l4 / 16u);
    let s0 = wword(b + 192u + 8u * half) >> sh;
    let s1 = wword(b + 196u + 8u * half) >> sh;
    let d = wf16(b + 208u);
    let ds = d * vec4<f32>(i8f(s0), i8f(s0 >> 16u), i8f(s1), i8f(s1 >> 16u));
    let m = 0x0f0f0f0fu;
    let t = 0x03030303u;
    let c0 = bytes4((qa & m) | ((qh & t) << 4u)) - 32.0;
    let c1 = bytes4((qb & m) | (((qh >> 2u) & t) << 4u)) - 32.0;
    let c2 = bytes4(((qa >> 4u) & m) | (((qh >> 4u) & t) << 4u)) - 32.0;
    let c3 = bytes4(((qb >> 4u) & m) | (((qh >> 6u) & t) << 4u)) - 32.0;
    return dot(ds.x * c0, x.l0) + dot(ds.y * c1, x.l1) + dot(ds.z * c2, x.l2)
         + dot(ds.w * c3, x.l3);
}
//@END
