//! Noise schedulers with diffusers' exact maths: the training noise schedule (`alphas_cumprod`),
//! timestep spacings (`linspace`, `leading`, `trailing`), and the update rules of Euler, Euler
//! ancestral ([`euler`]), DDIM ([`ddim`]), DPM-Solver++ 2M with optional Karras sigmas
//! ([`dpm`]) and the latent consistency model scheduler ([`lcm`]). Epsilon and v-prediction.
//!
//! Arrays (`sample`, `model_output`, `noise`) are flat `f32` slices of any layout, the same for
//! all three: every update is element-wise.

pub mod ddim;
pub mod dpm;
pub mod euler;
pub mod lcm;

use super::config::JsonConfig;
use super::DiffusionError;

/// Which update rule to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedulerKind {
    /// `EulerDiscreteScheduler`.
    Euler,
    /// `EulerAncestralDiscreteScheduler` (fresh noise each step).
    EulerAncestral,
    /// `DDIMScheduler` with `eta = 0`.
    Ddim,
    /// `DPMSolverMultistepScheduler`, DPM-Solver++ second order, midpoint.
    DpmPp2m,
    /// `LCMScheduler` (latent consistency models; fresh noise between steps).
    Lcm,
}

impl SchedulerKind {
    /// The CLI names, as [`Self::parse`] takes them.
    pub const NAMES: &'static str = "euler, euler-a, ddim, dpm++2m, lcm";

    /// Parses a CLI name (one of [`Self::NAMES`]) or a diffusers class name.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "euler" | "EulerDiscreteScheduler" => SchedulerKind::Euler,
            "euler-a" | "euler_a" | "EulerAncestralDiscreteScheduler" => {
                SchedulerKind::EulerAncestral
            }
            "ddim" | "DDIMScheduler" => SchedulerKind::Ddim,
            "dpm++2m" | "dpmpp2m" | "DPMSolverMultistepScheduler" => SchedulerKind::DpmPp2m,
            "lcm" | "LCMScheduler" => SchedulerKind::Lcm,
            _ => return None,
        })
    }
}

/// What the model predicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prediction {
    /// The added noise.
    Epsilon,
    /// The velocity `alpha · noise − sigma · x0`.
    V,
}

/// How inference timesteps are picked among the training ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spacing {
    Linspace,
    Leading,
    Trailing,
}

/// The fields of `scheduler/scheduler_config.json` the schedulers read.
#[derive(Clone, Debug)]
pub struct ScheduleConfig {
    pub num_train_timesteps: usize,
    pub beta_start: f64,
    pub beta_end: f64,
    /// `scaled_linear` (true) or `linear` (false).
    pub scaled_linear: bool,
    pub prediction: Prediction,
    pub spacing: Spacing,
    pub steps_offset: usize,
    /// DDIM: the "previous" alpha of the last step is 1 (else `alphas_cumprod[0]`).
    pub set_alpha_to_one: bool,
    /// DPM-Solver++: Karras sigmas.
    pub karras: bool,
    /// LCM: the length of the distillation schedule the timesteps are picked from.
    pub original_inference_steps: usize,
    /// LCM: what timesteps are multiplied by in the boundary condition (`timestep_scaling`).
    pub timestep_scaling: f64,
    /// DDIM, LCM: `clip_sample` as the file writes it (`None` when absent: the default of the
    /// class that runs, as diffusers' `from_config`), see [`Self::clip_range`].
    pub clip_sample: Option<bool>,
    /// DDIM, LCM: `clip_sample_range` (default 1).
    pub clip_sample_range: f64,
}

