// Causal attention over a KV cache with GQA, sliding window and logit soft-cap, flash style:
// one workgroup of 64 threads per (query row, head); keys in tiles of 64 (one score per
// thread, the tile's probabilities in workgroup memory) with an online softmax; each thread
// accumulates head_dim / 64 output dims.
// Params: 0 q offset (A), 1 out offset (A), 2 k offset (B), 3 v offset (B), 4 t, 5 pos0,
// 6 heads, 7 kv heads, 8 head_dim, 9 scale, 10 window (0: none), 11 softcap (0: none).
@group(0) @binding(1) var<storage, read_write> A: array<f32>;
@group(0) @binding(2) var<storage, read_write> B: array<f32>;

var<workgroup> qv: array<f32, 256>;
var<workgroup> ps: array<f32, 64>;
var<workgroup> red: array<f32, 64>;

fn reduce(lid: u32, v: f32, is_max: bool) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var stride = 32u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            if (is_max) { red[lid] = max(red[lid], red[lid + stride]); }
            else { red[lid] += red[lid + stride]; }
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let heads = pu(6u);
    let kvh = pu(7u);
    let hd = pu(8u);
    let w_id = flat(wid, nwg);
    let i = w_id / heads;
    let h = w_id % heads;
    if (i >= pu(4u)) { return; }
    let kh = h / (heads / kvh);
    let kv_row = kvh * hd;
    let pos = pu(5u) + i;
    var first = 0u;
    let window = pu(10u);
    if (window != 0u && pos + 1u > window) { first = pos + 1u - window; }
    let cap = pf(11u);
    let scale = pf(9u);
    let q = pu(0u) + (i * heads + h) * hd;
    for (var d = lid; d < hd; d += 64u) { qv[d] = A[q + d]; }
    workgroupBarrier();
    var m = -3.0e38;
    var l = 0.0;
    var acc: array<f32, 4>;
    for (var j0 = first; j0 <= pos; j0 += 64u) {
        let j = j0 + lid;
        var s = -3.0e38;
        if (j <= pos) {
            let kb = pu(2u) + j * kv_row + kh * hd;
            var dot = 0.0;
            for (var d = 0u; d < hd; d++) { dot += qv[d] * B[kb + d]; }
            s = dot * scale;
            if (cap != 0.0) { s = cap * tanh_safe(s / cap); }
        }
        let m_new = max(m, reduce(lid, s, true));
        var p = 0.0;
        if (j <= pos) { p = exp(s - m_new); }
        ps[lid] = p;
        let corr = exp(m - m_new);
        l = l * corr + reduce(lid, p, false);
        let count = min(64u, pos + 1u - j0);
        for (var r = 0u; r < 4u; r++) {
            let d = lid + 64u * r;
            if (d < hd) {
                var a = acc[r] * corr;
                for (var jj = 0u; jj < count; jj++) {
                    a += ps[jj] * B[pu(3u) + (j0 + jj) * kv_row + kh * hd + d];
                }
                acc[r] = a;
            }
        }
        m = m_new;
        workgroupBarrier();
    }
    let o = pu(1u) + (i * heads + h) * hd;
    for (var r = 0u; r < 4u; r++) {
        let d = lid + 64u * r;
        if (d < hd) { A[o + d] = acc[r] / l; }
    }
}
