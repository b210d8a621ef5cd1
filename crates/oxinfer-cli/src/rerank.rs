//! `oxinfer rerank`: scores documents against a query with a cross-encoder or a
//! Qwen3-Reranker-style causal LM and prints them best first as JSON lines
//! `{"index", "relevance_score", "document"}`.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use oxinfer::embed::rerank::rank;
use oxinfer::embed::CrossEncoder;

#[derive(Args, Debug)]
pub struct RerankArgs {
    /// A cross-encoder folder (BertForSequenceClassification, e.g. ms-marco-MiniLM) or a
    /// Qwen3-Reranker folder (a Qwen3ForCausalLM whose path contains "reranker": scored by its
    /// "yes"/"no" logits with the model card's prompt).
    #[arg(short = 'm', long = "model")]
    pub model: String,
    /// The query.
    #[arg(short = 'q', long = "query")]
    pub query: String,
    /// A file with one document per line (every line, empty ones too, is one document).
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
    /// A document (repeatable); scored before the lines of --file.
    #[arg(short = 'd', long = "doc", value_name = "TEXT")]
    pub docs: Vec<String>,
    /// The task instruction of a Qwen3-Reranker-style model (its prompt's `<Instruct>:`), in
    /// place of the model card's "Given a web search query, retrieve relevant passages that
    /// answer the query"; cross-encoders take none.
    #[arg(long, value_name = "TEXT")]
    pub instruction: Option<String>,
    /// Print only the N best documents.
    #[arg(long = "top-n", value_name = "N")]
    pub top_n: Option<usize>,
    /// Refuse pairs longer than the model's limit instead of cutting them.
    #[arg(long)]
    pub no_truncate: bool,
    /// Worker threads (default: one per core).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Convert the model's weight matrices on load: q8 (32 int8 weights per scale), q4 or bf16
    /// (as `oxinfer embed --quant`). Default: as stored (exact f32 products).
    #[arg(long, value_name = "q8|q4|bf16")]
    pub quant: Option<oxinfer::quant::Precision>,
    /// Compute device: auto (the default: a CUDA GPU when one works, which runs BERT-family
    /// cross-encoders whole; else the CPU), cpu, cuda, or wgpu (aliases vulkan, metal).
    #[arg(long, default_value_t = oxinfer::backend::DevicePref::Auto)]
    pub device: oxinfer::backend::DevicePref,
}

pub fn run(a: RerankArgs) -> Result<()> {
    let mut docs = a.docs.clone();
    if let Some(f) = &a.file {
        let body = crate::common::read_text(f)?;
        let body = body.strip_suffix('\n').unwrap_or(&body);
        docs.extend(
            body.split('\n')
                .map(|l| l.strip_suffix('\r').unwrap_or(l).to_string()),
        );
    }
    if docs.is_empty() {
        bail!("nothing to rerank: give documents with -d TEXT or a file with -f FILE");
    }
    anyhow::ensure!(a.top_n != Some(0), "--top-n must be at least 1");
    if let Some(n) = a.threads {
        anyhow::ensure!(n > 0, "--threads must be at least 1");
        oxinfer_kernels::set_num_threads(n);
    }
    crate::devices::select_for_encoder(a.device, a.device.is_gpu())?;
    let path = PathBuf::from(&a.model);
    let model = CrossEncoder::load_quantized(&path, a.quant)
        .with_context(|| format!("-m {}: cannot load the reranker", a.model))?;
    let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
    let scores =
        model.score_instructed(a.instruction.as_deref(), &a.query, &refs, !a.no_truncate)?;
    let mut out = std::io::stdout().lock();
    for r in rank(&scores, a.top_n) {
        let line = serde_json::json!({
            "index": r.index,
            "relevance_score": r.score,
            "document": docs[r.index],
        });
        std::io::Write::write_fmt(&mut out, format_args!("{line}\n"))?;
    }
    Ok(())
}

/// `oxinfer serve` on a reranker (threads and device already set): `/v1/rerank` only.
#[cfg(feature = "server")]
pub fn serve(
    path: &std::path::Path,
    quant: Option<oxinfer::quant::Precision>,
    listener: std::net::TcpListener,
    config: impl FnOnce(String, usize) -> oxinfer_server::ServerConfig,
) -> Result<()> {
    let model = CrossEncoder::load_quantized(path, quant)?;
    let model_id = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "reranker".into());
    let cfg = config(model_id, model.max_tokens());
    eprintln!(
        "serving the reranker {} (at most {} tokens per query + document) on /v1/rerank; \
         chat, completion and embedding endpoints are not available",
        cfg.model_id,
        model.max_tokens()
    );
    crate::serve::block_on_server(oxinfer_server::serve_rerank(
        listener,
        std::sync::Arc::new(model),
        cfg,
    ))
}
