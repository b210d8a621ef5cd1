// Small element-wise kernels over the activation arena A, one thread per element.
@group(0) @binding(1) var<storage, read_write> A: array<f32>;

fn gidx(gid: vec3<u32>, nwg: vec3<u32>) -> u32 { return gid.x + gid.y * nwg.x * 64u; }

// A[y + i] += A[x + i]. Params: 0 x, 1 y, 2 n.
@compute @workgroup_size(64)
fn add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gidx(gid, nwg);
    if (i >= pu(2u)) { return; }
    A[pu(1u) + i] += A[pu(0u) + i];
}

// g = act(g) · u over n values; act 0 SiLU, 1 tanh-GELU. Params: 0 g, 1 u, 2 n, 3 act.
@compute @workgroup_size(64)
fn gated_act(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gidx(gid, nwg);
    if (i >= pu(2u)) { return; }
    let x = A[pu(0u) + i];
    var a: f32;
    if (pu(3u) == 0u) {
        a = x / (1.0 + exp(-x));
    } else {
        a = 0.5 * x * (1.0 + tanh_safe(0.7978846 * (x + 0.044715 * x * x * x)));
    }
    A[pu(0u) + i] = a * A[pu(1u) + i];
}

// x = cap · tanh(x / cap) over n values. Params: 0 x, 2 n, 3 cap.
@compute @workgroup_size(64)
fn softcap(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gidx(gid, nwg);
    if (i >= pu(2u)) { return; }
    let cap = pf(3u);
    A[pu(0u) + i] = cap * tanh_safe(A[pu(0u) + i] / cap);
}
