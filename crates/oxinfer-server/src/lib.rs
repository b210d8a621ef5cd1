//! An OpenAI-compatible HTTP server over the oxinfer engine: `POST /v1/chat/completions`
//! (streaming, tool calls, JSON-schema-constrained output, log-probabilities),
//! `POST /v1/completions`, `GET /v1/models`, `GET /health`, `GET /metrics` and a status page
//! at `GET /`.
//!
//! Requests are served by continuous batching ([`scheduler`]): one thread runs the model over
//! every active request at once; the axum handlers only parse, render prompts, and turn the
//! scheduler's events into responses.

pub mod access;
pub mod api;
mod batcher;
mod chat;
mod compiler;
mod completions;
mod embeddings;
pub mod error;
mod gen;
pub mod histogram;
mod images;
mod info;
pub mod listen;
pub mod media_parts;
pub mod metrics;
pub mod prompt;
mod reply;
pub mod reqlog;
mod rerank;
pub mod scheduler;

use access::AccessPolicy;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use error::ApiError;
pub use info::endpoint_summary;
use listen::BodyLimits;
pub use listen::{bind, ConnLimits};
use metrics::Metrics;
use oxinfer::Model;
pub use reqlog::LogFormat;
use scheduler::{Scheduler, SchedulerConfig};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

pub use embeddings::{embeddings_router, serve_embeddings};
pub use images::{images_router, serve_images};
pub use rerank::{rerank_router, serve_rerank};

/// Settings of a server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to listen on.
    pub addr: SocketAddr,
    /// The model's id: listed first by `/v1/models` and named as `model` in every response.
    pub model_id: String,
    /// Other names `/v1/models` lists and requests may use (the built-in short name, and
    /// `--alias` names).
    pub aliases: Vec<String>,
    /// Refuse (404) a request naming a model that is neither the id nor an alias; otherwise
    /// any name is answered by the one model.
    pub strict_model_names: bool,
    /// Parse special-token text in message content as control tokens (trusted callers only:
    /// by default `<|im_end|>` written in a message stays text, issue 24 item 6).
    pub allow_special_in_content: bool,
    /// Required bearer token (every endpoint but `/health`), if any.
    pub api_key: Option<String>,
    /// Host names accepted besides `localhost` and IP literals (see [`access`]).
    pub allowed_hosts: Vec<String>,
    /// Web page origins allowed to call the API (CORS); `*` allows every origin.
    pub cors_origins: Vec<String>,
    /// Requests generated at once.
    pub parallel: usize,
    /// Requests that may wait for a slot (more get 503).
    pub queue: usize,
    /// Context positions per slot.
    pub ctx: usize,
    /// Largest request body in bytes (more get 413).
    pub max_body: usize,
    /// Timeouts and the connection limit.
    pub limits: ConnLimits,
    /// How each request is logged on stderr.
    pub log_format: LogFormat,
    /// Speculative decoding of requests that do not ask otherwise (`--lookup`, and
    /// `--draft-max` / `--draft-min` with a draft model).
    pub speculation: oxinfer::engine::Speculation,
    /// The draft model of draft-model speculation (`--draft`), if any.
    pub draft: Option<ServedDraft>,
}

/// A draft model for speculative decoding (same vocabulary as the served model: check it with
/// [`oxinfer::engine::speculative::check_vocabularies`] first).
#[derive(Clone)]
pub struct ServedDraft(pub Arc<Model>);

impl std::fmt::Debug for ServedDraft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServedDraft({})", self.0.path().display())
    }
}

/// What every handler shares.
pub(crate) struct AppState {
    pub model: Arc<Model>,
    pub sched: Scheduler,
    /// Where grammars are compiled (a bounded set of threads).
    pub compiler: compiler::Compiler,
    pub metrics: Arc<Metrics>,
    /// Encoder outputs of recent images and audio, by content hash.
    pub media_cache: oxinfer::engine::media::MediaCache,
    pub cfg: ServerConfig,
    pub created: u64,
    pub started: Instant,
}

