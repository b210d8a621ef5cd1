//! Options and helpers shared by the subcommands.

use crate::progress::stderr_is_tty;
use anyhow::{Context, Result};
use clap::Args;
use oxinfer::engine::SamplingParams;
use oxinfer::quant::Precision;
use oxinfer::{LoadOptions, Model};
use std::path::PathBuf;

/// Model selection and threads.
#[derive(Args, Debug, Clone, Default)]
pub struct ModelArgs {
    /// A GGUF file, a safetensors folder, or a cached model name (default: smollm2-135m-instruct).
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    /// Worker threads (default: one per core).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Print per-operation time, calls and achieved GB/s or GFLOP/s (stderr) at the end.
    #[arg(long)]
    pub profile: bool,
    /// Compute device: auto (a GPU when one works, else the CPU), cpu, or cuda.
    #[arg(long, default_value_t = oxinfer::backend::DevicePref::Auto)]
    pub device: oxinfer::backend::DevicePref,
    /// Convert a safetensors model's weight matrices at load: bf16, q8 (32 int8 weights per
    /// f32 scale) or q4 (Q4_0-style: 32 4-bit weights per f16 scale). Default: as stored.
    #[arg(long, value_name = "bf16|q8|q4")]
    pub quant: Option<Precision>,
}

impl ModelArgs {
    /// Resolves (fetching the default model when needed) and loads the model.
    pub fn load(&self) -> Result<Model> {
        if let Some(n) = self.threads {
            anyhow::ensure!(n > 0, "--threads must be at least 1");
            oxinfer_kernels::set_num_threads(n);
        }
        oxinfer_kernels::profile::enable(self.profile);
        crate::devices::select(self.device)?;
        let mut progress = crate::progress::Bars::new();
        let path: PathBuf = oxinfer::hub::resolve_model(self.model.as_deref(), &mut progress)?;
        // Mapping is instant, but building a large model touches its pages: show a spinner.
        let big = std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() > 256 << 20);
        let spinner = (big && stderr_is_tty()).then(|| {
            let s = indicatif::ProgressBar::new_spinner();
            s.set_message(format!("loading {}", path.display()));
            s.enable_steady_tick(std::time::Duration::from_millis(100));
            s
        });
        let model = Model::load_with(&path, &LoadOptions { quant: self.quant });
        if let Some(s) = spinner {
            s.finish_and_clear();
        }
        let model = model?;
        if let Some(r) = model.quant_report() {
            eprintln!("{}", r.summary());
        }
        Ok(model)
    }
}

/// Sampling options.
#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Temperature (0 = greedy).
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// Top-k (0 = off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Top-p (1 = off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Min-p (0 = off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty over the last 64 tokens (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Random seed (default: random).
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            seed: self.seed.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0)
            }),
            ..SamplingParams::default()
        }
    }
}

/// Prints the `--profile` table to stderr when profiling is on.
pub fn print_profile() {
    if oxinfer_kernels::profile::enabled() {
        eprint!("{}", oxinfer_kernels::profile::report());
        if let Some(s) = oxinfer::backend::active().and_then(|b| b.stats()) {
            eprint!("{s}");
        }
    }
}

/// Reads a whole text file, naming it on failure.
pub fn read_text(path: &std::path::Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("{}", path.display()))?;
    String::from_utf8(bytes).with_context(|| format!("{}: not valid UTF-8 text", path.display()))
}
