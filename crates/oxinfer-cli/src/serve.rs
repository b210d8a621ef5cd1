//! `oxinfer serve`: the OpenAI-compatible HTTP server.

use crate::common::ModelArgs;
use anyhow::{Context, Result};
use clap::Args;
use oxinfer_server::{ConnLimits, LogFormat, ServedDraft, ServerConfig};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

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
    /// Require `Authorization: Bearer KEY` on every endpoint but /health. Visible in `ps`:
    /// prefer `--api-key-file` or the `OXINFER_API_KEY` environment variable.
    #[arg(long, conflicts_with = "api_key_file")]
    pub api_key: Option<String>,
    /// Read the API key from the first line of this file (surrounding whitespace trimmed).
    #[arg(long, value_name = "PATH")]
    pub api_key_file: Option<std::path::PathBuf>,
    /// Requests generated at once (continuous batching slots).
    #[arg(long, default_value_t = 4)]
    pub parallel: usize,
    /// Requests that may wait for a slot; more are refused with 503.
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Context positions per slot (default: the model's context length, at most 4096).
    #[arg(long)]
    pub ctx: Option<usize>,
    #[command(flatten)]
    pub kv: crate::kv_args::KvArgs,
    /// Largest request body in bytes (more are refused with 413).
    #[arg(long, default_value_t = 4 << 20)]
    pub max_body: usize,
    /// Another model name for `/v1/models` to list (repeatable).
    #[arg(long = "alias", value_name = "NAME")]
    pub aliases: Vec<String>,
    /// Refuse (404) requests naming a model that is not listed by `/v1/models` (by default any
    /// name is answered by the one model, and responses name what served them).
    #[arg(long)]
    pub strict_model_names: bool,
    /// Let special-token text in chat messages (`<|im_end|>`) become control tokens. Only for
    /// trusted callers: by default it stays text, so a message cannot forge template turns.
    #[arg(long)]
    pub allow_special_in_content: bool,
    /// A host name requests may address the server by, besides localhost and IP addresses
    /// (repeatable). Bound to loopback, other names are refused (DNS rebinding); bound to
    /// another address, any name is accepted unless some are listed here.
    #[arg(long = "allowed-host", value_name = "NAME")]
    pub allowed_hosts: Vec<String>,
    /// A web page origin (`http://localhost:3000`) allowed to call the API from a browser
    /// (CORS; repeatable; `*` for any). Requests from other origins are refused.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,
    /// Seconds to receive a request's headers (also the idle keep-alive limit).
    #[arg(long, default_value_t = 30.0, value_name = "SECS")]
    pub header_timeout: f64,
    /// Seconds to receive a request's body (then 408).
    #[arg(long, default_value_t = 60.0, value_name = "SECS")]
    pub body_timeout: f64,
    /// Connections served at once; more wait until one closes.
    #[arg(long, default_value_t = 256)]
    pub max_connections: usize,
    /// Request log lines on stderr: text, json or off.
    #[arg(long, default_value = "text", value_name = "text|json|off")]
    pub log_format: LogFormat,
    /// Speculative decoding for requests that do not set their own `"speculative"` field:
    /// `--lookup N`, and `--draft MODEL` (loaded once, a draft cache per slot) with
    /// `--draft-max` / `--draft-min`.
    #[command(flatten)]
    pub spec: crate::decode_args::SpecArgs,
    /// With a single-file Stable Diffusion checkpoint: a diffusers folder of the same
    /// architecture whose configs, tokenizer and scheduler are used (as `oxinfer image
    /// --config`); without it they are inferred from the file's tensors.
    #[arg(long, value_name = "DIR")]
    pub image_config: Option<std::path::PathBuf>,
    /// With a Stable Diffusion model: LoRA files fused at load (as `oxinfer image --lora`).
    #[command(flatten)]
    pub lora: crate::image::LoraArgs,
}

