//! `oxinfer embed`: sentence embeddings of texts given on the command line or in a file, written
//! as JSON lines (stdout or `-o x.jsonl`) or a float32 `.npy` matrix (`-o x.npy`).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use oxinfer::embed::{EmbedOptions, Embedder};

/// The model used when `-m` is not given.
const DEFAULT_EMBED_MODEL: &str = "all-minilm-l6-v2";

#[derive(Args, Debug)]
pub struct EmbedArgs {
    /// A sentence-transformers or BERT folder, or a cached model name (default:
    /// all-minilm-l6-v2, fetched on first use).
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    /// A text to embed (repeatable); embedded before the lines of --file.
    #[arg(short = 'p', long = "text", value_name = "TEXT")]
    pub texts: Vec<String>,
    /// A file with one text per line (every line, empty ones too, is one text).
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
    /// Scale every embedding to unit length (default: as the model's layout says).
    #[arg(long, overrides_with = "no_normalize")]
    pub normalize: bool,
    /// Do not scale the embeddings to unit length.
    #[arg(long, overrides_with = "normalize")]
    pub no_normalize: bool,
    /// Texts per encoder pass.
    #[arg(long = "batch", default_value_t = 32)]
    pub batch: usize,
    /// Refuse texts longer than the model's max_seq_length instead of cutting them.
    #[arg(long)]
    pub no_truncate: bool,
    /// A prompt of the model (config_sentence_transformers.json) put before every text, e.g.
    /// `query`.
    #[arg(long, value_name = "NAME")]
    pub prompt_name: Option<String>,
    /// Output file: `.npy` (float32 [texts, dim]) or `.jsonl`; default: JSON lines on stdout.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Worker threads (default: one per core).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Compute device: auto (the default: a CUDA GPU when one works, which runs the encoder
    /// whole; else the CPU), cpu, cuda, or wgpu (aliases vulkan, metal: also whole on the
    /// device, but its products are not tuned for speed yet; docs/wgpu.md).
    #[arg(long, default_value_t = oxinfer::backend::DevicePref::Auto)]
    pub device: oxinfer::backend::DevicePref,
    /// Convert the encoder's weight matrices on load: q8 (32 int8 weights per scale), q4 or
    /// bf16; they then run on the quantized matmul kernels (docs/embeddings.md, "Quantized
    /// weights"). Default: as stored (exact f32 products).
    #[arg(long, value_name = "q8|q4|bf16")]
    pub quant: Option<oxinfer::quant::Precision>,
    /// Print per-operation time, calls and achieved GB/s or GFLOP/s (stderr) at the end.
    #[arg(long)]
    pub profile: bool,
}

/// Where the embeddings go.
enum Output {
    Stdout,
    Jsonl(PathBuf),
    Npy(PathBuf),
}

fn output_kind(path: Option<&Path>) -> Result<Output> {
    let Some(p) = path else {
        return Ok(Output::Stdout);
    };
    match p.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("npy") => Ok(Output::Npy(p.to_path_buf())),
        Some(e) if e.eq_ignore_ascii_case("jsonl") => Ok(Output::Jsonl(p.to_path_buf())),
        _ => bail!("-o {}: the output must end in .npy or .jsonl", p.display()),
    }
}

/// The texts of `-p` then the lines of `-f`.
fn gather_texts(a: &EmbedArgs) -> Result<Vec<String>> {
    let mut texts = a.texts.clone();
    if let Some(f) = &a.file {
        let body = crate::common::read_text(f)?;
        let body = body.strip_suffix('\n').unwrap_or(&body);
        let body = body.strip_suffix('\r').unwrap_or(body);
        if !body.is_empty() || texts.is_empty() {
            texts.extend(
                body.split('\n')
                    .map(|l| l.strip_suffix('\r').unwrap_or(l).to_string()),
            );
        }
    }
    if texts.is_empty() {
        bail!("nothing to embed: give texts with -p TEXT or a file with -f FILE");
    }
    Ok(texts)
}

