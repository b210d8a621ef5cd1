//! Gated activations of an MLP: `g[i] = act(g[i]) · u[i]` for SiLU and tanh-GELU, with an
//! AVX2+FMA path (a polynomial `exp`, both written as `x / (1 + exp(−a))`) and a portable one
//! that computes exactly what the reference formulas say (`x / (1 + exp(−x))`,
//! `0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 x³)))`).

use crate::pool::{parallel_for, pool_threads};
use crate::vecdot::Isa;

/// The activation on the gate projection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateAct {
    /// `x · sigmoid(x)`.
    Silu,
    /// GELU, tanh approximation.
    GeluTanh,
}

const GELU_C: f32 = 0.797_884_6; // sqrt(2/pi)

impl GateAct {
    /// The reference formula on one value (what the portable path and `OXINFER_KERNELS=scalar`
    /// compute).
    pub fn apply(self, x: f32) -> f32 {
        match self {
            GateAct::Silu => x / (1.0 + (-x).exp()),
            GateAct::GeluTanh => 0.5 * x * (1.0 + (GELU_C * (x + 0.044_715 * x * x * x)).tanh()),
        }
    }
}

/// Values per parallel task.
const CHUNK: usize = 16 * 1024;

/// `g[i] = act(g[i]) · u[i]` on `isa` (AVX2 path where [`Isa::has_avx2`], else the reference
/// formula), parallel over chunks of the pool when long. The AVX2 path differs from the
/// reference by a few ulp (polynomial `exp`).
///
/// # Panics
/// If `g.len() != u.len()`.
pub fn gated_act(act: GateAct, g: &mut [f32], u: &[f32], isa: Isa) {
    assert_eq!(g.len(), u.len(), "gate and up must have the same length");
    let n = g.len();
    let run = |g: &mut [f32], u: &[f32]| {
        #[cfg(target_arch = "x86_64")]
        if isa.has_avx2() {
            // SAFETY: has_avx2 holds only when the CPU reports avx2, fma and f16c.
            unsafe { avx2::gated(act, g, Some(u)) };
            return;
        }
        let _ = isa;
        for (g, u) in g.iter_mut().zip(u) {
            *g = act.apply(*g) * u;
        }
    };
    if n <= CHUNK || pool_threads() == 1 {
        run(g, u);
        return;
    }
    let gp = crate::fast::SyncPtr(g.as_mut_ptr());
    parallel_for(n.div_ceil(CHUNK), &|c| {
        let (a, b) = (c * CHUNK, ((c + 1) * CHUNK).min(n));
        // SAFETY: chunk c owns g[a..b] (disjoint from every other chunk); g outlives the call.
        let gs = unsafe { std::slice::from_raw_parts_mut(gp.get().add(a), b - a) };
        run(gs, &u[a..b]);
    });
}

/// `x[i] = act(x[i])` on the calling thread, on `isa` as [`gated_act`] (the AVX2 path within
/// a few ulp of [`GateAct::apply`], the reference formula elsewhere): for a caller that already
/// splits its work over the pool (a normalization followed by SiLU).
pub fn act_in_place(act: GateAct, x: &mut [f32], isa: Isa) {
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: has_avx2 holds only when the CPU reports avx2, fma and f16c.
        unsafe { avx2::gated(act, x, None) };
        return;
    }
    let _ = isa;
    x.iter_mut().for_each(|v| *v = act.apply(*v));
}

/// The SIMD `exp`s' polynomial for `e^r − 1 − r = r² · p(r)` on `|r| ≤ ln2/2` (Cephes'
/// `expf`), highest degree first; shared by every vector width.
#[cfg(target_arch = "x86_64")]
pub(crate) const EXP_POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

/// `ln 2` in two parts (high, low) for the range reduction `r = x − n · ln 2`.
#[cfg(target_arch = "x86_64")]
pub(crate) const LN2_SPLIT: (f32, f32) = (0.693_359_4, -2.121_944_4e-4);

