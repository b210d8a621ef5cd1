// y[n] = Σ_k w[n][k] · x[k] for one activation row (a decode step). A row's quant blocks are cut
// into chunks (CPB per block of QK weights, spliced in per format with `xload` and `wdot`). A
// workgroup of WG threads is cut into groups of L lanes (a power of two, about the chunks of a
// row, at most WG); each group takes MR output rows: lane i takes chunks i, i + L, …, loads each
// chunk's activations once (`xload`) and dots them with that chunk of its MR rows (`wdot`), so
// neighbouring lanes read neighbouring bytes of a row, each weight byte once, with the decoded
// values in registers. The sums per lane are reduced over the group: with subgroup shuffles
// inside each subgroup, then over the group's subgroups through workgroup memory (subgroups are
// taken to be runs of local_invocation_index), or without subgroups by a tree in workgroup
// memory.
// Params: 0 x offset (A, a multiple of 4), 1 y offset (B), 2 n, 3 k, 5 row bytes of W, 8 L.
@group(0) @binding(1) var<storage, read_write> X4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> B: array<f32>;

// 32 activations (or weight codes) of one chunk: l0..l3 and h0..h3 as the format pairs them.
struct X8 {
    l0: vec4<f32>, l1: vec4<f32>, l2: vec4<f32>, l3: vec4<f32>,
    h0: vec4<f32>, h1: vec4<f32>, h2: vec4<f32>, h3: vec4<f32>,
}
// Activations: 16 from vec4 index lo, 16 from hi.
fn x16x2(lo: u32, hi: u32) -> X8 {
    return X8(X4[lo], X4[lo + 1u], X4[lo + 2u], X4[lo + 3u],
              X4[hi], X4[hi + 1u], X4[hi + 2u], X4[hi + 3u]);
}
// The 4-bit fields of q at bits sh, sh + 8, sh + 16, sh + 24.
fn nib4(q: u32, sh: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(q) >> vec4<u32>(sh, sh + 8u, sh + 16u, sh + 24u)) & vec4<u32>(15u));
}
// The four bytes of q, unsigned.
fn bytes4(q: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(q) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u));
}
// The four bytes of q as int8.
fn i8x4(q: u32) -> vec4<f32> {
    return vec4<f32>((vec4<i32>(bitcast<i32>(q)) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}
// Low nibbles of the 16 bytes q as codes l0..l3, high nibbles as h0..h3.
fn nibbles(q: vec4<u32>) -> X8 {
    return X8(nib4(q.x, 0u), nib4(q.y, 0u), nib4(q.z, 0u), nib4(q.w, 0u),
              nib4(q.x, 4u), nib4(q.y, 4u), nib4(q.z, 4u), nib4(q.w, 4u));
}
// 16 per set bit of qh at bits at .. at + 3.
fn hbits(qh: u32, at: u32) -> vec4<f32> {
    let v = (vec4<u32>(qh) >> vec4<u32>(at, at + 1u, at + 2u, at + 3u)) & vec4<u32>(1u);
    return vec4<f32>(v * 16u);
}
// Q5 codes: bit j of qh on top of weight j's nibble (l: weights 0..15, h: 16..31).
fn fifth_bits(q: X8, qh: u32) -> X8 {
    return X8(q.l0 + hbits(qh, 0u), q.l1 + hbits(qh, 4u), q.l2 + hbits(qh, 8u),
              q.l3 + hbits(qh, 12u), q.h0 + hbits(qh, 16u), q.h1 + hbits(qh, 20u),
              q.h2 + hbits(qh, 24u), q.h3 + hbits(qh, 28u));
}
// Σ (lo.x · code + lo.y) · x over l0..l3 plus the same with hi over h0..h3: the weights decoded
// as the CPU dequantizes them (scale · code + offset), then dotted.
fn affine_dot(q: X8, x: X8, lo: vec2<f32>, hi: vec2<f32>) -> f32 {
    let a = dot(lo.x * q.l0 + lo.y, x.l0) + dot(lo.x * q.l1 + lo.y, x.l1)
          + dot(lo.x * q.l2 + lo.y, x.l2) + dot(lo.x * q.l3 + lo.y, x.l3);
    let b = dot(hi.x * q.h0 + hi.y, x.h0) + dot(hi.x * q.h1 + hi.y, x.h1)
          + dot(hi.x * q.h2 + hi.y, x.h2) + dot(hi.x * q.h3 + hi.y, x.h3);
    return a + b;
}

//FORMAT

// WG (threads per workgroup) and MR (rows per lane group, at most 4), from kernels.rs.
//SHAPE
var<workgroup> red: array<vec4<f32>, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32
        //SUBGROUP_ARGS
        ) {
    let n_out = pu(2u);
    let rb = pu(5u);
    let lanes = pu(8u);
    let first = flat(wid, nwg) * (WG / lanes) * MR;
    if (first >= n_out) { return; }
    let lane = lid % lanes;
    let n0 = first + (lid / lanes) * MR;
    // Rows past the last are read as the last (their sums are dropped).
    let last = n_out - 1u;
    var rows = vec4<u32>();
    for (var r = 0u; r < MR; r++) { rows[r] = min(n0 + r, last) * rb; }
    let chunks = (pu(3u) / QK) * CPB;
    let x4 = pu(0u) / 4u;
    var acc = vec4<f32>();
    var c = lane;
//UNROLL
    for (; c < chunks; c += lanes) {
        let x = xload(x4, c);
        for (var r = 0u; r < MR; r++) { acc[r] += wdot(rows[r], c, x); }
    }
//REDUCE
    if (lane < MR && n0 + lane < n_out) {
        B[pu(1u) + n0 + lane] = sum;
    }
}
