// Kernels of a whole bidirectional encoder pass (encoder.rs): the activation (with the
// product's bias, or a gated MLP's up factor), clamps of a product's input or output, per-head
// RMS norms, rotary positions from per-row table indices, the residual LayerNorm or RMSNorm
// (post-norm and pre-norm), and attention of every sequence of a batch with itself (optionally
// within a local window; grouped-query heads). f32 throughout, with the CPU twin's formulas
// (plan/encoder.rs, nn/encoder_act.rs, nn/encoder_math.rs).
@group(0) @binding(1) var<storage, read_write> A: array<f32>;
@group(0) @binding(5) var<storage, read> C: array<f32>;

fn gidx(gid: vec3<u32>, nwg: vec3<u32>) -> u32 { return gid.x + gid.y * nwg.x * 64u; }
fn cu(i: u32) -> u32 { return bitcast<u32>(C[i]); }

// erf(x): the odd degree-13 over even degree-8 rational function of x clamped to [-4, 4] that
// the CPU evaluates (encoder_math::erf, the f32 minimax fit of Eigen and XLA): within 4.5e-7
// of the exact value, and the CPU's value to a few ulp.
fn erf_f32(x0: f32) -> f32 {
    let x = clamp(x0, -4.0, 4.0);
    let x2 = x * x;
    var p = -2.7261423e-10;
    p = p * x2 + 2.7706814e-8;
    p = p * x2 - 2.101024e-6;
    p = p * x2 - 5.6925064e-5;
    p = p * x2 - 7.3499063e-4;
    p = p * x2 - 2.9546e-3;
    p = p * x2 - 1.6096033e-2;
    var q = -1.45660715e-5;
    q = q * x2 - 2.1337405e-4;
    q = q * x2 - 1.682827e-3;
    q = q * x2 - 7.3733293e-3;
    q = q * x2 - 1.4264739e-2;
    return x * p / q;
}

// The activation of one value (encoder.rs `act_code`): 0 GELU (erf), 1 GELU (tanh, with the
// CPU's tanh = 1 - 2 / (e^2x + 1) over x clamped to ±10), 2 ReLU, 3 SiLU, else none.
fn enc_act_value(x: f32, act: u32) -> f32 {
    switch act {
        case 0u: { return 0.5 * x * (1.0 + erf_f32(x * 0.70710678)); }
        case 1u: {
            let z = clamp(0.7978846 * (x + 0.044715 * x * x * x), -10.0, 10.0);
            return 0.5 * x * (1.0 + (1.0 - 2.0 / (exp(2.0 * z) + 1.0)));
        }
        case 2u: { return max(x, 0.0); }
        case 3u: { return x / (1.0 + exp(-x)); }
        default: { return x; }
    }
}

// y = act(y + b[col]) (· A[u + i] for a gated MLP) over n values in rows of width w.
// Params: 0 y (A), 1 bias (C), 2 w, 3 n, 4 flags (1: bias, 2: times u), 5 act, 6 u (A).
@compute @workgroup_size(64)
fn enc_act(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gidx(gid, nwg);
    if (i >= pu(3u)) { return; }
    let flags = pu(4u);
    var v = A[pu(0u) + i];
    if ((flags & 1u) != 0u) { v += C[pu(1u) + i % pu(2u)]; }
    v = enc_act_value(v, pu(5u));
    if ((flags & 2u) != 0u) { v *= A[pu(6u) + i]; }
    A[pu(0u) + i] = v;
}

// dst[r · ld_dst + c] = clamp(src[r · ld_src + c], lo, hi) for rows r < rows, columns c < w
// (a product's input into a copy, or its output in place).
// Params: 0 src (A), 1 dst (A), 2 rows, 3 w, 4 ld_src, 5 ld_dst, 6 lo, 7 hi.
@compute @workgroup_size(64)
fn enc_clamp(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gidx(gid, nwg);
    let w = pu(3u);
    if (i >= pu(2u) * w) { return; }
    let r = i / w;
    let c = i % w;
    A[pu(1u) + r * pu(5u) + c] = clamp(A[pu(0u) + r * pu(4u) + c], pf(6u), pf(7u));
}

