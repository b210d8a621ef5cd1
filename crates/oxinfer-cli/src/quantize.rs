//! `oxinfer quantize MODEL --quant q8|q4|bf16 -o DIR`: on-load conversion, then the
//! pre-quantized checkpoint written (also `run --save-quantized DIR`).

use crate::common::{ModelArgs, ModelPositional};
use anyhow::{Context, Result};
use clap::Args;
use oxinfer::quant::{Precision, WriteOptions};
use oxinfer::Model;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// A safetensors folder (config.json + model.safetensors or a sharded index); or
    /// positional.
    #[arg(
        short = 'm',
        long = "model",
        required_unless_present = "positional_model"
    )]
    pub model: Option<String>,
    #[command(flatten)]
    pub positional: ModelPositional,
    /// Target precision.
    #[arg(long, value_name = "bf16|q8|q4")]
    pub quant: Precision,
    /// Output folder (created; must not already hold a model).
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Worker threads (default: one per core).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
}

/// Writes `model` to `dir` as a pre-quantized checkpoint and reports it on stderr.
pub fn save(model: &Model, dir: &Path) -> Result<()> {
    let r = model
        .save_quantized(dir, &WriteOptions::default())
        .with_context(|| format!("saving the quantized model to {}", dir.display()))?;
    eprintln!(
        "wrote {} ({} shard{}, {:.1} MB, copied {}) in {:.2} s",
        dir.display(),
        r.shards.len(),
        if r.shards.len() == 1 { "" } else { "s" },
        r.bytes as f64 / 1e6,
        if r.copied.is_empty() {
            "nothing".to_string()
        } else {
            r.copied.join(", ")
        },
        r.seconds
    );
    Ok(())
}

pub fn run(a: QuantizeArgs) -> Result<()> {
    let args = ModelArgs {
        model: a.model,
        threads: a.threads,
        quant: Some(a.quant),
        device: oxinfer::backend::DevicePref::Cpu,
        ..Default::default()
    };
    let model = a.positional.merge_into(args)?.load()?;
    save(&model, &a.output)
}
