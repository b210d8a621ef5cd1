//! Decoding options shared by `run`, `chat` and `serve`: speculative decoding (prompt lookup,
//! a draft model). See docs/speculative.md.

use crate::common::ModelArgs;
use anyhow::{Context, Result};
use clap::Args;
use oxinfer::engine::{Speculation, Timings};
use oxinfer::Model;

/// Speculative decoding flags (llama.cpp's spellings where it has them).
#[derive(Args, Debug, Clone, Default)]
pub struct SpecArgs {
    /// Prompt-lookup speculative decoding: draft up to N tokens copied from the prompt and
    /// output so far, verified in one pass (output unchanged; fast when the reply repeats
    /// the prompt, e.g. editing code).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub lookup: usize,
    /// Draft model for speculative decoding (same vocabulary as the model): a GGUF file, a
    /// safetensors folder or a model name; or a Gemma 4 drafter folder (`model_type:
    /// gemma4_assistant`) for a Gemma 4 model, which drafts from the model's own state.
    #[arg(long = "draft", visible_alias = "model-draft", value_name = "MODEL")]
    pub draft: Option<String>,
    /// Most tokens the draft model drafts per step.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub draft_max: usize,
    /// Drafts shorter than this are not verified.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub draft_min: usize,
}

impl SpecArgs {
    /// What each request asks for.
    pub fn speculation(&self) -> Speculation {
        Speculation {
            lookup: self.lookup,
            draft_max: if self.draft.is_some() {
                self.draft_max
            } else {
                0
            },
            draft_min: self.draft_min,
        }
    }

    /// Loads the draft model, if one is named, with the main model's device and load options.
    /// A Gemma 4 drafter folder is attached to `model` instead (`Ok(None)`).
    pub fn load_draft(&self, main: &ModelArgs, model: &mut Model) -> Result<Option<Model>> {
        let Some(name) = &self.draft else {
            return Ok(None);
        };
        if let Some(dir) = self.draft_head_dir() {
            model
                .attach_draft_head(&dir)
                .with_context(|| format!("--draft {name}"))?;
            return Ok(None);
        }
        self.load_draft_model(main)
    }

    /// Loads the draft model, if one is named, with the main model's device and load options.
    pub fn load_draft_model(&self, main: &ModelArgs) -> Result<Option<Model>> {
        let Some(name) = &self.draft else {
            return Ok(None);
        };
        let args = ModelArgs {
            model: Some(name.clone()),
            ..main.clone()
        };
        args.load()
            .with_context(|| format!("loading the draft model {name}"))
            .map(Some)
    }
}

impl SpecArgs {
    /// The `--draft` folder when it holds a Gemma 4 drafter (`model_type: gemma4_assistant`).
    pub fn draft_head_dir(&self) -> Option<std::path::PathBuf> {
        let dir = std::path::PathBuf::from(self.draft.as_ref()?);
        let text = std::fs::read_to_string(dir.join("config.json")).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        (json.get("model_type")?.as_str()? == "gemma4_assistant").then_some(dir)
    }
}

/// The acceptance part of the stats line (empty without speculation).
pub fn draft_stats(t: &Timings) -> String {
    let d = t.draft;
    if d.drafted == 0 {
        return String::new();
    }
    format!(
        " | draft {} of {} accepted ({:.0} %)",
        d.accepted,
        d.drafted,
        100.0 * d.acceptance()
    )
}
