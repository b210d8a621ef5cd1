//! The latent consistency model scheduler (`LCMScheduler`): timesteps skipped along an
//! `original_inference_steps`-long schedule, the consistency boundary condition
//! (`c_skip`, `c_out`) and fresh noise between steps.

use super::{linspace, Prediction, ScheduleConfig, Scheduler};

/// `σ_data` of the boundary condition (diffusers' fixed 0.5).
const SIGMA_DATA: f32 = 0.5;

/// The integer timesteps, descending: the distillation schedule `k − 1, 2k − 1, …` with
/// `k = T / original_inference_steps`, cut to its first `floor(original_inference_steps ·
/// strength)` entries (image-to-image; `strength` 1 keeps it whole), reversed, read at
/// `floor(linspace(0, len, steps))` (no endpoint). `strength` is taken as f64, as Python's
/// float.
///
/// # Errors
/// A message when `steps` exceeds the cut schedule's length or `original_inference_steps`, or
/// that exceeds the training timesteps (diffusers' checks).
pub(super) fn timesteps(
    cfg: &ScheduleConfig,
    steps: usize,
    strength: f64,
) -> Result<Vec<f32>, String> {
    let t = cfg.num_train_timesteps;
    let orig = cfg.original_inference_steps;
    if orig == 0 || orig > t {
        return Err(format!(
            "original_inference_steps = {orig}: must be between 1 and the {t} training timesteps"
        ));
    }
    let len = (orig as f64 * strength) as usize;
    if strength < 1.0 && len < steps {
        return Err(format!(
            "strength = {strength}: LCM picks its {steps} steps among the first \
             floor(original_inference_steps · strength) = floor({orig} · {strength}) = {len} \
             timesteps of its distillation schedule, too few (lower the steps or raise the \
             strength to at least {})",
            steps as f64 / orig as f64
        ));
    }
    if steps > orig {
        return Err(format!(
            "steps = {steps}: LCM takes at most original_inference_steps = {orig} steps"
        ));
    }
    let k = t / orig;
    let origin: Vec<usize> = (1..=len).rev().map(|i| i * k - 1).collect();
    // numpy's linspace(0, len, steps, endpoint=False), floored.
    let idx = linspace(0.0, origin.len() as f64, steps + 1);
    Ok(idx[..steps]
        .iter()
        .map(|&i| origin[i.floor() as usize] as f32)
        .collect())
}

/// `(c_skip, c_out)` at timestep `t`, in f32 as torch computes them.
fn boundary_scalings(t: f32, timestep_scaling: f32) -> (f32, f32) {
    let st = t * timestep_scaling;
    let d = st * st + SIGMA_DATA * SIGMA_DATA;
    (SIGMA_DATA * SIGMA_DATA / d, st / d.sqrt())
}

/// One step: the predicted `x0` (clipped when `clip_sample`), `denoised = c_out · x0 +
/// c_skip · x`, then — except on the last step — noised again to the next timestep,
/// `√ᾱ_prev · denoised + √(1 − ᾱ_prev) · noise`.
pub(super) fn step(
    s: &Scheduler,
    out: &[f32],
    i: usize,
    sample: &[f32],
    noise: Option<&[f32]>,
) -> Vec<f32> {
    let t = s.timesteps[i];
    let ac = &s.alphas_cumprod;
    let a_t = ac[t as usize];
    let b_t = 1.0 - a_t;
    let (c_skip, c_out) = boundary_scalings(t, s.config.timestep_scaling as f32);
    let clip = s.config.clip_range(s.kind);
    let denoised = sample.iter().zip(out).map(|(&x, &o)| {
        let mut x0 = match s.config.prediction {
            Prediction::Epsilon => (x - b_t.sqrt() * o) / a_t.sqrt(),
            Prediction::V => a_t.sqrt() * x - b_t.sqrt() * o,
        };
        if let Some(r) = clip {
            x0 = x0.clamp(-r, r);
        }
        c_out * x0 + c_skip * x
    });
    match (s.timesteps.get(i + 1), noise) {
        (Some(&prev), Some(noise)) => {
            let a_prev = ac[prev as usize];
            let (sa, sb) = (a_prev.sqrt(), (1.0 - a_prev).sqrt());
            denoised.zip(noise).map(|(d, &n)| sa * d + sb * n).collect()
        }
        _ => denoised.collect(),
    }
}
