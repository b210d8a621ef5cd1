// Row kernels reading the per-pass constants C: bias adds, row gathers, RoPE.
@group(0) @binding(1) var<storage, read_write> A: array<f32>;
@group(0) @binding(5) var<storage, read> C: array<f32>;

fn gidx(gid: vec3<u32>, nwg: vec3<u32>) -> u32 { return gid.x + gid.y * nwg.x * 64u; }

// A[y + r·w + c] += C[b + c] for r < rows. Params: 0 y, 1 bias (C), 2 w, 3 rows.
@compute @workgroup_size(64)
fn add_bias(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gidx(gid, nwg);
    let w = pu(2u);
    if (i >= w * pu(3u)) { return; }
    A[pu(0u) + i] += C[pu(1u) + i % w];
}

// A[dst + r·w + c] = A[src + idx[r]·w + c], idx as u32 bits in C. Params: 0 src, 1 dst,
// 2 w, 3 rows, 4 idx (C).
@compute @workgroup_size(64)
fn gather_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gidx(gid, nwg);
    let w = pu(2u);
    if (i >= w * pu(3u)) { return; }
    let r = bitcast<u32>(C[pu(4u) + i / w]);
    A[pu(1u) + i] = A[pu(0u) + r * w + i % w];
}

// Rotates the first 2·half dims of each head of rows [t, heads, head_dim] in place: pairs
// (2j, 2j+1) when interleaved, else (j, j + half); cos/sin rows [t, half] in C.
// Params: 0 x, 1 t, 2 heads, 3 head_dim, 4 half, 5 interleaved, 6 cos (C), 7 sin (C).
@compute @workgroup_size(64)
fn rope(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gidx(gid, nwg);
    let half = pu(4u);
    let heads = pu(2u);
    if (i >= pu(1u) * heads * half) { return; }
    let j = i % half;
    let h = (i / half) % heads;
    let r = i / (half * heads);
    let base = pu(0u) + (r * heads + h) * pu(3u);
    var a = base + j;
    var b = base + j + half;
    if (pu(5u) != 0u) { a = base + 2u * j; b = a + 1u; }
    let c = C[pu(6u) + r * half + j];
    let s = C[pu(7u) + r * half + j];
    let x0 = A[a];
    let x1 = A[b];
    A[a] = x0 * c - x1 * s;
    A[b] = x0 * s + x1 * c;
}
