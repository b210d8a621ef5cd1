// RMSNorm of rows in place or into another place: y = x / sqrt(mean(x²) + eps) · gain, one
// workgroup of 256 per row (per head for QK-norms: rows of head_dim). Each thread loads four
// values per step before it uses them (a decode step's single row would otherwise wait for one
// load after another).
// Params: 0 x offset (A), 1 y offset (A), 2 row width, 3 gain offset (C), 4 eps, 5 rows.
@group(0) @binding(1) var<storage, read_write> A: array<f32>;
@group(0) @binding(5) var<storage, read> C: array<f32>;
const NT: u32 = 256u;
var<workgroup> red: array<f32, 256>;

// A[x + i] for i < w, else 0.
fn a_or0(x: u32, i: u32, w: u32) -> f32 { return select(0.0, A[x + min(i, w - 1u)], i < w); }

@compute @workgroup_size(256)
fn rms_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let row = flat(wid, nwg);
    if (row >= pu(5u)) { return; }
    let w = pu(2u);
    let x = pu(0u) + row * w;
    let y = pu(1u) + row * w;
    let g = pu(3u);
    var s = vec4<f32>();
    for (var i = lid; i < w; i += 4u * NT) {
        let v = vec4<f32>(a_or0(x, i, w), a_or0(x, i + NT, w), a_or0(x, i + 2u * NT, w),
                          a_or0(x, i + 3u * NT, w));
        s += v * v;
    }
    red[lid] = (s.x + s.y) + (s.z + s.w);
    workgroupBarrier();
    for (var stride = NT / 2u; stride > 0u; stride >>= 1u) {
        if (lid < stride) { red[lid] += red[lid + stride]; }
        workgroupBarrier();
    }
    let inv = 1.0 / sqrt(red[0] / f32(w) + pf(4u));
    for (var i = lid; i < w; i += 4u * NT) {
        let v = vec4<f32>(a_or0(x, i, w), a_or0(x, i + NT, w), a_or0(x, i + 2u * NT, w),
                          a_or0(x, i + 3u * NT, w));
        for (var j = 0u; j < 4u; j++) {
            let e = i + j * NT;
            if (e < w) { A[y + e] = v[j] * inv * C[g + e]; }
        }
    }
}
