//! `oxinfer info [MODEL]` (or `-m MODEL`): describe a model without running it.

use crate::common::{CtxArgs, ModelArgs, ModelPositional};
use anyhow::Result;
use clap::Args;

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// A GGUF file, a safetensors folder, or a model name (default: smollm2-135m-instruct).
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    #[command(flatten)]
    pub positional: ModelPositional,
    /// Say more on stderr (where the model comes from).
    #[arg(short = 'v', long)]
    pub verbose: bool,
    // -c: the context the KV cache line is computed for (default: the model's).
    #[command(flatten)]
    pub ctx: CtxArgs,
    #[command(flatten)]
    pub kv: crate::kv_args::KvArgs,
    #[command(flatten)]
    pub projector: crate::common::ProjectorArgs,
}

pub fn run(a: InfoArgs) -> Result<()> {
    // The CPU only: describing a model needs no GPU.
    let args = ModelArgs {
        model: a.model,
        device: oxinfer::backend::DevicePref::Cpu,
        verbose: a.verbose,
        projector: a.projector,
        ..Default::default()
    };
    let model = a.kv.apply(a.positional.merge_into(args)?.load()?)?;
    let i = model.info();
    let c = &i.config;
    let chat = if i.has_chat_template {
        "yes"
    } else {
        "no (a base model: `run` completes text, `chat` is refused)"
    };
    let formats: Vec<String> = i.formats.iter().map(|(f, n)| format!("{f} ×{n}")).collect();
    println!("path:            {}", i.path.display());
    println!("container:       {}", i.container);
    println!("architecture:    {}", i.architecture);
    println!(
        "parameters:      {} ({:.1} M)",
        i.parameters,
        i.parameters as f64 / 1e6
    );
    println!("tensor formats:  {}", formats.join(", "));
    println!(
        "file size:       {} bytes ({:.1} MiB)",
        i.file_size,
        i.file_size as f64 / 1048576.0
    );
    println!("context length:  {}", i.context_length);
    println!(
        "layers:          {} (hidden {}, heads {}/{} kv, head dim {}, ffn {}, vocab {})",
        c.n_layers,
        c.hidden_size,
        c.n_heads,
        c.n_kv_heads,
        c.head_dim,
        c.intermediate_size,
        c.vocab_size
    );
    println!(
        "rope:            theta {}, {:?} layout, scaling {:?}",
        c.rope.theta, c.rope.style, c.rope.scaling
    );
    if let Some(d) = &c.dtype {
        println!("dtype:           {d}");
    }
    println!(
        "tokenizer:       {}",
        if i.has_tokenizer { "yes" } else { "no" }
    );
    println!("chat template:   {chat}");
    if !i.media.is_empty() {
        let from = i
            .mmproj
            .as_ref()
            .map(|p| format!(" (towers from {})", p.display()))
            .unwrap_or_default();
        println!("media inputs:    {}{from}", i.media.join(", "));
    }
    let ctx = a.ctx.ctx.unwrap_or(i.context_length);
    let kv = model.kv_footprint(ctx);
    let mib = |b: usize| b as f64 / 1048576.0;
    let sliding = if kv.sliding_per_position > 0 {
        format!(
            " + {} bytes in sliding-window layers (up to their window)",
            kv.sliding_per_position
        )
    } else {
        String::new()
    };
    println!(
        "KV cache:        {}: {} bytes per position{sliding}; {:.1} MiB at ctx {ctx}",
        model.kv_types(),
        kv.global_per_position,
        mib(kv.total_at_ctx)
    );
    Ok(())
}
