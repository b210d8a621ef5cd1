//! Euler (`EulerDiscreteScheduler`, no churn) and Euler ancestral
//! (`EulerAncestralDiscreteScheduler`) in sigma space.

use super::{interp, sigma_timesteps, Prediction, ScheduleConfig, Scheduler, Spacing};

/// Timesteps and sigmas (one more than steps, ending in 0): training sigmas interpolated at the
/// timesteps.
pub(super) fn schedule(cfg: &ScheduleConfig, steps: usize) -> (Vec<f32>, Vec<f32>) {
    let train = cfg.train_sigmas();
    let ts = sigma_timesteps(cfg, steps);
    let mut sigmas: Vec<f32> = ts.iter().map(|&t| interp(t, &train) as f32).collect();
    sigmas.push(0.0);
    (ts.iter().map(|&t| t as f32).collect(), sigmas)
}

/// `σ_max` for `linspace`/`trailing`, else `√(σ_max² + 1)`.
pub(super) fn init_noise_sigma(cfg: &ScheduleConfig, sigmas: &[f32]) -> f32 {
    let max = sigmas.iter().fold(0f32, |m, &s| m.max(s));
    match cfg.spacing {
        Spacing::Linspace | Spacing::Trailing => max,
        Spacing::Leading => (max * max + 1.0).sqrt(),
    }
}

/// The predicted clean sample `x0` from the model output at sigma `s`.
fn x0(p: Prediction, s: f32, sample: f32, out: f32) -> f32 {
    match p {
        Prediction::Epsilon => sample - s * out,
        Prediction::V => out * (-s / (s * s + 1.0).sqrt()) + sample / (s * s + 1.0),
    }
}

/// One step: `x + (x − x0)/σ · (σ_next − σ)` (Euler), or to `σ_down` plus `noise · σ_up`
/// (ancestral).
pub(super) fn step(
    s: &Scheduler,
    out: &[f32],
    i: usize,
    sample: &[f32],
    noise: Option<&[f32]>,
) -> Vec<f32> {
    let (from, to) = (s.sigmas[i], s.sigmas[i + 1]);
    let p = s.config.prediction;
    match noise {
        None => {
            let dt = to - from;
            sample
                .iter()
                .zip(out)
                .map(|(&x, &o)| x + (x - x0(p, from, x, o)) / from * dt)
                .collect()
        }
        Some(noise) => {
            let up = (to * to * (from * from - to * to) / (from * from)).sqrt();
            let down = (to * to - up * up).sqrt();
            let dt = down - from;
            sample
                .iter()
                .zip(out)
                .zip(noise)
                .map(|((&x, &o), &n)| x + (x - x0(p, from, x, o)) / from * dt + n * up)
                .collect()
        }
    }
}
