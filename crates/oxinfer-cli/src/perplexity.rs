//! `oxinfer perplexity`: llama-perplexity's method, same output line.

use crate::common::{read_text, ModelArgs};
use anyhow::{Context, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct PerplexityArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Text file to score.
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
    /// Window length in tokens.
    #[arg(short = 'c', long, default_value_t = 512)]
    pub ctx: usize,
    /// Evaluate at most this many windows.
    #[arg(long)]
    pub chunks: Option<usize>,
}

pub fn run(a: PerplexityArgs) -> Result<()> {
    let text = read_text(&a.file)?;
    let model = a.model.load()?;
    let tokens = model
        .tokenize(&text, model.adds_bos())
        .context("tokenizing the text")?;
    let bos = if model.adds_bos() {
        model.tokenizer().and_then(|t| t.bos_id())
    } else {
        None
    };
    eprintln!(
        "perplexity: {} tokens, ctx {}, {} chunks",
        tokens.len(),
        a.ctx,
        a.chunks.map_or(tokens.len() / a.ctx.max(1), |c| c
            .min(tokens.len() / a.ctx.max(1)))
    );
    let start = std::time::Instant::now();
    let r = oxinfer::engine::perplexity::perplexity(
        model.lm(),
        &tokens,
        a.ctx,
        bos,
        a.chunks,
        oxinfer::engine::generate::DEFAULT_PREFILL_CHUNK,
        |done, _total, ppl| {
            eprint!("[{done}]{ppl:.4},");
            let _ = std::io::stderr().flush();
        },
    )?;
    eprintln!();
    eprintln!(
        "{} chunks, {} tokens scored in {:.1} s",
        r.chunks,
        r.scored,
        start.elapsed().as_secs_f64()
    );
    println!("PPL = {:.4} +/- {:.5}", r.ppl, r.error);
    Ok(())
}
