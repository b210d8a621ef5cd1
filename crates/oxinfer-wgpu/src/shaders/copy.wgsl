// B[dst + i] = A[src + i]: new keys/values from the activations into a KV cache.
// Params: 0 src (A), 1 dst (B), 2 n.
@group(0) @binding(1) var<storage, read_write> A: array<f32>;
@group(0) @binding(2) var<storage, read_write> B: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 64u;
    if (i >= pu(2u)) { return; }
    B[pu(1u) + i] = A[pu(0u) + i];
}
