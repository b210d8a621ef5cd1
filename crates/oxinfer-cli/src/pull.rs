//! `oxinfer pull REF`: fetch a model into its cache without running it, then print its path
//! (and, for a Hugging Face GGUF that takes towers from a projector, the projector's, fetched
//! with it as `run` would).

use anyhow::Result;
use clap::Args;

#[derive(Args, Debug)]
pub struct PullArgs {
    /// What to fetch: a model name, org/repo, org/repo:QUANT, org/repo/file.gguf,
    /// hf://org/repo@revision (an ollama:name[:tag] is only looked up).
    #[arg(value_name = "REF")]
    pub reference: String,
}

pub fn run(a: PullArgs) -> Result<()> {
    let mut progress = crate::progress::Bars::new();
    let path = oxinfer::hub::resolve_model(Some(&a.reference), &mut progress)?;
    println!("{}", path.display());
    if let Some(projector) = crate::common::hub_projector(Some(&a.reference), &path, &mut progress)
    {
        println!("{}", projector.display());
    }
    Ok(())
}
