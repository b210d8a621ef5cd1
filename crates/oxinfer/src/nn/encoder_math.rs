//! Branch-free f32 `erf`, `exp` and `tanh` for the encoders' element-wise loops (GELU over the
//! MLP's activations, the attention softmax; also diffusion's GEGLU). They are plain arithmetic and bit casts, so a loop over
//! a slice vectorizes; libm's `erff` / `expf` branch per value and do not (they were 12 % and
//! 5 % of `oxinfer embed`'s time with all-MiniLM-L6-v2).

use std::f32::consts::LOG2_E;

/// `erf(x)`: an odd degree-13 over even degree-8 rational function of `x` clamped to [−4, 4]
/// (the f32 minimax fit Eigen and XLA use; `erf(±4)` is ±1 to f32 precision). Within 4.2e-7
/// of the exact value (at most 4 ulp of 1; `tests::erf_is_close_to_exact`).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10_f32;
    for c in [
        2.770_681_4e-8,
        -2.101_024e-6,
        -5.692_506_4e-5,
        -7.349_906_3e-4,
        -2.954_6e-3,
        -1.609_603_3e-2,
    ] {
        p = p * x2 + c;
    }
    let mut q = -1.456_607_15e-5_f32;
    for c in [
        -2.133_740_5e-4,
        -1.682_827e-3,
        -7.373_329_3e-3,
        -1.426_473_9e-2,
    ] {
        q = q * x2 + c;
    }
    x * p / q
}

/// Exact GELU `0.5 · x · (1 + erf(x / √2))` with the vectorizable [`erf`].
#[inline(always)]
pub fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// `exp(x)` as `2ⁿ · e^r` with `n = round(x · log₂e)`, `|r| ≤ ln 2 / 2` and Cephes' degree-6
/// polynomial for `e^r`, `x` clamped to [−87.3, 88.3] (so `exp(−∞)` is about 1.2e-38, not 0:
/// callers that mask set those values themselves). Within 2 ulp (`tests::exp_is_close_to_exact`).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // 1.5 · 2²³: adding and subtracting it rounds |v| < 2²² to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.3);
    let n = (x * LOG2_E + ROUND) - ROUND;
    let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let mut p = 1.987_569_1e-4_f32;
    for c in [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ] {
        p = p * r + c;
    }
    let e = p * (r * r) + r + 1.0;
    e * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// `tanh(x)` as `1 − 2 / (e^{2x} + 1)` with [`exp`], `x` clamped to [−10, 10] (`tanh(±10)` is ±1
/// to f32 precision). Within 2.5e-7 absolute (`tests::tanh_is_close_to_exact`): relative
/// precision near 0 is lost, which is fine where it enters as `1 + tanh` (GELU's tanh form).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let x = x.clamp(-10.0, 10.0);
    1.0 - 2.0 / (exp(2.0 * x) + 1.0)
}

/// `v` folded with `f` (associative and commutative: max, +) in 8 interleaved lanes, so the
/// loop vectorizes; the lanes are combined at the end.
#[inline(always)]
pub fn lanes_fold(v: &[f32], init: f32, f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [init; 8];
    let chunks = v.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = f(*a, x);
        }
    }
    let lanes = acc.into_iter().fold(init, &f);
    rest.iter().fold(lanes, |a, &x| f(a, x))
}

/// `Σ f(v[j])` in 8 interleaved lanes (as [`lanes_fold`]), so the loop vectorizes.
#[inline(always)]
pub fn lanes_sum_of(v: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = v.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += f(x);
        }
    }
    let lanes: f32 = acc.iter().sum();
    rest.iter().fold(lanes, |a, &x| a + f(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_is_close_to_exact() {
        for i in -60_000..=60_000 {
            let x = i as f32 * 1e-4;
            let want = libm::erf(f64::from(x));
            let got = f64::from(erf(x));
            assert!(
                (got - want).abs() <= 4.5e-7,
                "erf({x}) = {got}, want {want}"
            );
        }
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert_eq!(erf(f32::NEG_INFINITY), -1.0);
    }

    #[test]
    fn tanh_is_close_to_exact() {
        for i in -120_000..=120_000 {
            let x = i as f32 * 1e-4;
            let want = f64::from(x).tanh();
            let got = f64::from(tanh(x));
            assert!(
                (got - want).abs() <= 2.5e-7,
                "tanh({x}) = {got}, want {want}"
            );
        }
        assert_eq!(tanh(f32::INFINITY), 1.0);
        assert_eq!(tanh(f32::NEG_INFINITY), -1.0);
    }

    #[test]
    fn exp_is_close_to_exact() {
        for i in -87_000..=88_000 {
            let x = i as f32 * 1e-3;
            let want = f64::from(x).exp();
            let got = f64::from(exp(x));
            assert!(
                (got - want).abs() <= 2.5e-7 * want,
                "exp({x}) = {got}, want {want}"
            );
        }
        let tiny = exp(f32::NEG_INFINITY);
        assert!(tiny > 0.0 && tiny < 1.3e-38, "exp(-inf) = {tiny}");
        assert_eq!(exp(0.0), 1.0);
    }
}