/// `secs` (a flag's value) as a duration; an error names the flag.
fn seconds(secs: f64, flag: &str) -> Result<Duration> {
    anyhow::ensure!(
        secs.is_finite() && secs > 0.0 && secs <= 86_400.0,
        "{flag} must be between 0 and 86400 seconds (got {secs})"
    );
    Ok(Duration::from_secs_f64(secs))
}

/// The API key to require: `--api-key`, else the first line of `--api-key-file`, else
/// `OXINFER_API_KEY` (`env`); none when none is given. An empty key is an error, not "no key".
fn api_key(
    flag: Option<String>,
    file: Option<&std::path::Path>,
    env: Option<String>,
) -> Result<Option<String>> {
    let (key, from) = match (flag, file) {
        (Some(k), _) => (k, "--api-key".to_string()),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("{}: cannot read the API key file", path.display()))?;
            let line = text.lines().next().unwrap_or("").trim().to_string();
            (line, path.display().to_string())
        }
        (None, None) => match env {
            Some(k) => (k.trim().to_string(), "OXINFER_API_KEY".to_string()),
            None => return Ok(None),
        },
    };
    anyhow::ensure!(!key.is_empty(), "{from}: the API key is empty");
    Ok(Some(key))
}

pub fn run(a: ServeArgs) -> Result<()> {
    anyhow::ensure!(a.parallel >= 1, "--parallel must be at least 1");
    anyhow::ensure!(
        a.max_connections >= 1,
        "--max-connections must be at least 1"
    );
    let limits = ConnLimits {
        header_timeout: seconds(a.header_timeout, "--header-timeout")?,
        body_timeout: seconds(a.body_timeout, "--body-timeout")?,
        max_connections: a.max_connections,
    };
    let api_key = api_key(
        a.api_key.clone(),
        a.api_key_file.as_deref(),
        std::env::var("OXINFER_API_KEY").ok(),
    )?;
    // The port first: a busy one is reported before the model is loaded.
    let addr = SocketAddr::new(a.host, a.port);
    let listener = oxinfer_server::bind(addr)?;
    let config = |model_id: String, parallel: usize, ctx: usize| ServerConfig {
        addr,
        model_id,
        aliases: aliases(a.model.model.as_deref(), a.aliases.clone()),
        strict_model_names: a.strict_model_names,
        allow_special_in_content: a.allow_special_in_content,
        api_key: api_key.clone(),
        allowed_hosts: a.allowed_hosts.clone(),
        cors_origins: a.cors_origins.clone(),
        parallel,
        queue: a.queue,
        ctx,
        max_body: a.max_body,
        limits,
        log_format: a.log_format,
        speculation: a.spec.speculation(),
        draft: None,
    };
    let no_draft = || -> Result<()> {
        anyhow::ensure!(
            a.spec.draft.is_none(),
            "--draft applies to text generation models, not image or embedding models"
        );
        Ok(())
    };
    if let Some(path) = crate::image::pipeline_model(a.model.model.as_deref()) {
        no_draft()?;
        return crate::image::serve(&a, &path, listener, |id| config(id, 1, 77));
    }
    anyhow::ensure!(
        a.image_config.is_none(),
        "--image-config applies to a single-file Stable Diffusion checkpoint"
    );
    anyhow::ensure!(
        a.lora.lora.is_empty(),
        "--lora applies to Stable Diffusion models"
    );
    if let Some(path) = crate::embed::embedding_model_path(a.model.model.as_deref())? {
        no_draft()?;
        return crate::embed::serve(&a, &path, listener, |id, ctx| config(id, 1, ctx));
    }
    let mut model = a.kv.apply(a.model.load()?)?;
    attach_served_draft_head(&a, &mut model)?;
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
    let draft = load_served_draft(&a, &model)?;
    let cfg = ServerConfig {
        draft,
        ..config(model_id, a.parallel, ctx)
    };
    eprintln!(
        "serving {} ({} slots × {} positions, queue {})",
        cfg.model_id, cfg.parallel, cfg.ctx, cfg.queue
    );
    block_on_server(oxinfer_server::serve_on(listener, Arc::new(model), cfg))
}