pub fn run(a: EmbedArgs) -> Result<()> {
    let output = output_kind(a.output.as_deref())?;
    anyhow::ensure!(a.batch > 0, "--batch must be at least 1");
    let texts = gather_texts(&a)?;
    if let Some(n) = a.threads {
        anyhow::ensure!(n > 0, "--threads must be at least 1");
        oxinfer_kernels::set_num_threads(n);
    }
    crate::devices::select_for_encoder(a.device, a.device.is_gpu())?;
    oxinfer_kernels::profile::enable(a.profile);
    let spec = a.model.as_deref().unwrap_or(DEFAULT_EMBED_MODEL);
    let mut progress = crate::progress::Bars::new();
    let path = oxinfer::hub::resolve_model(Some(spec), &mut progress)?;
    let embedder = Embedder::load_quantized(&path, a.quant)?;
    let prompt = match &a.prompt_name {
        Some(name) => Some(
            embedder
                .prompt(name)
                .with_context(|| format!("--prompt-name {name}: the model has no such prompt"))?
                .to_string(),
        ),
        None => None,
    };
    let opts = EmbedOptions {
        normalize: (a.normalize || a.no_normalize).then_some(a.normalize),
        truncate: !a.no_truncate,
        batch_size: a.batch,
        prompt,
    };
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let started = std::time::Instant::now();
    let vectors = embedder.embed(&refs, &opts)?;
    let secs = started.elapsed().as_secs_f64();
    match output {
        Output::Npy(p) => {
            crate::npy::write_f32(&p, &[vectors.len(), embedder.dim()], &vectors.concat())
                .with_context(|| format!("cannot write {}", p.display()))?
        }
        Output::Jsonl(p) => {
            let file = std::fs::File::create(&p)
                .with_context(|| format!("cannot create {}", p.display()))?;
            write_jsonl(std::io::BufWriter::new(file), &vectors)
                .with_context(|| format!("cannot write {}", p.display()))?
        }
        Output::Stdout => write_jsonl(std::io::stdout().lock(), &vectors)?,
    }
    if a.output.is_some() {
        eprintln!(
            "{} embeddings of dimension {} written ({secs:.2} s of tokenizing and encoding, \
             {:.1} texts/s)",
            vectors.len(),
            embedder.dim(),
            vectors.len() as f64 / secs.max(1e-9)
        );
    }
    crate::common::print_profile();
    Ok(())
}

/// The model `-m` names when it is an embedding model or a reranker (resolved through the cache, fetched
/// when needed); `None` for anything else (no `-m`: the default chat model).
#[cfg(feature = "server")]
pub fn embedding_model_path(spec: Option<&str>) -> Result<Option<PathBuf>> {
    let Some(spec) = spec else {
        return Ok(None);
    };
    let known_embedder =
        oxinfer::hub::find_model(spec).is_some_and(|m| m.file_name.ends_with(".zip"));
    let gguf_embedder = oxinfer::embed::gguf_bert::is_gguf_embedding_model(Path::new(spec));
    if !known_embedder && !gguf_embedder && !Path::new(spec).is_dir() {
        return Ok(None);
    }
    let path = oxinfer::hub::resolve_model(Some(spec), &mut crate::progress::Bars::new())?;
    let served =
        oxinfer::embed::is_embedding_model(&path) || oxinfer::embed::is_reranker_model(&path);
    Ok(served.then_some(path))
}

/// `oxinfer serve` on an embedding model (`/v1/embeddings` only) or a reranker
/// ([`crate::rerank::serve`]).
/// Serves the embedding model at `path` on `listener`; `config(model_id, ctx)` makes the
/// server settings from the command line (`oxinfer serve` builds both).
#[cfg(feature = "server")]
pub fn serve(
    a: &crate::serve::ServeArgs,
    path: &Path,
    listener: std::net::TcpListener,
    config: impl FnOnce(String, usize) -> oxinfer_server::ServerConfig,
) -> Result<()> {
    a.model.prepare_encoder_runtime()?;
    if oxinfer::embed::is_reranker_model(path) {
        return crate::rerank::serve(path, a.model.quant, listener, config);
    }
    let embedder = Embedder::load_quantized(path, a.model.quant)?;
    let model_id = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "embedding-model".into());
    let cfg = config(model_id, embedder.max_tokens());
    eprintln!(
        "serving the embedding model {} ({}-d, at most {} tokens per input) on /v1/embeddings; \
         chat and completion endpoints are not available",
        cfg.model_id,
        embedder.dim(),
        embedder.max_tokens()
    );
    crate::serve::block_on_server(oxinfer_server::serve_embeddings(
        listener,
        std::sync::Arc::new(embedder),
        cfg,
    ))
}

/// One `{"index": i, "embedding": [...]}` line per vector.
fn write_jsonl(mut w: impl Write, vectors: &[Vec<f32>]) -> std::io::Result<()> {
    for (i, v) in vectors.iter().enumerate() {
        let line = serde_json::json!({ "index": i, "embedding": v });
        writeln!(w, "{line}")?;
    }
    w.flush()
}
