// decode32 per weight format: the 32 weights of group g of row n, as the CPU dequantizes them
// (oxinfer_kernels::dequant). Each block is marked `//@FORMAT` … `//@END`. Float formats
// define `wval` (one weight, rows of any width) instead; `FLOAT` in kernels.rs builds their
// `decode32` and the tail loop from it.
//@F32
fn wval(n: u32, i: u32) -> f32 { return bitcast<f32>(W[n * pu(3u) + i]); }
//@END
//@F16
fn wval(n: u32, i: u32) -> f32 {
    let e = n * pu(3u) + i;
    return unpack2x16float(W[e >> 1u] >> (16u * (e & 1u))).x;
}
//@END
//@BF16
fn wval(n: u32, i: u32) -> f32 {
    let e = n * pu(3u) + i;
    return bitcast<f32>(((W[e >> 1u] >> (16u * (e & 1u))) & 0xffffu) << 16u);
}
//@END
//@Q4_0
fn decode32(n: u32, g: u32, out: ptr<function, array<f32, 32>>) {
    let b = n * pu(5u) + g * 18u;
    let d = wf16(b);
    for (var w = 0u; w < 4u; w++) {
        let q = wword(b + 2u + 4u * w);
        for (var i = 0u; i < 4u; i++) {
            let j = 4u * w + i;
            let v = q >> (8u * i);
            (*out)[j] = d * (f32(v & 15u) - 8.0);
            (*out)[j + 16u] = d * (f32((v >> 4u) & 15u) - 8.0);
        }
    }
}
//@END
//@Q4_1
fn decode32(n: u32, g: u32, out: ptr<function, array<f32, 32>>) {
    let b = n * pu(5u) + g * 20u;
    let dm = unpack2x16float(wword(b));
    for (var w = 0u; w < 4u; w++) {
        let q = wword(b + 4u + 4u * w);
        for (var i = 0u; i < 4u; i++) {
            let j = 4u * w + i;
            let v = q >> (8u * i);
            (*out)[j] = dm.x * f32(v & 15u) + dm.y;
            (*out)[j + 16u] = dm.x * f32((v >> 4u) & 15u) + dm.y;
        }
    }
}
//@END
//@Q5_0
fn decode32(n: u32, g: u32, out: ptr<function, array<f32, 32>>) {
    let b = n * pu(5u) + g * 22u;
    let d = wf16(b);
    let qh = wword(b + 2u);
    for (var w = 0u; w < 4u; w++) {
        let q = wword(b + 6u + 4u * w);
        for (var i = 0u; i < 4u; i++) {
            let j = 4u * w + i;
            let c = q5_pair(q >> (8u * i), qh, j);
            (*out)[j] = d * (c.x - 16.0);
            (*out)[j + 16u] = d * (c.y - 16.0);
        }
    }
}
//@END
//@Q5_1
fn decode32(n: u32, g: u32, out: ptr<function, array<f32, 32>>) {
    let b = n * pu(5u) + g * 24u;
    let dm = unpack2x16float(wword(b));
    let qh = wword(b + 4u);
    for (var w = 0u; w < 4u; w++) {
        let q = wword(b + 8u + 4u * w);
        for (var i = 0u; i < 4u; i++) {
            let j = 4u * w + i;
            let c = q5_pair(q >> (8u * i), qh, j);
            (*out)[j] = dm.x * c.x + dm.y;
            (*out)[j + 16u] = dm.x * c.y + dm.y;
        }
    }
}
//@END
//@Q8_0
fn decode32(n: u32, g: u32, out: ptr<function, array<f32, 32>>) {
    let b = n * pu(5u) + g * 34u;
    let d = wf16(b);
    for (var w = 0u; w < 8u; w++) {
        let q = wword(b + 2u + 4u * w);
        for (var i = 0u; i < 4u; i++) { (*out)[4u * w + i] = d * i8f(q >> (8u * i)); }
    }
}
//@END
//@Q4K
// 6-bit scale and min of sub-block j of a K-quant's 12 scale bytes at s (get_scale_min_k4).
fn scale_min_k4(j: u32, s: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(wbyte(s + j) & 63u), f32(wbyte(s + j + 4u) & 63u));
    }
    let sc = (wbyte(s + j + 4u) & 15u) | ((wbyte(s + j - 4u) >> 6u) << 4u);
    let mn = (wbyte(s + j + 4u) >> 4u) | ((wbyte(s + j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(mn));
}
fn decode32(n: u32, g: u32, out: ptr<function, array<f32, 32>>) {
    let b = n * pu(5u) + (g / 8u) * 144u;
    let sub = g % 8u;
    let d = wf16(b);
    let dmin = wf16(b + 2u);
    let sm = scale_min_k4(sub, b + 4u);
    let d1 = d * sm.x;
    let m1 = dmin * sm.y;
    let qs = b + 16u + 32u * (sub / 2u);
    let shift = 4u * (sub & 1u);
    for (var w = 0u; w < 8u; w++) {
        let q = wword(qs + 4u * w) >> shift;
        for (var i = 0u; i < 4u; i++) {
            (*out)[4u * w + i] = d1 * f32((q >> (8u * i)) & 15u) - m1;
        }
    }
}
//@END
//@Q6K
fn decode32(n: u32, g: u32, out: ptr<function, array<f32, 32>>) {
    let b = n * pu(5u) + (g / 8u) * 210u;
    let sub = g % 8u;
    let half = sub / 4u;
    let gg = sub % 4u;
    let ql = b + 64u * half + 32u * (gg & 1u);
    let qh = b + 128u + 32u * half;
    let sc = b + 192u + 8u * half + 2u * gg;
    let d = wf16(b + 208u);
    let lo_shift = 4u * (gg / 2u);
    let s0 = d * i8f(wbyte(sc));
    let s1 = d * i8f(wbyte(sc + 1u));
    for (var w = 0u; w < 8u; w++) {
        let lo = wword(ql + 4u * w) >> lo_shift;
        let hi = wword(qh + 4u * w) >> (2u * gg);
        let ds = select(s1, s0, w < 4u);
        for (var i = 0u; i < 4u; i++) {
            let q = ((lo >> (8u * i)) & 15u) | (((hi >> (8u * i)) & 3u) << 4u);
            (*out)[4u * w + i] = ds * f32(i32(q) - 32);
        }
    }
}
//@END
//@Q8
fn decode32(n: u32, g: u32, out: ptr<function, array<f32, 32>>) {
    let b = n * pu(5u) + g * 32u;
    let d = bitcast<f32>(S[(n * pu(6u)) / 4u + g]);
    for (var w = 0u; w < 8u; w++) {
        let q = wword(b + 4u * w);
        for (var i = 0u; i < 4u; i++) { (*out)[4u * w + i] = d * i8f(q >> (8u * i)); }
    }
}
//@END
//@Q4
fn decode32(n: u32, g: u32, out: ptr<function, array<f32, 32>>) {
    let b = n * pu(5u) + g * 16u;
    let so = n * pu(6u) + 2u * g;
    let sw = S[so / 4u] >> (8u * (so & 3u));
    let d = unpack2x16float(sw & 0xffffu).x;
    for (var w = 0u; w < 4u; w++) {
        let q = wword(b + 4u * w);
        for (var i = 0u; i < 4u; i++) {
            let j = 4u * w + i;
            let v = q >> (8u * i);
            (*out)[j] = d * (f32(v & 15u) - 8.0);
            (*out)[j + 16u] = d * (f32((v >> 4u) & 15u) - 8.0);
        }
    }
}
//@END