impl ScheduleConfig {
    /// Parses `scheduler_config.json` (any scheduler class: the shared fields).
    pub fn parse(c: &JsonConfig) -> Result<Self, DiffusionError> {
        c.expect_str("beta_schedule", "linear", &["linear", "scaled_linear"])?;
        c.expect_str("prediction_type", "epsilon", &["epsilon", "v_prediction"])?;
        c.expect_str(
            "timestep_spacing",
            "linspace",
            &["linspace", "leading", "trailing"],
        )?;
        if c.bool_or("rescale_betas_zero_snr", false)? {
            return Err(DiffusionError::config(
                &c.path,
                "field 'rescale_betas_zero_snr': not supported",
            ));
        }
        if c.bool_or("thresholding", false)? {
            return Err(DiffusionError::config(
                &c.path,
                "field 'thresholding': not supported",
            ));
        }
        if c.has("trained_betas") {
            return Err(DiffusionError::config(
                &c.path,
                "field 'trained_betas': not supported",
            ));
        }
        let n = c.usize_or("num_train_timesteps", 1000)?;
        if n < 2 {
            return Err(DiffusionError::config(
                &c.path,
                "field 'num_train_timesteps' must be at least 2",
            ));
        }
        Ok(ScheduleConfig {
            num_train_timesteps: n,
            beta_start: c.f64_or("beta_start", 0.0001)?,
            beta_end: c.f64_or("beta_end", 0.02)?,
            scaled_linear: c.str_or("beta_schedule", "linear")? == "scaled_linear",
            prediction: match c.str_or("prediction_type", "epsilon")? {
                "v_prediction" => Prediction::V,
                _ => Prediction::Epsilon,
            },
            spacing: match c.str_or("timestep_spacing", "linspace")? {
                "leading" => Spacing::Leading,
                "trailing" => Spacing::Trailing,
                _ => Spacing::Linspace,
            },
            steps_offset: c.usize_or("steps_offset", 0)?,
            set_alpha_to_one: c.bool_or("set_alpha_to_one", true)?,
            karras: c.bool_or("use_karras_sigmas", false)?,
            original_inference_steps: c.usize_or("original_inference_steps", 50)?,
            timestep_scaling: c.f64_or("timestep_scaling", 10.0)?,
            clip_sample: if c.has("clip_sample") {
                Some(c.bool_or("clip_sample", false)?)
            } else {
                None
            },
            clip_sample_range: c.f64_or("clip_sample_range", 1.0)?,
        })
    }

    /// The range `r` that `kind` clamps its predicted clean sample to (`[-r, r]`), when it
    /// clips: `clip_sample` of the config, or when the config has none (another class's file,
    /// e.g. an Euler config run with DDIM) the class's default as diffusers' `from_config`
    /// gives it: `DDIMScheduler` clips (range 1), `LCMScheduler` does not; the other kinds
    /// never clip.
    pub fn clip_range(&self, kind: SchedulerKind) -> Option<f32> {
        let default = match kind {
            SchedulerKind::Ddim => true,
            SchedulerKind::Lcm => false,
            _ => return None,
        };
        self.clip_sample
            .unwrap_or(default)
            .then_some(self.clip_sample_range as f32)
    }

    /// `alphas_cumprod` in f32 as torch computes it: betas `linspace(√start, √end)²`
    /// (scaled_linear) or `linspace(start, end)`, then the running product of `1 − beta`.
    pub fn alphas_cumprod(&self) -> Vec<f32> {
        let n = self.num_train_timesteps;
        let (a, b) = if self.scaled_linear {
            (self.beta_start.sqrt(), self.beta_end.sqrt())
        } else {
            (self.beta_start, self.beta_end)
        };
        let mut acc = 1f32;
        (0..n)
            .map(|i| {
                let v = (a + (b - a) * i as f64 / (n - 1) as f64) as f32;
                let beta = if self.scaled_linear { v * v } else { v };
                acc *= 1.0 - beta;
                acc
            })
            .collect()
    }

    /// The sigma of every training timestep, `√((1 − ᾱ) / ᾱ)` (f32).
    pub fn train_sigmas(&self) -> Vec<f32> {
        self.alphas_cumprod()
            .iter()
            .map(|&a| ((1.0 - a) / a).sqrt())
            .collect()
    }
}

/// `np.linspace(start, end, n)`.
pub(crate) fn linspace(start: f64, end: f64, n: usize) -> Vec<f64> {
    match n {
        0 => Vec::new(),
        1 => vec![start],
        _ => {
            let step = (end - start) / (n - 1) as f64;
            (0..n)
                .map(|i| {
                    if i == n - 1 {
                        end
                    } else {
                        start + step * i as f64
                    }
                })
                .collect()
        }
    }
}

/// Round half to even, as numpy's `round`.
pub(crate) fn round_even(v: f64) -> f64 {
    let r = v.round();
    if (v - v.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - v.signum()
    } else {
        r
    }
}