impl ServerConfig {
    /// The names `/v1/models` lists: the id, then each alias once.
    pub fn model_names(&self) -> Vec<String> {
        let mut names = vec![self.model_id.clone()];
        for a in &self.aliases {
            if !names.contains(a) {
                names.push(a.clone());
            }
        }
        names
    }

    /// Checks the `model` field of a request: any name, unless `strict_model_names` asks for
    /// the id or an alias (absent is always fine).
    pub(crate) fn check_model(&self, name: Option<&str>) -> Result<(), ApiError> {
        match name {
            Some(n) if self.strict_model_names && !self.model_names().iter().any(|m| m == n) => {
                Err(ApiError::not_found(format!(
                    "the model '{n}' does not exist; this server serves '{}' \
                     (started with --strict-model-names)",
                    self.model_id
                ))
                .with_param("model")
                .with_code("model_not_found"))
            }
            _ => Ok(()),
        }
    }
}

impl AppState {
    /// The names `/v1/models` lists ([`ServerConfig::model_names`]).
    pub fn model_names(&self) -> Vec<String> {
        self.cfg.model_names()
    }

    /// Checks the `model` field of a request ([`ServerConfig::check_model`]).
    pub fn check_model(&self, name: Option<&str>) -> Result<(), ApiError> {
        self.cfg.check_model(name)
    }

    /// Whether requests may ask for drafts (`speculative.draft_max`): the server has a draft
    /// model, or the served model a draft head (a Gemma 4 drafter given as `--draft`).
    pub fn can_draft(&self) -> bool {
        self.cfg.draft.is_some() || self.model.draft_head().is_some()
    }
}

/// `GET /health` of a server without a scheduler (embedding and image models): it answers
/// while the process serves.
pub(crate) async fn plain_health() -> impl IntoResponse {
    axum::Json(serde_json::json!({"status": "ok"}))
}

/// The 400 of an endpoint the served model does not offer: `kind` says what the model is
/// ("embedding", "image"), `offered` which endpoint it serves instead.
pub(crate) fn endpoint_unavailable(
    cfg: &ServerConfig,
    kind: &str,
    path: &str,
    offered: &str,
) -> ApiError {
    ApiError::bad_request(format!(
        "this server serves the {kind} model '{}': {path} is not available (only {offered})",
        cfg.model_id
    ))
    .with_code("model_not_supported")
}

/// Runs `f` on tokio's blocking pool (grammar compilation, template rendering, tokenization:
/// work a request controls must not hold an async worker); a panic in `f` becomes a 500.
pub(crate) async fn off_worker<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("preparing the request failed: {e}")))
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The router of a server on `model` (starts the scheduler thread). Generation endpoints
/// sit behind the API key, the JSON content-type check and the body reader; every route
/// behind the `Host`/`Origin` check and the request log.
pub fn router(model: Arc<Model>, cfg: ServerConfig) -> Router {
    let metrics = Arc::new(Metrics::default());
    let sched = Scheduler::start(
        model.clone(),
        SchedulerConfig {
            parallel: cfg.parallel,
            queue: cfg.queue,
            ctx: cfg.ctx,
            draft: cfg.draft.as_ref().map(|d| d.0.clone()),
        },
        metrics.clone(),
    );
    let state = Arc::new(AppState {
        model,
        sched,
        compiler: compiler::Compiler::start(),
        metrics,
        media_cache: oxinfer::engine::media::MediaCache::new(media_parts::MEDIA_CACHE_ENTRIES),
        cfg,
        created: unix_now(),
        started: Instant::now(),
    });
    let api = Router::new()
        .route("/v1/chat/completions", post(chat::handle))
        .route("/v1/completions", post(completions::handle))
        .route("/v1/embeddings", post(embeddings::not_an_embedding_model))
        .route("/v1/images/generations", post(images::not_an_image_model))
        .route("/v1/images/edits", post(images::not_an_image_model))
        .route("/v1/rerank", post(rerank::chat_model_is_not_a_reranker))
        .route("/v1/models", get(info::models))
        .route("/metrics", get(info::metrics_text))
        .route("/", get(info::status_page));
    let key = KeyCheck {
        key: state.cfg.api_key.clone(),
        metrics: Some(state.metrics.clone()),
    };
    protect(api, get(info::health), key, &state.cfg).with_state(state)
}