/// A Gemma 4 drafter folder given as `--draft`, attached to `model` (which must be the Gemma 4
/// model it drafts for): every slot then drafts from the model's own state.
fn attach_served_draft_head(a: &ServeArgs, model: &mut oxinfer::Model) -> Result<()> {
    let Some(dir) = a.spec.draft_head_dir() else {
        return Ok(());
    };
    model
        .attach_draft_head(&dir)
        .with_context(|| format!("--draft {}", dir.display()))?;
    eprintln!(
        "draft head {} (up to {} tokens per step unless a request says otherwise)",
        dir.display(),
        a.spec.draft_max
    );
    Ok(())
}

/// The `--draft` model, loaded with the served model's options, once its vocabulary has been
/// checked against `model`'s (the first differing token is named); `None` without `--draft`
/// or when it named a drafter folder ([`attach_served_draft_head`]).
fn load_served_draft(a: &ServeArgs, model: &oxinfer::Model) -> Result<Option<ServedDraft>> {
    if a.spec.draft_head_dir().is_some() {
        return Ok(None);
    }
    let Some(draft) = a.spec.load_draft_model(&a.model)? else {
        return Ok(None);
    };
    oxinfer::engine::speculative::check_draft_model(model, &draft)
        .with_context(|| format!("--draft {}", draft.path().display()))?;
    eprintln!(
        "draft model {} (up to {} tokens per step unless a request says otherwise)",
        draft.path().display(),
        a.spec.draft_max
    );
    Ok(Some(ServedDraft(Arc::new(draft))))
}

/// Runs a server future on a two-worker async runtime until it ends (Ctrl-C or SIGTERM).
pub fn block_on_server(
    server: impl std::future::Future<Output = std::io::Result<()>>,
) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(server).context("serving HTTP")
}

/// The names besides the file stem that `/v1/models` lists: the built-in short name the
/// model was given by (or the default's when none was), then `--alias` names. A path given
/// with `-m` is not a name (and must not reach clients).
fn aliases(model_arg: Option<&str>, extra: Vec<String>) -> Vec<String> {
    let builtin = match model_arg {
        None => Some(oxinfer::hub::DEFAULT_MODEL),
        Some(m) => oxinfer::hub::find_model(m).map(|k| k.name),
    };
    builtin
        .map(str::to_string)
        .into_iter()
        .chain(extra)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{aliases, api_key};

    #[test]
    fn aliases_are_names_never_paths() {
        let default = oxinfer::hub::DEFAULT_MODEL.to_string();
        assert_eq!(aliases(None, vec![]), vec![default.clone()]);
        assert_eq!(
            aliases(Some("/models/x.gguf"), vec!["gpt-4o-mini".into()]),
            vec!["gpt-4o-mini".to_string()]
        );
        assert_eq!(aliases(Some(&default), vec![]), vec![default]);
    }

    #[test]
    fn api_key_sources_in_order() {
        let dir = std::env::temp_dir().join(format!("oxinfer-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("key");
        std::fs::write(&file, "  s3cret \nignored\n").unwrap();
        let env = || Some("from-env".to_string());
        assert_eq!(
            api_key(Some("flag".into()), None, env())
                .unwrap()
                .as_deref(),
            Some("flag")
        );
        assert_eq!(
            api_key(None, Some(&file), env()).unwrap().as_deref(),
            Some("s3cret")
        );
        assert_eq!(
            api_key(None, None, env()).unwrap().as_deref(),
            Some("from-env")
        );
        assert_eq!(api_key(None, None, None).unwrap(), None);
        let missing = dir.join("missing");
        let err = api_key(None, Some(&missing), None).unwrap_err().to_string();
        assert!(
            err.contains("missing") && err.contains("API key file"),
            "{err}"
        );
        std::fs::write(&file, "\n").unwrap();
        let err = api_key(None, Some(&file), None).unwrap_err().to_string();
        assert!(err.contains("empty"), "{err}");
        assert!(api_key(None, None, Some(" ".into())).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
