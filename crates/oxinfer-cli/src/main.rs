//! `oxinfer`: run, chat with, measure and inspect local models.

mod argv;
mod bench;
mod bench_memory;
mod chat;
mod common;
mod context_shift;
mod decode_args;
mod devices;
mod embed;
mod image;
mod info;
mod interrupt;
mod kl;
mod kv_args;
mod line_input;
mod list;
mod media_args;
mod npy;
mod perplexity;
mod positional;
mod progress;
mod pull;
mod quantize;
mod rerank;
mod rm;
mod run;
#[cfg(feature = "server")]
mod serve;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Local inference engine: open-weight models from GGUF files and safetensors folders.
#[derive(Parser)]
#[command(name = "oxinfer", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt (the default model is fetched on first use).
    #[command(override_usage = "oxinfer run [OPTIONS] [MODEL] [PROMPT]...")]
    Run(run::RunArgs),
    /// Interactive multi-turn chat (/clear forgets the history, /exit or Ctrl-D quits).
    #[command(override_usage = "oxinfer chat [OPTIONS] [MODEL]")]
    Chat(chat::ChatArgs),
    /// Perplexity of a text file, measured the way llama-perplexity does.
    Perplexity(perplexity::PerplexityArgs),
    /// Write a safetensors model's weights as a pre-quantized checkpoint (bf16, q8 or q4).
    Quantize(quantize::QuantizeArgs),
    /// KL divergence of next-token distributions against a reference model (llama-perplexity
    /// --kl-divergence statistics: mean/p99/max KL, top-1 agreement, both perplexities).
    Kl(kl::KlArgs),
    /// Describe a model: architecture, parameters, tensor formats, context, template.
    Info(info::InfoArgs),
    /// Prompt-processing and generation speed (like llama-bench); --memory for bandwidth.
    Bench(bench::BenchArgs),
    /// The CPU (features, cores, memory), the kernels chosen for it, and accelerators.
    Devices,
    /// Sentence embeddings of texts (sentence-transformers / BERT models), as JSON lines or .npy.
    Embed(embed::EmbedArgs),
    /// Rank documents against a query with a cross-encoder (reranker), best first.
    Rerank(rerank::RerankArgs),
    /// Stable Diffusion 1.x / 2.x / Turbo (diffusers folder or single file): text to image,
    /// image to image, inpainting; written as PNGs.
    Image(image::ImageArgs),
    /// OpenAI-compatible HTTP server (chat, completions, streaming, continuous batching).
    #[cfg(feature = "server")]
    Serve(serve::ServeArgs),
    /// Fetch a model (name, org/repo[:QUANT], org/repo/file.gguf) into its cache; print its path.
    Pull(pull::PullArgs),
    /// Models on this machine: oxinfer's cache, the Hugging Face cache, Ollama's store.
    List(list::ListArgs),
    /// Delete a model from oxinfer's cache or the Hugging Face cache.
    Rm(rm::RmArgs),
}

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when stdout is closed (`oxinfer run | head`) instead
    // of failing on the write.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args = match argv::normalize(std::env::args_os()) {
        Ok(a) => a,
        Err(refused) => {
            eprintln!("error: {refused}");
            return ExitCode::from(2);
        }
    };
    let cli = Cli::parse_from(args);
    let result = match cli.command {
        Command::Run(a) => run::run(a),
        Command::Chat(a) => chat::run(a),
        Command::Perplexity(a) => perplexity::run(a),
        Command::Quantize(a) => quantize::run(a),
        Command::Kl(a) => kl::run(a),
        Command::Info(a) => info::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Devices => devices::run(),
        #[cfg(feature = "server")]
        Command::Serve(a) => serve::run(a),
        Command::Embed(a) => embed::run(a),
        Command::Rerank(a) => rerank::run(a),
        Command::Image(a) => image::run(a),
        Command::Pull(a) => pull::run(a),
        Command::List(a) => list::run(a),
        Command::Rm(a) => rm::run(a),
    };
    if let Some(r) = oxinfer::backend::check_report() {
        eprint!("{r}");
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("error: {}", chain.join(": "));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
