// Shared by every kernel: the per-dispatch parameters (16 u32 words, floats as bits) and the
// flat workgroup index of a dispatch split over x and y (x at most 65535).
struct Params { u: array<vec4<u32>, 4> }
@group(0) @binding(0) var<uniform> P: Params;

fn pu(i: u32) -> u32 { return P.u[i / 4u][i % 4u]; }
fn pf(i: u32) -> f32 { return bitcast<f32>(pu(i)); }
fn flat(wid: vec3<u32>, nwg: vec3<u32>) -> u32 { return wid.x + wid.y * nwg.x; }
// tanh without the overflow of large arguments (tanh(±15) is ±1 in f32).
fn tanh_safe(x: f32) -> f32 { return tanh(clamp(x, -15.0, 15.0)); }
