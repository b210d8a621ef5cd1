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
    /// Largest request body in bytes (more are refused with 413).
    #[arg(long, default_value_t = 4 << 20)]
    pub max_body: usize,
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
    if let Some(path) = crate::embed::embedding_model_path(a.model.model.as_deref())? {
        let key = api_key(
            a.api_key.clone(),
            a.api_key_file.as_deref(),
            std::env::var("OXINFER_API_KEY").ok(),
        )?;
        return crate::embed::serve(&a, &path, key);
    }
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
        api_key: api_key(
            a.api_key,
            a.api_key_file.as_deref(),
            std::env::var("OXINFER_API_KEY").ok(),
        )?,
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

#[cfg(test)]
mod tests {
    use super::api_key;

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