/// `np.interp(x, 0..len, ys)` for `x` within `[0, len − 1]`.
pub(crate) fn interp(x: f64, ys: &[f32]) -> f64 {
    let last = ys.len() - 1;
    if x <= 0.0 {
        return f64::from(ys[0]);
    }
    if x >= last as f64 {
        return f64::from(ys[last]);
    }
    let i = x.floor() as usize;
    let f = x - i as f64;
    f64::from(ys[i]) + (f64::from(ys[i + 1]) - f64::from(ys[i])) * f
}

/// The timesteps of Euler-style schedulers (descending; fractional for `linspace`).
pub(crate) fn sigma_timesteps(cfg: &ScheduleConfig, steps: usize) -> Vec<f64> {
    let t = cfg.num_train_timesteps;
    match cfg.spacing {
        // numpy computes this linspace in float32.
        Spacing::Linspace => linspace(0.0, (t - 1) as f64, steps)
            .into_iter()
            .rev()
            .map(|v| f64::from(v as f32))
            .collect(),
        Spacing::Leading => {
            let ratio = t / steps;
            (0..steps)
                .rev()
                .map(|i| (i * ratio + cfg.steps_offset) as f64)
                .collect()
        }
        Spacing::Trailing => trailing(t, steps, t),
    }
}

/// `round(arange(from, 0, −t/steps)) − 1`.
pub(crate) fn trailing(t: usize, steps: usize, from: usize) -> Vec<f64> {
    let ratio = t as f64 / steps as f64;
    let mut out = Vec::new();
    let mut v = from as f64;
    let mut i = 0;
    while v > 0.0 {
        out.push(round_even(v) - 1.0);
        i += 1;
        v = from as f64 - ratio * i as f64;
    }
    out
}

/// A scheduler set up for a number of steps: the timesteps the UNet sees and the update rule.
pub struct Scheduler {
    /// The rule.
    pub kind: SchedulerKind,
    /// The shared configuration.
    pub config: ScheduleConfig,
    /// The timestep of each step, as the UNet gets it.
    pub timesteps: Vec<f32>,
    /// Sigma-space schedulers: `sigmas[i]` for step `i`, and a final one (usually 0).
    pub sigmas: Vec<f32>,
    alphas_cumprod: Vec<f32>,
    /// DPM-Solver++: the last data predictions, newest last.
    history: Vec<Vec<f32>>,
}

impl Scheduler {
    /// Sets up `kind` for `steps` steps.
    ///
    /// # Errors
    /// `steps` is 0 or more than the training timesteps.
    pub fn new(
        kind: SchedulerKind,
        config: ScheduleConfig,
        steps: usize,
    ) -> Result<Self, DiffusionError> {
        Self::with_strength(kind, config, steps, 1.0)
    }

    /// Sets up `kind` for `steps` steps of an image-to-image run of `strength` (in `[0, 1]`,
    /// f64 as Python's float) the way diffusers' `LCMScheduler.set_timesteps(steps,
    /// strength=…)` does: LCM picks its `steps` timesteps among the first
    /// `floor(original_inference_steps · strength)` of its distillation schedule (all of them
    /// run; `LatentConsistencyModelImg2ImgPipeline`). Other kinds ignore `strength`: their
    /// image-to-image runs the last steps of the whole schedule instead (the pipeline's cut).
    ///
    /// # Errors
    /// As [`Self::new`]; LCM: a cut schedule shorter than `steps`.
    pub fn with_strength(
        kind: SchedulerKind,
        config: ScheduleConfig,
        steps: usize,
        strength: f64,
    ) -> Result<Self, DiffusionError> {
        if steps == 0 || steps > config.num_train_timesteps {
            return Err(DiffusionError::Argument(format!(
                "steps = {steps}: must be between 1 and the {} training timesteps",
                config.num_train_timesteps
            )));
        }
        let alphas_cumprod = config.alphas_cumprod();
        let (timesteps, sigmas) = match kind {
            SchedulerKind::Euler | SchedulerKind::EulerAncestral => euler::schedule(&config, steps),
            SchedulerKind::Ddim => (ddim::timesteps(&config, steps), Vec::new()),
            SchedulerKind::DpmPp2m => dpm::schedule(&config, steps),
            SchedulerKind::Lcm => (
                lcm::timesteps(&config, steps, strength).map_err(DiffusionError::Argument)?,
                Vec::new(),
            ),
        };
        Ok(Scheduler {
            kind,
            config,
            timesteps,
            sigmas,
            alphas_cumprod,
            history: Vec::new(),
        })
    }

