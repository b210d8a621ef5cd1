//! `oxinfer list`: every model `-m` can name without a download, from oxinfer's cache, the
//! Hugging Face cache and Ollama's store, with size, format and quant.

use anyhow::Result;
use clap::Args;
use oxinfer::hub::listing::{list_models, Places};

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Also print each model's path on disk.
    #[arg(long)]
    pub paths: bool,
}

pub fn run(a: ListArgs) -> Result<()> {
    let places = Places::from_env();
    let models = list_models(&places);
    if models.is_empty() {
        eprintln!(
            "no models in {}, {} or {}",
            places.models_dir.display(),
            places.hf_cache.display(),
            places.ollama_store.display()
        );
        return Ok(());
    }
    let width = models.iter().map(|m| m.reference.len()).max().unwrap_or(0);
    println!(
        "{:<width$}  {:<11}  {:<11}  {:<8}  {:>9}",
        "MODEL", "SOURCE", "FORMAT", "QUANT", "SIZE"
    );
    for m in &models {
        print!(
            "{:<width$}  {:<11}  {:<11}  {:<8}  {:>9}",
            m.reference,
            m.source.to_string(),
            m.format,
            m.quant.as_deref().unwrap_or("-"),
            human_size(m.size)
        );
        if a.paths {
            print!("  {}", m.path.display());
        }
        println!();
    }
    Ok(())
}

/// `1.2 GiB`, `268 MiB`, `12 KiB`.
fn human_size(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 || v >= 10.0 {
        format!("{v:.0} {}", units[i])
    } else {
        format!("{v:.1} {}", units[i])
    }
}
