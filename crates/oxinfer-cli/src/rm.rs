//! `oxinfer rm REF`: delete a model from oxinfer's cache or the Hugging Face cache.

use anyhow::Result;
use clap::Args;
use oxinfer::hub::listing::{remove_model, Places};

#[derive(Args, Debug)]
pub struct RmArgs {
    /// The model: a model name, or org/repo (the repository's whole Hugging Face cache folder).
    #[arg(value_name = "REF")]
    pub reference: String,
}

pub fn run(a: RmArgs) -> Result<()> {
    for path in remove_model(&a.reference, &Places::from_env())? {
        println!("removed {}", path.display());
    }
    Ok(())
}
