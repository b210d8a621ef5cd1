// Activations rounded through int8 blocks exactly as the CPU's quantize_q8 / quantize_q8k do
// (d = amax / 127, q = round-half-away(x / d) clamped to ±127), written back as d·q: the
// values the CPU's integer dot products multiply. One thread per block.
// Params: 0 source offset (A), 1 destination offset (A), 2 blocks, 3 block size (32 or 256).
@group(0) @binding(1) var<storage, read_write> A: array<f32>;

fn round_away(v: f32) -> f32 {
    let t = trunc(v);
    if (abs(v - t) >= 0.5) { return t + sign(v); }
    return t;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let blk = gid.x + gid.y * nwg.x * 64u;
    if (blk >= pu(2u)) { return; }
    let bs = pu(3u);
    let src = pu(0u) + blk * bs;
    let dst = pu(1u) + blk * bs;
    var amax = 0.0;
    for (var i = 0u; i < bs; i++) { amax = max(amax, abs(A[src + i])); }
    if (amax == 0.0) {
        for (var i = 0u; i < bs; i++) { A[dst + i] = 0.0; }
        return;
    }
    let d = amax / 127.0;
    let id = 1.0 / d;
    for (var i = 0u; i < bs; i++) {
        A[dst + i] = d * clamp(round_away(A[src + i] * id), -127.0, 127.0);
    }
}
