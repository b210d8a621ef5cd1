//! `oxinfer serve`: the OpenAI-compatible HTTP server.

use crate::common::ModelArgs;
use anyhow::{Context, Result};
use clap::Args;
use oxinfer_server::ServerConfig;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address to listen on (loopback by default; 0.0.0.0 exposes the server to the network).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// TCP port (0 picks a free one; the address is printed on stderr).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on every endpoint but /health.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Requests generated at once (continuous batching slots).
    #[arg(long, default_value_t = 4)]
    pub parallel: usize,
    /// Requests that may wait for a slot; more are refused with 503.
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Context positions per slot (default: the model's context length, at most 4096).
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Largest request body in bytes (more are refused with 413).
    #[arg(long, default_value_t = 4 << 20)]
    pub max_body: usize,
}

pub fn run(a: ServeArgs) -> Result<()> {
    anyhow::ensure!(a.parallel >= 1, "--parallel must be at least 1");
    let model = a.model.load()?;
    anyhow::ensure!(
        model.tokenizer().is_some(),
        "{}: the model has no tokenizer; the server needs one",
        model.path().display()
    );
    let ctx = a
        .ctx
        .unwrap_or_else(|| model.config().context_length.min(4096));
    anyhow::ensure!(ctx >= 1, "--ctx must be at least 1");
    let model_id = model
        .path()
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    // Requests may name the model as given on the command line (or the default's name).
    let aliases = vec![a
        .model
        .model
        .clone()
        .unwrap_or_else(|| oxinfer::hub::DEFAULT_MODEL.to_string())];
    let cfg = ServerConfig {
        addr: SocketAddr::new(a.host, a.port),
        model_id,
        aliases,
        api_key: a.api_key,
        parallel: a.parallel,
        queue: a.queue,
        ctx,
        max_body: a.max_body,
    };
    eprintln!(
        "serving {} ({} slots × {} positions, queue {})",
        cfg.model_id, cfg.parallel, cfg.ctx, cfg.queue
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(oxinfer_server::serve(Arc::new(model), cfg))
        .context("serving HTTP")
}
