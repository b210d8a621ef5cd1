// y[t0 + j][n] = Σ_k w[n][k] · x[t0 + j][k] for up to 8 activation rows per workgroup; a
// workgroup of 64 threads takes 4 output rows, 16 threads per row; each thread decodes groups of
// 32 weights (`decode32`, spliced in per weight format) and dots them with every activation row.
// Params: 0 x offset (A), 1 y offset (B), 2 n, 3 k, 4 t, 5 row bytes of W, 6 row bytes of S,
// 7 y row stride.
@group(0) @binding(1) var<storage, read_write> A: array<f32>;
@group(0) @binding(2) var<storage, read_write> B: array<f32>;
@group(0) @binding(3) var<storage, read> W: array<u32>;
//SCALES

const ROWS: u32 = 8u;
var<workgroup> red: array<f32, 512>;

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

//DECODE

const LANES: u32 = 16u;
const ROWS_OUT: u32 = 4u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let n_out = pu(2u);
    let k = pu(3u);
    let t = pu(4u);
    let w_id = flat(wid, nwg);
    let blocks_n = (n_out + ROWS_OUT - 1u) / ROWS_OUT;
    let t0 = (w_id / blocks_n) * ROWS;
    if (t0 >= t) { return; }
    let n = (w_id % blocks_n) * ROWS_OUT + lid / LANES;
    let lane = lid % LANES;
    let rows = min(ROWS, t - t0);
    var acc: array<f32, 8>;
    var wv: array<f32, 32>;
    let groups = k / 32u;
    if (n < n_out) {
        for (var g = lane; g < groups; g += LANES) {
            decode32(n, g, &wv);
            for (var j = 0u; j < rows; j++) {
                let xb = pu(0u) + (t0 + j) * k + g * 32u;
                var s = 0.0;
                for (var i = 0u; i < 32u; i++) { s += wv[i] * A[xb + i]; }
                acc[j] += s;
            }
        }
//TAIL
    }
    for (var j = 0u; j < rows; j++) { red[j * 64u + lid] = acc[j]; }
    workgroupBarrier();
    for (var stride = LANES / 2u; stride > 0u; stride >>= 1u) {
        if (lane < stride) {
            for (var j = 0u; j < rows; j++) { red[j * 64u + lid] += red[j * 64u + lid + stride]; }
        }
        workgroupBarrier();
    }
    if (lane < rows && n < n_out) {
        B[pu(1u) + (t0 + lane) * pu(7u) + n] = red[lane * 64u + lid - lane];
    }
}
