//! `oxinfer perplexity`: llama-perplexity's method, same output line.

use crate::common::{read_text, ModelArgs, ModelPositional};
use anyhow::{Context, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

/// The text a scoring command reads and how it is cut into windows (shared by `perplexity`
/// and `kl`).
#[derive(Args, Debug)]
pub struct ScoredText {
    /// Text file to score.
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
    /// Window length in tokens.
    #[arg(short = 'c', long, visible_alias = "ctx-size", default_value_t = 512)]
    pub ctx: usize,
    /// Evaluate at most this many windows.
    #[arg(long)]
    pub chunks: Option<usize>,
}

impl ScoredText {
    /// Number of whole `ctx`-token windows scored out of `n_tokens` tokens (capped by --chunks).
    pub fn windows(&self, n_tokens: usize) -> usize {
        let whole = n_tokens / self.ctx.max(1);
        self.chunks.map_or(whole, |c| c.min(whole))
    }

    /// Prints the one-line header `NAME: N tokens, ctx C, W chunks` on stderr.
    pub fn announce(&self, name: &str, n_tokens: usize) {
        eprintln!(
            "{name}: {n_tokens} tokens, ctx {}, {} chunks",
            self.ctx,
            self.windows(n_tokens)
        );
    }
}

/// The BOS id a model puts before each window, if it adds one.
pub fn window_bos(model: &oxinfer::Model) -> Option<u32> {
    if model.adds_bos() {
        model.tokenizer().and_then(|t| t.bos_id())
    } else {
        None
    }
}

#[derive(Args, Debug)]
pub struct PerplexityArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub positional: ModelPositional,
    #[command(flatten)]
    pub text: ScoredText,
    #[command(flatten)]
    pub kv: crate::kv_args::KvArgs,
}

pub fn run(a: PerplexityArgs) -> Result<()> {
    let text = read_text(&a.text.file)?;
    let model = a.kv.apply(a.positional.merge_into(a.model)?.load()?)?;
    let tokens = model
        .tokenize(&text, model.adds_bos())
        .context("tokenizing the text")?;
    let bos = window_bos(&model);
    a.text.announce("perplexity", tokens.len());
    let start = std::time::Instant::now();
    let r = oxinfer::engine::perplexity::perplexity(
        model.lm(),
        &tokens,
        a.text.ctx,
        bos,
        a.text.chunks,
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
