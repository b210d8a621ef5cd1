//! An OpenAI-compatible HTTP server over the oxinfer engine: `POST /v1/chat/completions`
//! (streaming, tool calls, JSON-schema-constrained output, log-probabilities),
//! `POST /v1/completions`, `GET /v1/models`, `GET /health` and `GET /metrics`.
//!
//! Requests are served by continuous batching ([`scheduler`]): one thread runs the model over
//! every active request at once; the axum handlers only parse, render prompts, and turn the
//! scheduler's events into responses.

pub mod api;
mod chat;
mod completions;
mod embeddings;
pub mod error;
mod gen;
pub mod metrics;
pub mod prompt;
mod reply;
pub mod scheduler;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use error::ApiError;
use metrics::Metrics;
use oxinfer::Model;
use scheduler::{Scheduler, SchedulerConfig};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;

pub use embeddings::{embeddings_router, serve_embeddings};

/// Settings of a server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to listen on.
    pub addr: SocketAddr,
    /// The model's id in `/v1/models` and responses.
    pub model_id: String,
    /// Other names requests may use for the model (the name given on the command line).
    pub aliases: Vec<String>,
    /// Required bearer token (every endpoint but `/health`), if any.
    pub api_key: Option<String>,
    /// Requests generated at once.
    pub parallel: usize,
    /// Requests that may wait for a slot (more get 503).
    pub queue: usize,
    /// Context positions per slot.
    pub ctx: usize,
    /// Largest request body in bytes (more get 413).
    pub max_body: usize,
}

/// What every handler shares.
pub(crate) struct AppState {
    pub model: Arc<Model>,
    pub sched: Scheduler,
    pub metrics: Arc<Metrics>,
    pub cfg: ServerConfig,
    pub created: u64,
}

impl AppState {
    /// Checks the `model` field of a request: absent, the id, or an alias.
    pub fn check_model(&self, name: Option<&str>) -> Result<(), ApiError> {
        match name {
            None => Ok(()),
            Some(n) if n == self.cfg.model_id || self.cfg.aliases.iter().any(|a| a == n) => Ok(()),
            Some(n) => Err(ApiError::not_found(format!(
                "the model '{n}' does not exist; this server serves '{}'",
                self.cfg.model_id
            ))
            .with_param("model")
            .with_code("model_not_found")),
        }
    }
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

/// The router of a server on `model` (starts the scheduler thread).
pub fn router(model: Arc<Model>, cfg: ServerConfig) -> Router {
    let metrics = Arc::new(Metrics::default());
    let sched = Scheduler::start(
        model.clone(),
        SchedulerConfig {
            parallel: cfg.parallel,
            queue: cfg.queue,
            ctx: cfg.ctx,
        },
        metrics.clone(),
    );
    let max_body = cfg.max_body;
    let state = Arc::new(AppState {
        model,
        sched,
        metrics,
        cfg,
        created: unix_now(),
    });
    Router::new()
        .route("/v1/chat/completions", post(chat::handle))
        .route("/v1/completions", post(completions::handle))
        .route("/v1/embeddings", post(embeddings::not_an_embedding_model))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics_text))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth))
        .layer(axum::middleware::from_fn(require_json))
        .route("/health", get(health))
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .with_state(state)
}

/// Serves until Ctrl-C (or SIGTERM).
pub async fn serve(model: Arc<Model>, cfg: ServerConfig) -> std::io::Result<()> {
    let addr = cfg.addr;
    serve_router(addr, router(model, cfg)).await
}

/// Serves `app` on `addr` until Ctrl-C (or SIGTERM), printing the address on stderr.
pub(crate) async fn serve_router(addr: SocketAddr, app: Router) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
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
async fn auth(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &st.cfg.api_key {
        if !bearer_matches(req.headers(), key) {
            st.metrics
                .requests_failed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

/// Whether `headers` carry `Authorization: Bearer <key>`, compared without an early exit on
/// the first differing byte.
pub(crate) fn bearer_matches(headers: &axum::http::HeaderMap, key: &str) -> bool {
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

/// `200 {"status":"ok"}` while the scheduler thread runs; `503 {"status":"error", ...}` once it
/// has died (every generation request would fail), so a supervisor can restart the server.
/// Whether a `Content-Type` value names JSON (`application/json` or `application/*+json`,
/// parameters such as `charset` ignored, case-insensitive).
fn is_json_media_type(value: &str) -> bool {
    let media = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    media == "application/json"
        || media
            .strip_prefix("application/")
            .is_some_and(|sub| sub.ends_with("+json"))
}

/// Refuses (415) a POST whose body is declared as anything but JSON. A web page can send
/// `text/plain`, form or multipart bodies to a local server without a CORS preflight; refusing
/// them keeps pages a user visits from driving the API. A request without `Content-Type` is
/// let through (browsers always label the bodies they send).
async fn require_json(req: Request, next: Next) -> Response {
    if req.method() == axum::http::Method::POST {
        if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
            let given = ct.to_str().unwrap_or("(not text)");
            if !is_json_media_type(given) {
                return ApiError::unsupported_media_type(given).into_response();
            }
        }
    }
    next.run(req).await
}

async fn health(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    if st.sched.is_alive() {
        (StatusCode::OK, axum::Json(json!({"status": "ok"})))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"status": "error", "error": "the scheduler thread has stopped"})),
        )
    }
}

async fn models(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    axum::Json(json!({
        "object": "list",
        "data": [{
            "id": st.cfg.model_id,
            "object": "model",
            "created": st.created,
            "owned_by": "oxinfer",
            "meta": {
                "architecture": st.model.config().arch.name(),
                "context_length": st.cfg.ctx,
                "parallel": st.cfg.parallel,
            },
        }],
    }))
}

async fn metrics_text(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    st.metrics
        .queue_length
        .store(st.sched.waiting(), std::sync::atomic::Ordering::Relaxed);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        st.metrics.render(),
    )
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