// Per-head RMS norm in place: each of the heads heads of hd values of rows [rows] (row stride
// ld) becomes v / sqrt(mean(v²) + eps) · gain (gain [hd] in C). One thread per (row, head).
// Params: 0 x (A), 1 rows, 2 ld, 3 heads, 4 hd, 5 gain (C), 6 eps.
@compute @workgroup_size(64)
fn enc_head_norm(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gidx(gid, nwg);
    let heads = pu(3u);
    if (i >= pu(1u) * heads) { return; }
    let hd = pu(4u);
    let base = pu(0u) + (i / heads) * pu(2u) + (i % heads) * hd;
    var s = 0.0;
    for (var e = 0u; e < hd; e++) { s += A[base + e] * A[base + e]; }
    let inv = 1.0 / sqrt(s / f32(hd) + pf(6u));
    for (var e = 0u; e < hd; e++) { A[base + e] = A[base + e] * inv * C[pu(5u) + e]; }
}

// Rotary positions of the queries and keys of rows [t] of qkv (row stride ld; heads query heads
// at column 0, then kv key heads): row r rotates by row ti[r] of the tables cos / sin [*, half]
// in C, the pairs (2j, 2j + 1) when interleaved, else those of sections blocks rotated each
// alone: angle j = s w + k (w = half / sections) the pair (2 s w + k, 2 s w + k + w) — one
// section: (j, j + half); a head's values past 2 half stay. Rope::apply's arithmetic. One
// thread per (row, query or key head, pair).
// Params: 0 qkv (A), 1 t, 2 heads, 3 hd, 4 half, 5 interleaved, 6 cos (C), 7 sin (C),
// 8 ti (C, u32 bits), 9 ld, 10 kv heads, 11 sections.
@compute @workgroup_size(64)
fn enc_rope(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gidx(gid, nwg);
    let half = pu(4u);
    let heads2 = pu(2u) + pu(10u);
    if (i >= pu(1u) * heads2 * half) { return; }
    let j = i % half;
    let h = (i / half) % heads2;
    let r = i / (half * heads2);
    // Key head h - heads lies at heads · hd + (h - heads) · hd = h · hd.
    let base = pu(0u) + r * pu(9u) + h * pu(3u);
    let w = half / pu(11u);
    var ia = base + 2u * w * (j / w) + j % w;
    var ib = ia + w;
    if (pu(5u) != 0u) { ia = base + 2u * j; ib = ia + 1u; }
    let at = cu(pu(8u) + r) * half + j;
    let c = C[pu(6u) + at];
    let s = C[pu(7u) + at];
    let a = A[ia];
    let b = A[ib];
    A[ia] = a * c - b * s;
    A[ib] = a * s + b * c;
}

const NT: u32 = 256u;
// Values of a row each thread keeps (rows of at most NT · PER = 4096).
const PER: u32 = 16u;
var<workgroup> red: array<f32, 256>;

// Sum over the workgroup of NT threads; every thread gets it.
fn block_sum(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var stride = NT / 2u; stride > 0u; stride >>= 1u) {
        if (lid < stride) { red[lid] += red[lid + stride]; }
        workgroupBarrier();
    }
    let s = red[0];
    workgroupBarrier();
    return s;
}