/// What the API-key layer checks: the key, if any, and the metrics that count refusals.
#[derive(Clone)]
pub(crate) struct KeyCheck {
    pub(crate) key: Option<String>,
    pub(crate) metrics: Option<Arc<Metrics>>,
}

/// The task endpoints a server may offer; a single-task server answers the others with a 400.
const TASK_ENDPOINTS: [&str; 6] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/rerank",
    "/v1/images/generations",
    "/v1/images/edits",
];

/// The one endpoint whose body is `multipart/form-data` (OpenAI's `images.edit` uploads files).
const MULTIPART_ENDPOINT: &str = "/v1/images/edits";

/// The router of a server on a model that does one task (embeddings, reranking, images):
/// `own` holds its routes (paths `own_paths`); `/v1/models` lists the one model with `meta`;
/// every other task endpoint answers through `unavailable`; all behind [`protect`]'s layers
/// with the plain `/health`.
pub(crate) fn single_task_router<S: Send + Sync + 'static>(
    own: Router<Arc<S>>,
    own_paths: &[&str],
    unavailable: axum::routing::MethodRouter<Arc<S>>,
    meta: serde_json::Value,
    cfg: &ServerConfig,
    state: Arc<S>,
) -> Router {
    let key = KeyCheck {
        key: cfg.api_key.clone(),
        metrics: None,
    };
    let listing = serde_json::json!({
        "object": "list",
        "data": [{
            "id": cfg.model_id,
            "object": "model",
            "created": unix_now(),
            "owned_by": "oxinfer",
            "meta": meta,
        }],
    });
    let mut api = own.route(
        "/v1/models",
        get(move || std::future::ready(axum::Json(listing))),
    );
    for path in TASK_ENDPOINTS.iter().filter(|p| !own_paths.contains(p)) {
        api = api.route(path, unavailable.clone());
    }
    protect(api, get(plain_health), key, cfg).with_state(state)
}

/// The layers every server shares, around `api` (the routes behind the key): the body reader
/// (size and time limits), the JSON content-type check and the API key; then `/health`
/// (outside the key), the `Host`/`Origin` check and the request log around everything.
pub(crate) fn protect<S: Clone + Send + Sync + 'static>(
    api: Router<S>,
    health: axum::routing::MethodRouter<S>,
    key: KeyCheck,
    cfg: &ServerConfig,
) -> Router<S> {
    let body = BodyLimits {
        max_bytes: cfg.max_body,
        timeout: cfg.limits.body_timeout,
    };
    let policy = Arc::new(AccessPolicy::new(
        cfg.addr.ip(),
        &cfg.allowed_hosts,
        &cfg.cors_origins,
    ));
    api.fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            body,
            listen::read_body,
        ))
        .layer(axum::middleware::from_fn(require_json))
        .layer(axum::middleware::from_fn_with_state(Arc::new(key), auth))
        .route("/health", health)
        .layer(axum::middleware::from_fn_with_state(policy, access::check))
        .layer(axum::middleware::from_fn_with_state(
            cfg.log_format,
            reqlog::log,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(body.max_bytes))
}

/// Serves on `listener` (from [`bind`]) until Ctrl-C (or SIGTERM).
pub async fn serve_on(
    listener: std::net::TcpListener,
    model: Arc<Model>,
    cfg: ServerConfig,
) -> std::io::Result<()> {
    eprintln!(
        "{}",
        info::endpoint_summary(model.chat_template().is_some())
    );
    let limits = cfg.limits;
    serve_router(listener, router(model, cfg), limits).await
}

