// y[t0 + j][n] = Σ_k w[n][k] · x[t0 + j][k] for up to 8 activation rows per workgroup; a
// workgroup of 64 threads takes 4 output rows, 16 threads per row; each thread decodes groups of
// 32 weights (`decode32`, spliced in per weight format) and dots them with every activation row.
// Params: 0 x offset (A), 1 y offset (B), 2 n, 3 k, 4 t, 5 row bytes of W, 6 row bytes of S,
// 7 y row stride.
@group(0) @binding(1) var<storage, read_write> A: array<f32>;
@group(0) @binding(2) var<storage, read_write> B: array<f32>;
//SCALES

const ROWS: u32 = 8u;
var<workgroup> red: array<f32, 512>;

//WORDS
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