// The residual add and LayerNorm, one workgroup per row of width dim: v = x + (y + yb), then
// out = (v - mean) / sqrt(var + eps) · gain + bias with the mean and the (two-pass) variance
// in f32 (an RMSNorm: v / sqrt(mean(v²) + eps) · gain; none: out = v). Post-norm: out is x.
// Pre-norm: out is elsewhere, x keeps v (the residual stream) and out gets the next sublayer's
// normalized input. Without y: v = x (a norm alone).
// Params: 0 x (A), 1 y (A), 2 yb (C), 3 gain (C), 4 bias (C), 5 dim, 6 eps, 7 out (A),
// 8 flags (1: y, 2: yb, 4: RMSNorm, 8: no norm), 9 rows.
@compute @workgroup_size(256)
fn enc_residual_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let row = flat(wid, nwg);
    if (row >= pu(9u)) { return; }
    let dim = pu(5u);
    let x = pu(0u) + row * dim;
    let y = pu(1u) + row * dim;
    let o = pu(7u) + row * dim;
    let flags = pu(8u);
    let keep = (flags & 1u) != 0u && pu(7u) != pu(0u);
    var v: array<f32, PER>;
    var s = 0.0;
    for (var e = 0u; e < PER; e++) {
        let c = lid + e * NT;
        if (c < dim) {
            var a = A[x + c];
            if ((flags & 1u) != 0u) {
                var b = A[y + c];
                if ((flags & 2u) != 0u) { b += C[pu(2u) + c]; }
                a += b;
                if (keep) { A[x + c] = a; }
            }
            v[e] = a;
            s += a;
        }
    }
    if ((flags & 8u) != 0u) {
        for (var e = 0u; e < PER; e++) {
            let c = lid + e * NT;
            if (c < dim) { A[o + c] = v[e]; }
        }
        return;
    }
    let rms = (flags & 4u) != 0u;
    var mean = block_sum(lid, s) / f32(dim);
    if (rms) { mean = 0.0; }
    var q = 0.0;
    for (var e = 0u; e < PER; e++) {
        if (lid + e * NT < dim) {
            let d = v[e] - mean;
            v[e] = d;
            q += d * d;
        }
    }
    let inv = 1.0 / sqrt(block_sum(lid, q) / f32(dim) + pf(6u));
    for (var e = 0u; e < PER; e++) {
        let c = lid + e * NT;
        if (c < dim) {
            var n = v[e] * inv * C[pu(3u) + c];
            if (!rms) { n += C[pu(4u) + c]; }
            A[o + c] = n;
        }
    }
}

// Attention of every sequence with itself. Row r of qkv (row stride ld) holds its heads query
// heads at column 0, then kvh key heads at d = heads · hd, then kvh value heads (query head h
// reads key / value head h / (heads / kvh)); out is [T, d]. One workgroup of 64 threads per
// (block of up to 64 queries of one sequence, head): block b is (first row of its sequence,
// the sequence's length, the block's first query) as u32 bits in C. Thread i takes query i0 + i;
// the keys (those at distance ≤ window - 1 with window > 0, else all of the sequence's) go
// through workgroup memory in tiles of TK keys and values, each tile's scores into an online
// softmax (one rescale per tile). HD (the head width rounded up to 32, 64, 128 or 256) is
// spliced in per kernel: a head is HD / 4 vec4s, zero past hd, so the loops over it have
// constant trip counts (HD / 16 steps of four vec4s) the compiler can unroll. (llvmpipe ends
// every invocation after 65,535 loop iterations in all, LP_MAX_TGSI_LOOP_ITERATIONS:
// encoder.rs declines sequences whose keys would pass that.)
// Params: 0 qkv (A), 1 out (A), 2 heads, 3 hd, 4 ld, 5 scale, 6 window + 1 (0: none),
// 7 blocks (C), 8 block count, 9 kvh.
//HD
const HD4: u32 = HD / 4u;
const TK: u32 = 2048u / HD;
var<workgroup> kt: array<vec4<f32>, 512>;
var<workgroup> vt: array<vec4<f32>, 512>;

// A[at + d + k] for k < 4 where d + k < hd, else 0.
fn head4(at: u32, d: u32, hd: u32) -> vec4<f32> {
    return vec4<f32>(select(0.0, A[at + d], d < hd), select(0.0, A[at + d + 1u], d + 1u < hd),
                     select(0.0, A[at + d + 2u], d + 2u < hd),
                     select(0.0, A[at + d + 3u], d + 3u < hd));
}

