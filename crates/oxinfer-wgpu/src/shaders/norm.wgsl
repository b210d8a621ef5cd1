// RMSNorm of rows in place or into another place: y = x / sqrt(mean(x²) + eps) · gain, one
// workgroup per row (per head for QK-norms: rows of head_dim).
// Params: 0 x offset (A), 1 y offset (A), 2 row width, 3 gain offset (C), 4 eps, 5 rows.
@group(0) @binding(1) var<storage, read_write> A: array<f32>;
@group(0) @binding(5) var<storage, read> C: array<f32>;
var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn rms_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let row = flat(wid, nwg);
    if (row >= pu(5u)) { return; }
    let w = pu(2u);
    let x = pu(0u) + row * w;
    let y = pu(1u) + row * w;
    var s = 0.0;
    for (var i = lid; i < w; i += 64u) { let v = A[x + i]; s += v * v; }
    red[lid] = s;
    workgroupBarrier();
    for (var stride = 32u; stride > 0u; stride >>= 1u) {
        if (lid < stride) { red[lid] += red[lid + stride]; }
        workgroupBarrier();
    }
    let inv = 1.0 / sqrt(red[0] / f32(w) + pf(4u));
    for (var i = lid; i < w; i += 64u) { A[y + i] = A[x + i] * inv * C[pu(3u) + i]; }
}