/// Serves `app` on `listener` with `limits` until Ctrl-C (or SIGTERM), printing the address
/// on stderr.
pub(crate) async fn serve_router(
    listener: std::net::TcpListener,
    app: Router,
    limits: ConnLimits,
) -> std::io::Result<()> {
    eprintln!("listening on http://{}", listener.local_addr()?);
    listen::serve_connections(listener, app, limits, shutdown_signal()).await
}

/// Binds `cfg.addr` and serves until Ctrl-C (or SIGTERM).
pub async fn serve(model: Arc<Model>, cfg: ServerConfig) -> std::io::Result<()> {
    let listener = bind(cfg.addr)?;
    serve_on(listener, model, cfg).await
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// Requires `Authorization: Bearer <key>` when the server has a key.
async fn auth(State(check): State<Arc<KeyCheck>>, req: Request, next: Next) -> Response {
    if let Some(key) = &check.key {
        if !bearer_matches(req.headers(), key) {
            if let Some(m) = &check.metrics {
                m.requests_failed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

/// Whether `headers` carry `Authorization: Bearer <key>`, compared without an early exit on
/// the first differing byte.
fn bearer_matches(headers: &axum::http::HeaderMap, key: &str) -> bool {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    given.is_some_and(|g| {
        g.len() == key.len()
            && g.bytes()
                .zip(key.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    })
}

/// Whether a `Content-Type` value names JSON (`application/json` or `application/*+json`,
/// parameters such as `charset` ignored, case-insensitive).
fn is_json_media_type(value: &str) -> bool {
    let media = media_type(value);
    media == "application/json"
        || media
            .strip_prefix("application/")
            .is_some_and(|sub| sub.ends_with("+json"))
}

/// Refuses (415) a POST whose body is declared as anything but JSON. A web page can send
/// `text/plain`, form or multipart bodies to a local server without a CORS preflight; refusing
/// them keeps pages a user visits from driving the API. A request without `Content-Type` is
/// let through (browsers always label the bodies they send). The exception is
/// `multipart/form-data` on [`MULTIPART_ENDPOINT`], the shape OpenAI's `images.edit` sends:
/// there the `Origin` check ([`access`]) still refuses pages of other sites, and a key, when
/// set, is a header no page can add without a preflight.
async fn require_json(req: Request, next: Next) -> Response {
    if req.method() == axum::http::Method::POST {
        if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
            let given = ct.to_str().unwrap_or("(not text)");
            let multipart = req.uri().path() == MULTIPART_ENDPOINT && is_multipart_form(given);
            if !is_json_media_type(given) && !multipart {
                return ApiError::unsupported_media_type(given).into_response();
            }
        }
    }
    next.run(req).await
}

/// Whether `given` is `multipart/form-data` (any parameters, any case).
fn is_multipart_form(given: &str) -> bool {
    media_type(given) == "multipart/form-data"
}

/// The media type of a `Content-Type` value: before any parameters, trimmed, lower case.
fn media_type(value: &str) -> String {
    value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::with_status(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} is not allowed on {}", req.method(), req.uri().path()),
    )
}

async fn not_found(req: Request) -> ApiError {
    ApiError::with_status(
        StatusCode::NOT_FOUND,
        format!("no route for {} {}", req.method(), req.uri().path()),
    )
}

#[cfg(test)]
mod tests {
    use super::is_json_media_type;

    #[test]
    fn multipart_forms() {
        use super::is_multipart_form;
        assert!(is_multipart_form("multipart/form-data; boundary=x"));
        assert!(is_multipart_form("Multipart/Form-Data"));
        assert!(!is_multipart_form("multipart/mixed; boundary=x"));
        assert!(!is_multipart_form("application/json"));
    }

    #[test]
    fn json_media_types() {
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/vnd.api+json",
        ] {
            assert!(is_json_media_type(ok), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "",
            "json",
        ] {
            assert!(!is_json_media_type(bad), "{bad}");
        }
    }
}