@compute @workgroup_size(64)
fn enc_attention(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let heads = pu(2u);
    let w_id = flat(wid, nwg);
    if (w_id >= pu(8u) * heads) { return; }
    let blk = pu(7u) + 3u * (w_id / heads);
    let h = w_id % heads;
    let r0 = cu(blk);
    let n = cu(blk + 1u);
    let i0 = cu(blk + 2u);
    let hd = pu(3u);
    let ld = pu(4u);
    let d = heads * hd;
    let scale = pf(5u);
    let window = pu(6u);
    let i = i0 + lid;
    let col = pu(0u) + h * hd;
    let kvh = pu(9u);
    let kcol = pu(0u) + d + (h / (heads / kvh)) * hd;
    let vcol = kcol + kvh * hd;
    var q: array<vec4<f32>, HD4>;
    var acc: array<vec4<f32>, HD4>;
    let qr = col + (r0 + min(i, n - 1u)) * ld;
    for (var c = 0u; c < HD4; c++) { q[c] = head4(qr, 4u * c, hd); }
    var lo = 0u;
    var hi = n;
    if (window != 0u) {
        lo = select(0u, i0 + 1u - window, i0 + 1u > window);
        hi = min(n, i0 + 63u + window);
    }
    var m = -3.0e38;
    var l = 0.0;
    for (var j0 = lo; j0 < hi; j0 += TK) {
        let cnt = min(TK, hi - j0);
        workgroupBarrier();
        for (var e = lid; e < cnt * HD4; e += 64u) {
            let at = (r0 + j0 + e / HD4) * ld;
            let dd = 4u * (e % HD4);
            kt[e] = head4(kcol + at, dd, hd);
            vt[e] = head4(vcol + at, dd, hd);
        }
        workgroupBarrier();
        var s: array<f32, TK>;
        var top = -3.0e38;
        for (var jj = 0u; jj < cnt; jj++) {
            let kb = jj * HD4;
            var dot4 = vec4<f32>();
            for (var c = 0u; c < HD4; c += 4u) {
                dot4 += q[c] * kt[kb + c] + q[c + 1u] * kt[kb + c + 1u]
                      + q[c + 2u] * kt[kb + c + 2u] + q[c + 3u] * kt[kb + c + 3u];
            }
            let j = j0 + jj;
            var v = ((dot4.x + dot4.y) + (dot4.z + dot4.w)) * scale;
            if (window != 0u && max(i, j) - min(i, j) >= window) { v = -3.0e38; }
            s[jj] = v;
            top = max(top, v);
        }
        if (top > -3.0e38) {
            let mn = max(m, top);
            let corr = exp(m - mn);
            l *= corr;
            for (var c = 0u; c < HD4; c += 4u) {
                acc[c] *= corr;
                acc[c + 1u] *= corr;
                acc[c + 2u] *= corr;
                acc[c + 3u] *= corr;
            }
            for (var jj = 0u; jj < cnt; jj++) {
                let p = select(0.0, exp(s[jj] - mn), s[jj] > -3.0e38);
                l += p;
                let vb = jj * HD4;
                for (var c = 0u; c < HD4; c += 4u) {
                    acc[c] += p * vt[vb + c];
                    acc[c + 1u] += p * vt[vb + c + 1u];
                    acc[c + 2u] += p * vt[vb + c + 2u];
                    acc[c + 3u] += p * vt[vb + c + 3u];
                }
            }
            m = mn;
        }
    }
    if (i < n) {
        let o = pu(1u) + (r0 + i) * d + h * hd;
        let inv = 1.0 / l;
        for (var e = 0u; e < hd; e++) { A[o + e] = acc[e / 4u][e % 4u] * inv; }
    }
}
