// Activations rounded through int8 blocks exactly as the CPU's quantize_q8 / quantize_q8k do
// (d = amax / 127, q = round-half-away(x / d) clamped to ±127), written back as d·q: the
// values the CPU's integer dot products multiply. One thread per block.
// Params: 0 source offset (A), 1 destination offset (A), 2 blocks, 3 block size (32 or 256).
@group(0) @binding(1) var<storage, read_write> A: array<f32>;

// a / b rounded to nearest even, as IEEE division (and the CPU's `amax / 127.0`, `1.0 / d`) gives:
// WGSL lets `/` be 2.5 ULP off, and NVIDIA's Vulkan driver is; a scale one ULP off moves values
// across int8 rounding boundaries. Long division of the significands in u32 (25 quotient bits:
// 24 and a guard bit, the remainder as sticky bit); operands or quotients that are not normal
// numbers take `/`.
fn div_rn(a: f32, b: f32) -> f32 {
    let ua = bitcast<u32>(a);
    let ub = bitcast<u32>(b);
    let ea = i32((ua >> 23u) & 0xffu);
    let eb = i32((ub >> 23u) & 0xffu);
    if (ea == 0 || eb == 0 || ea == 255 || eb == 255) { return a / b; }
    let mb = (ub & 0x7fffffu) | 0x800000u;
    var r = (ua & 0x7fffffu) | 0x800000u;
    var e = ea - eb + 127;
    if (r < mb) { r = r << 1u; e = e - 1; }
    var q = 0u;
    for (var i = 0u; i < 25u; i++) {
        q = q << 1u;
        if (r >= mb) { r = r - mb; q = q | 1u; }
        r = r << 1u;
    }
    let guard = q & 1u;
    q = q >> 1u;
    if (guard == 1u && (r != 0u || (q & 1u) == 1u)) { q = q + 1u; }
    if (q == 0x1000000u) { q = q >> 1u; e = e + 1; }
    if (e <= 0 || e >= 255) { return a / b; }
    let sign = (ua ^ ub) & 0x80000000u;
    return bitcast<f32>(sign | (u32(e) << 23u) | (q & 0x7fffffu));
}

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
    let d = div_rn(amax, 127.0);
    let id = div_rn(1.0, d);
    for (var i = 0u; i < bs; i++) {
        A[dst + i] = d * clamp(round_away(A[src + i] * id), -127.0, 127.0);
    }
}
