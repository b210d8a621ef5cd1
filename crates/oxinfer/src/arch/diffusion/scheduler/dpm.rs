//! DPM-Solver++ 2M (`DPMSolverMultistepScheduler`: `dpmsolver++`, order 2, midpoint, first
//! order on the last step, final sigma 0), optionally with Karras sigmas.

use super::{
    interp, linspace, round_even, trailing, Prediction, ScheduleConfig, Scheduler, Spacing,
};

/// Integer timesteps and sigmas (one more, ending in 0).
pub(super) fn schedule(cfg: &ScheduleConfig, steps: usize) -> (Vec<f32>, Vec<f32>) {
    let t = cfg.num_train_timesteps;
    let train = cfg.train_sigmas();
    let mut ts: Vec<f64> = match cfg.spacing {
        Spacing::Linspace => {
            let mut v: Vec<f64> = linspace(0.0, (t - 1) as f64, steps + 1)
                .into_iter()
                .map(round_even)
                .collect();
            v.reverse();
            v.pop();
            v
        }
        Spacing::Leading => {
            let ratio = t / (steps + 1);
            (1..=steps)
                .rev()
                .map(|i| (i * ratio + cfg.steps_offset) as f64)
                .collect()
        }
        Spacing::Trailing => trailing(t, steps, t),
    };
    let mut sigmas: Vec<f64>;
    if cfg.karras {
        let (lo, hi) = (f64::from(train[0]), f64::from(train[t - 1]));
        let rho = 7.0;
        let (min_r, max_r) = (lo.powf(1.0 / rho), hi.powf(1.0 / rho));
        sigmas = linspace(0.0, 1.0, steps)
            .into_iter()
            .map(|r| (max_r + r * (min_r - max_r)).powf(rho))
            .collect();
        let logs: Vec<f64> = train.iter().map(|&s| f64::from(s.ln())).collect();
        ts = sigmas
            .iter()
            .map(|&s| round_even(sigma_to_t(s, &logs)))
            .collect();
    } else {
        sigmas = ts.iter().map(|&x| interp(x, &train)).collect();
    }
    sigmas.push(0.0);
    (
        ts.iter().map(|&x| x as f32).collect(),
        sigmas.iter().map(|&x| x as f32).collect(),
    )
}

/// The fractional training timestep of `sigma`, interpolating in log-sigma as diffusers'
/// `_sigma_to_t`.
fn sigma_to_t(sigma: f64, log_sigmas: &[f64]) -> f64 {
    let ls = sigma.max(1e-10).ln();
    let n = log_sigmas.len();
    let low = log_sigmas
        .iter()
        .filter(|&&l| ls - l >= 0.0)
        .count()
        .saturating_sub(1)
        .min(n - 2);
    // cumsum(dists >= 0).argmax(): the last index where the running count is greatest, which is
    // the count of log-sigmas at or below `ls` minus one (they ascend).
    let (l, h) = (log_sigmas[low], log_sigmas[low + 1]);
    let w = ((l - ls) / (l - h)).clamp(0.0, 1.0);
    (1.0 - w) * low as f64 + w * (low + 1) as f64
}

/// `(alpha_t, sigma_t)` of a sigma: `1 / √(σ² + 1)` and `σ · alpha_t`.
fn alpha_sigma(s: f32) -> (f32, f32) {
    let a = 1.0 / (s * s + 1.0).sqrt();
    (a, s * a)
}

/// `log(alpha) − log(sigma)`.
fn lambda(s: f32) -> f32 {
    let (a, sg) = alpha_sigma(s);
    a.ln() - sg.ln()
}

/// One step: the data prediction `x0`, then a first-order update (first and last step) or the
/// second-order midpoint update with the previous `x0`.
pub(super) fn step(s: &mut Scheduler, out: &[f32], i: usize, sample: &[f32]) -> Vec<f32> {
    let sig = s.sigmas[i];
    let (a_s, s_s) = alpha_sigma(sig);
    let x0: Vec<f32> = sample
        .iter()
        .zip(out)
        .map(|(&x, &o)| match s.config.prediction {
            Prediction::Epsilon => (x - s_s * o) / a_s,
            Prediction::V => a_s * x - s_s * o,
        })
        .collect();
    let last = i + 1 == s.len();
    let second = !s.history.is_empty() && i >= 1 && !last;
    let sig_t = s.sigmas[i + 1];
    let (a_t, s_t) = alpha_sigma(sig_t);
    let h = lambda(sig_t) - lambda(sig);
    let c = a_t * ((-h).exp() - 1.0);
    let ratio = s_t / s_s;
    let next = if second {
        let prev = s.history.last().expect("history");
        let h0 = lambda(sig) - lambda(s.sigmas[i - 1]);
        let r0 = h0 / h;
        sample
            .iter()
            .zip(&x0)
            .zip(prev)
            .map(|((&x, &m0), &m1)| {
                let d1 = (1.0 / r0) * (m0 - m1);
                ratio * x - c * m0 - 0.5 * c * d1
            })
            .collect()
    } else {
        sample
            .iter()
            .zip(&x0)
            .map(|(&x, &m0)| ratio * x - c * m0)
            .collect()
    };
    s.history.push(x0);
    if s.history.len() > 1 {
        s.history.remove(0);
    }
    next
}
