//! `oxinfer kl -m MODEL --ref REF -f TEXT`: KL divergence against a reference, with the
//! statistics of `llama-perplexity --kl-divergence`.

use crate::common::{read_text, ModelArgs, ModelPositional};
use crate::perplexity::{window_bos, ScoredText};
use anyhow::{bail, Context, Result};
use clap::Args;
use oxinfer::quant::Precision;
use std::io::Write;

#[derive(Args, Debug)]
pub struct KlArgs {
    /// The model under test (with --quant: converted at load).
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub positional: ModelPositional,
    /// The reference model (GGUF file, safetensors folder or cached name); it may be the same
    /// path as -m, loaded at another precision.
    #[arg(long = "ref")]
    pub reference: String,
    /// Convert the reference at load (default: as stored).
    #[arg(long, value_name = "bf16|q8|q4")]
    pub ref_quant: Option<Precision>,
    #[command(flatten)]
    pub text: ScoredText,
    /// KV cache types of the model under test (the reference keeps f32).
    #[command(flatten)]
    pub kv: crate::kv_args::KvArgs,
}

pub fn run(a: KlArgs) -> Result<()> {
    let text = read_text(&a.text.file)?;
    let model_args = a.positional.merge_into(a.model)?;
    let model = a.kv.apply(model_args.load()?)?;
    let reference = ModelArgs {
        model: Some(a.reference.clone()),
        quant: a.ref_quant,
        device: model_args.device,
        n_gpu_layers: model_args.n_gpu_layers,
        ..Default::default()
    }
    .load()
    .context("loading the reference (--ref)")?;
    let tokens = model
        .tokenize(&text, model.adds_bos())
        .context("tokenizing the text with the model's tokenizer")?;
    let ref_tokens = reference
        .tokenize(&text, reference.adds_bos())
        .context("tokenizing the text with the reference's tokenizer")?;
    if tokens != ref_tokens {
        let at = tokens
            .iter()
            .zip(&ref_tokens)
            .position(|(x, y)| x != y)
            .unwrap_or(tokens.len().min(ref_tokens.len()));
        bail!(
            "the two models tokenize the text differently ({} vs {} tokens, first difference at \
             token {at}): KL divergence needs the same tokenizer",
            tokens.len(),
            ref_tokens.len()
        );
    }
    let bos = window_bos(&model);
    if bos != window_bos(&reference) {
        bail!(
            "the two models disagree on the BOS token ({bos:?} vs {:?})",
            window_bos(&reference)
        );
    }
    a.text.announce("kl", tokens.len());
    let start = std::time::Instant::now();
    let s = oxinfer::engine::kl::kl_divergence(
        model.lm(),
        reference.lm(),
        &tokens,
        a.text.ctx,
        bos,
        a.text.chunks,
        oxinfer::engine::generate::DEFAULT_PREFILL_CHUNK,
        |done, total| {
            eprint!("[{done}/{total}]");
            let _ = std::io::stderr().flush();
        },
    )?;
    eprintln!();
    eprintln!(
        "{} chunks, {} positions scored in {:.1} s",
        s.chunks,
        s.scored,
        start.elapsed().as_secs_f64()
    );
    println!("model:      {}", model.path().display());
    println!("reference:  {}", reference.path().display());
    println!(
        "PPL(model)  = {:.4} +/- {:.5}",
        s.ppl_model.0, s.ppl_model.1
    );
    println!("PPL(ref)    = {:.4} +/- {:.5}", s.ppl_ref.0, s.ppl_ref.1);
    println!(
        "ln(PPL(model)/PPL(ref)) = {:.6}",
        (s.ppl_model.0 / s.ppl_ref.0).ln()
    );
    println!("Mean KLD    = {:.6} +/- {:.6}", s.mean_kl.0, s.mean_kl.1);
    println!("Maximum KLD = {:.6}", s.max_kl);
    println!("99.9%   KLD = {:.6}", s.p999_kl);
    println!("99.0%   KLD = {:.6}", s.p99_kl);
    println!("Median  KLD = {:.6}", s.median_kl);
    println!(
        "Same top-1  = {:.3} +/- {:.3} %",
        100.0 * s.top1_agree.0,
        100.0 * s.top1_agree.1
    );
    Ok(())
}
