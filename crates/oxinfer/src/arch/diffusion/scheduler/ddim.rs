//! DDIM (`DDIMScheduler`, `eta = 0`) in alpha space, the predicted clean sample clipped as
//! [`ScheduleConfig::clip_range`] says.

use super::{linspace, round_even, trailing, Prediction, ScheduleConfig, Scheduler, Spacing};

/// Integer timesteps, descending.
pub(super) fn timesteps(cfg: &ScheduleConfig, steps: usize) -> Vec<f32> {
    let t = cfg.num_train_timesteps;
    let v: Vec<f64> = match cfg.spacing {
        Spacing::Linspace => linspace(0.0, (t - 1) as f64, steps)
            .into_iter()
            .rev()
            .map(round_even)
            .collect(),
        Spacing::Leading => (0..steps)
            .rev()
            .map(|i| (i * (t / steps) + cfg.steps_offset) as f64)
            .collect(),
        Spacing::Trailing => trailing(t, steps, t),
    };
    v.into_iter().map(|x| x as f32).collect()
}

/// `x_prev = √ᾱ_prev · x0 + √(1 − ᾱ_prev) · ε`, with the previous timestep `t − T/steps`
/// (`x0` clipped when the config says so, ε not).
pub(super) fn step(s: &Scheduler, out: &[f32], i: usize, sample: &[f32]) -> Vec<f32> {
    let t = s.timesteps[i] as i64;
    let prev = t - (s.config.num_train_timesteps / s.len()) as i64;
    let ac = &s.alphas_cumprod;
    let a_t = ac[t.clamp(0, ac.len() as i64 - 1) as usize];
    let a_prev = if prev >= 0 {
        ac[prev as usize]
    } else if s.config.set_alpha_to_one {
        1.0
    } else {
        ac[0]
    };
    let b_t = 1.0 - a_t;
    let dir = (1.0 - a_prev).sqrt();
    let clip = s.config.clip_range(s.kind);
    sample
        .iter()
        .zip(out)
        .map(|(&x, &o)| {
            let (x0, eps) = match s.config.prediction {
                Prediction::Epsilon => ((x - b_t.sqrt() * o) / a_t.sqrt(), o),
                Prediction::V => (
                    a_t.sqrt() * x - b_t.sqrt() * o,
                    a_t.sqrt() * o + b_t.sqrt() * x,
                ),
            };
            // diffusers clips x0 only: ε stays the one predicted from the unclipped x0.
            let x0 = clip.map_or(x0, |r| x0.clamp(-r, r));
            a_prev.sqrt() * x0 + dir * eps
        })
        .collect()
}
