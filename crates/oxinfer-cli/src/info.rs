//! `oxinfer info MODEL`.

use anyhow::Result;
use clap::Args;

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// A GGUF file, a safetensors folder, or a cached model name.
    pub model: String,
}

pub fn run(a: InfoArgs) -> Result<()> {
    let model = crate::common::ModelArgs {
        model: Some(a.model),
        device: oxinfer::backend::DevicePref::Cpu,
        ..Default::default()
    }
    .load()?;
    let i = model.info();
    let c = &i.config;
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
    println!(
        "chat template:   {}",
        if i.has_chat_template { "yes" } else { "no" }
    );
    Ok(())
}