    /// Steps.
    pub fn len(&self) -> usize {
        self.timesteps.len()
    }

    /// Whether there are no steps (never, once made).
    pub fn is_empty(&self) -> bool {
        self.timesteps.is_empty()
    }

    /// What the initial noise is multiplied by.
    pub fn init_noise_sigma(&self) -> f32 {
        match self.kind {
            SchedulerKind::Euler | SchedulerKind::EulerAncestral => {
                euler::init_noise_sigma(&self.config, &self.sigmas)
            }
            _ => 1.0,
        }
    }

    /// Whether [`Self::step`] needs fresh noise (ancestral sampling, LCM).
    pub fn needs_noise(&self) -> bool {
        matches!(
            self.kind,
            SchedulerKind::EulerAncestral | SchedulerKind::Lcm
        )
    }

    /// The UNet input of step `i`: `sample` scaled in place (`/ √(σ² + 1)` for Euler-style).
    pub fn scale_model_input(&self, sample: &mut [f32], i: usize) {
        if matches!(
            self.kind,
            SchedulerKind::Euler | SchedulerKind::EulerAncestral
        ) {
            let s = self.sigmas[i];
            let d = (s * s + 1.0).sqrt();
            sample.iter_mut().for_each(|v| *v /= d);
        }
    }

    /// `original` noised to the level of step `i` with `noise` (image-to-image's start):
    /// `x + σ_i · n` for Euler-style schedulers, `α_i · x + σ_i · n` with
    /// `α = 1/√(σ² + 1)` for DPM-Solver++, `√ᾱ_t · x + √(1 − ᾱ_t) · n` for DDIM and LCM.
    pub fn add_noise(&self, original: &[f32], noise: &[f32], i: usize) -> Vec<f32> {
        let (a, b) = match self.kind {
            SchedulerKind::Euler | SchedulerKind::EulerAncestral => (1.0, self.sigmas[i]),
            SchedulerKind::DpmPp2m => {
                let s = self.sigmas[i];
                let a = 1.0 / (s * s + 1.0).sqrt();
                (a, s * a)
            }
            SchedulerKind::Ddim | SchedulerKind::Lcm => {
                let ac = self.alphas_cumprod[self.timesteps[i] as usize];
                (ac.sqrt(), (1.0 - ac).sqrt())
            }
        };
        original
            .iter()
            .zip(noise)
            .map(|(&x, &n)| a * x + b * n)
            .collect()
    }

    /// The sample after step `i`, from the model's output at that step. `noise` (same length)
    /// is required by Euler ancestral and by LCM (but on its last step), ignored otherwise.
    ///
    /// # Errors
    /// Lengths that differ, `i` past the last step, missing noise.
    pub fn step(
        &mut self,
        model_output: &[f32],
        i: usize,
        sample: &[f32],
        noise: Option<&[f32]>,
    ) -> Result<Vec<f32>, DiffusionError> {
        if i >= self.len() {
            return Err(DiffusionError::Argument(format!(
                "step {i} of a {}-step schedule",
                self.len()
            )));
        }
        if model_output.len() != sample.len() || noise.is_some_and(|n| n.len() != sample.len()) {
            return Err(DiffusionError::Argument(
                "scheduler step: model output, sample and noise lengths differ".into(),
            ));
        }
        Ok(match self.kind {
            SchedulerKind::Euler => euler::step(self, model_output, i, sample, None),
            SchedulerKind::EulerAncestral => {
                let n = noise.ok_or_else(|| {
                    DiffusionError::Argument("Euler ancestral needs noise for every step".into())
                })?;
                euler::step(self, model_output, i, sample, Some(n))
            }
            SchedulerKind::Ddim => ddim::step(self, model_output, i, sample),
            SchedulerKind::DpmPp2m => dpm::step(self, model_output, i, sample),
            SchedulerKind::Lcm => {
                if noise.is_none() && i + 1 < self.len() {
                    return Err(DiffusionError::Argument(
                        "LCM needs noise for every step but the last".into(),
                    ));
                }
                lcm::step(self, model_output, i, sample, noise)
            }
        })
    }
}