/// The inputs the SIMD `exp`s clamp to (below, `e^x` is 0 to f32; above, infinite).
#[cfg(target_arch = "x86_64")]
pub(crate) const EXP_RANGE: (f32, f32) = (-87.3, 88.3);

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use super::{GateAct, EXP_POLY, EXP_RANGE, GELU_C, LN2_SPLIT};
    use std::arch::x86_64::*;

    /// `exp(x)` for eight lanes (Cephes-style: 2^n · e^r with a degree-6 polynomial on
    /// |r| ≤ ln2/2; about 1 ulp), inputs clamped to [−87.3, 88.3].
    #[inline(always)]
    pub(crate) fn exp8(x: __m256) -> __m256 {
        // SAFETY: plain register arithmetic; the enclosing function has avx2 + fma.
        unsafe {
            let x = _mm256_min_ps(
                _mm256_max_ps(x, _mm256_set1_ps(EXP_RANGE.0)),
                _mm256_set1_ps(EXP_RANGE.1),
            );
            let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
            );
            let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_SPLIT.0), x);
            let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_SPLIT.1), r);
            let mut p = _mm256_set1_ps(EXP_POLY[0]);
            for c in &EXP_POLY[1..] {
                p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
            }
            let r2 = _mm256_mul_ps(r, r);
            let e = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0));
            let pow2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(
                _mm256_cvtps_epi32(n),
                _mm256_set1_epi32(127),
            ));
            _mm256_mul_ps(e, _mm256_castsi256_ps(pow2))
        }
    }

    /// `act(x)` for eight lanes: `x / (1 + exp(−a))` with `a = x` (SiLU) or
    /// `a = 2·√(2/π)·(x + 0.044715 x³)` (tanh-GELU: `0.5·(1 + tanh(a/2)) = sigmoid(a)`).
    #[inline(always)]
    fn act8(act: GateAct, x: __m256) -> __m256 {
        // SAFETY: plain register arithmetic; the enclosing function has avx2 + fma.
        unsafe {
            let na = match act {
                GateAct::Silu => _mm256_sub_ps(_mm256_setzero_ps(), x),
                GateAct::GeluTanh => {
                    let x2 = _mm256_mul_ps(x, x);
                    let inner = _mm256_fmadd_ps(_mm256_set1_ps(0.044_715), x2, _mm256_set1_ps(1.0));
                    _mm256_mul_ps(_mm256_mul_ps(x, inner), _mm256_set1_ps(-2.0 * GELU_C))
                }
            };
            _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), exp8(na)))
        }
    }

    /// `g[i] = act(g[i]) · u[i]` (`u` at least as long as `g`), or `act(g[i])` without `u`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gated(act: GateAct, g: &mut [f32], u: Option<&[f32]>) {
        let n = g.len();
        assert!(u.is_none_or(|u| u.len() >= n));
        let times = |y: __m256, u: Option<&[f32]>, i: usize| match u {
            // SAFETY: i + 8 <= u.len() at every call (the main loop's bound, or the tail's
            // 8-float copy).
            Some(u) => _mm256_mul_ps(y, unsafe { _mm256_loadu_ps(u.as_ptr().add(i)) }),
            None => y,
        };
        let main = n / 8 * 8;
        let mut i = 0;
        while i < main {
            // SAFETY: i + 8 <= main <= n (<= u.len()).
            unsafe {
                let x = _mm256_loadu_ps(g.as_ptr().add(i));
                _mm256_storeu_ps(g.as_mut_ptr().add(i), times(act8(act, x), u, i));
            }
            i += 8;
        }
        if main < n {
            let mut t = [0f32; 8];
            let mut tu = [0f32; 8];
            t[..n - main].copy_from_slice(&g[main..]);
            if let Some(u) = u {
                tu[..n - main].copy_from_slice(&u[main..n]);
            }
            // SAFETY: t and tu hold 8 floats.
            unsafe {
                let y = times(
                    act8(act, _mm256_loadu_ps(t.as_ptr())),
                    u.map(|_| &tu[..]),
                    0,
                );
                _mm256_storeu_ps(t.as_mut_ptr(), y);
            }
            g[main..].copy_from_slice(&t[..n - main]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vecdot::available_isas;

    /// [`act_in_place`] equals [`gated_act`] with an up projection of ones, bit for bit, on
    /// every instruction set and ragged lengths.
    #[test]
    fn in_place_is_gated_by_ones() {
        let xs: Vec<f32> = (-300..300).map(|i| i as f32 * 0.037).collect();
        for act in [GateAct::Silu, GateAct::GeluTanh] {
            for isa in available_isas() {
                for len in [xs.len(), 13, 7, 1, 0] {
                    let mut a = xs[..len].to_vec();
                    let mut b = a.clone();
                    act_in_place(act, &mut a, isa);
                    gated_act(act, &mut b, &vec![1.0; len], isa);
                    assert_eq!(a, b, "{act:?} {isa:?} len {len}");
                }
            }
        }
    }

    /// Every instruction set agrees with the f64 formula within a few ulp, over the whole
    /// useful range, ragged lengths and the extremes (±inf inputs give 0 / x like the
    /// reference; large |x| does not overflow).
    #[test]
    fn matches_reference() {
        let xs: Vec<f32> = (-4000..4000)
            .map(|i| i as f32 * 0.005)
            .chain([-200.0, -90.0, -30.0, 30.0, 90.0, 200.0, 1e-30, -1e-30, 0.0])
            .collect();
        let us: Vec<f32> = (0..xs.len()).map(|i| 1.0 - (i % 7) as f32 * 0.3).collect();
        for act in [GateAct::Silu, GateAct::GeluTanh] {
            for isa in available_isas() {
                for len in [xs.len(), 13, 7, 1] {
                    let mut g = xs[..len].to_vec();
                    gated_act(act, &mut g, &us[..len], isa);
                    for i in 0..len {
                        let x = f64::from(xs[i]);
                        let a = match act {
                            GateAct::Silu => x / (1.0 + (-x).exp()),
                            GateAct::GeluTanh => {
                                0.5 * x
                                    * (1.0
                                        + (0.797_884_560_802_865_4 * (x + 0.044_715 * x * x * x))
                                            .tanh())
                            }
                        };
                        let want = a * f64::from(us[i]);
                        // The reference formula's own f32 rounding (1 + tanh near 0) is ~1e-7 · |x|.
                        let tol = 1e-6 * want.abs() + 1e-7 * (x * f64::from(us[i])).abs() + 1e-30;
                        assert!(
                            (f64::from(g[i]) - want).abs() <= tol,
                            "{act:?} {isa:?} x {x}: {} vs {want}",
                            g[i]
                        );
                    }
                }
            }
        }
    }
}
