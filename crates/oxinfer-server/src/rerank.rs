//! `POST /v1/rerank` (also `/rerank`) over a [`CrossEncoder`] (a cross-encoder or a
//! Qwen3-Reranker-style yes/no causal LM, [`oxinfer::embed::yes_no`]), in the shape llama.cpp's
//! server and the common rerank APIs use: `query`, `documents` (strings, or objects with a `text`),
//! `top_n`, `return_documents` → `results: [{index, relevance_score[, document]}]`, highest
//! score first, and `usage`; also `instruction`, the task of a Qwen3-Reranker-style model. The
//! pairs of concurrent requests run as one batch ([`crate::batcher`]). A server on a reranker
//! answers only this, `/v1/models` and `/health`; its other endpoints say so with a 400, and the
//! other servers answer `/v1/rerank` with a 400 naming their model.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use oxinfer::embed::rerank::rank;
use oxinfer::embed::{CrossEncoder, Encoded};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::batcher::Batcher;
use crate::error::ApiError;
use crate::{off_worker, ServerConfig};

/// Most documents one request may carry.
pub const MAX_DOCUMENTS: usize = 2048;

/// What the rerank handlers share.
struct RerankState {
    model: Arc<CrossEncoder>,
    /// Runs the pairs of the requests waiting together as one batch (each pass already uses
    /// every core).
    batcher: Batcher<Encoded, f32>,
    cfg: ServerConfig,
}

/// The body of `POST /v1/rerank`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RerankRequest {
    query: Value,
    documents: Value,
    model: Option<String>,
    top_n: Option<usize>,
    return_documents: Option<bool>,
    /// Not standard: `false` refuses pairs over the model's limit instead of cutting them.
    truncate: Option<bool>,
    /// Not standard: the task instruction of a Qwen3-Reranker-style model (400 for a
    /// cross-encoder).
    instruction: Option<String>,
}

/// The documents as texts; 400 for an empty list, too many, or another shape.
fn documents(v: &Value) -> Result<Vec<String>, ApiError> {
    let bad = || {
        ApiError::bad_request(
            "documents must be an array of strings or of objects with a \"text\" string",
        )
        .with_param("documents")
    };
    let Value::Array(items) = v else {
        return Err(bad());
    };
    if items.is_empty() {
        return Err(ApiError::bad_request("documents is an empty list").with_param("documents"));
    }
    if items.len() > MAX_DOCUMENTS {
        return Err(ApiError::bad_request(format!(
            "documents has {} items; at most {MAX_DOCUMENTS} per request",
            items.len()
        ))
        .with_param("documents"));
    }
    items
        .iter()
        .map(|d| match d {
            Value::String(s) => Ok(s.clone()),
            Value::Object(o) => o
                .get("text")
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(bad),
            _ => Err(bad()),
        })
        .collect()
}

async fn handle(
    State(st): State<Arc<RerankState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match run(st, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run(
    st: Arc<RerankState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: RerankRequest = crate::gen::parse_body(body)?;
    st.cfg.check_model(req.model.as_deref())?;
    let Value::String(query) = req.query else {
        return Err(ApiError::bad_request("query must be a string").with_param("query"));
    };
    let docs = documents(&req.documents)?;
    if req.top_n == Some(0) {
        return Err(ApiError::bad_request("top_n must be at least 1").with_param("top_n"));
    }
    let truncate = req.truncate.unwrap_or(true);
    let m = st.model.clone();
    let texts = docs.clone();
    let instruction = req.instruction;
    let pairs = off_worker(move || -> Result<Vec<Encoded>, ApiError> {
        texts
            .iter()
            .enumerate()
            .map(|(i, d)| m.encode_instructed_pair(i, instruction.as_deref(), &query, d, truncate))
            .collect::<Result<Vec<Encoded>, _>>()
            .map_err(|e| {
                let param = if instruction.is_some() && !e.to_string().starts_with("document") {
                    "instruction"
                } else {
                    "documents"
                };
                ApiError::bad_request(e.to_string()).with_param(param)
            })
    })
    .await??;
    let tokens = pairs.iter().map(|p| p.ids.len()).sum::<usize>();
    let scores = st.batcher.submit(pairs).await?;
    let with_docs = req.return_documents.unwrap_or(false);
    let results: Vec<Value> = rank(&scores, req.top_n)
        .into_iter()
        .map(|r| {
            let mut v = json!({"index": r.index, "relevance_score": r.score});
            if with_docs {
                v["document"] = json!({"text": docs[r.index]});
            }
            v
        })
        .collect();
    Ok(axum::Json(json!({
        "object": "list",
        "model": st.cfg.model_id,
        "results": results,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
    .into_response())
}

/// The 400 of the other endpoints on a reranker server.
async fn unavailable(State(st): State<Arc<RerankState>>, req: Request) -> ApiError {
    crate::endpoint_unavailable(&st.cfg, "reranker", req.uri().path(), "/v1/rerank")
}

/// The 400 of `/v1/rerank` on a server of a model that is not a reranker.
pub(crate) fn not_a_reranker(model_id: &str) -> ApiError {
    ApiError::bad_request(format!(
        "the model '{model_id}' is not a reranker; serve a cross-encoder with \
         `oxinfer serve -m <reranker folder>`"
    ))
    .with_param("model")
    .with_code("model_not_supported")
}

/// `/v1/rerank` on a chat-model server.
pub(crate) async fn chat_model_is_not_a_reranker(
    State(st): State<Arc<crate::AppState>>,
) -> ApiError {
    not_a_reranker(&st.cfg.model_id)
}

/// The router of a server on a reranker, behind the same key, body, JSON, `Host`/`Origin`
/// and logging layers as a generation server.
pub fn rerank_router(model: Arc<CrossEncoder>, cfg: ServerConfig) -> Router {
    let meta = json!({"kind": "reranker", "max_tokens": model.max_tokens()});
    let scorer = model.clone();
    let batcher = Batcher::start("rerank", cfg.queue, move |pairs: &[Encoded]| {
        scorer.scores_of(pairs).map_err(|e| e.to_string())
    })
    .expect("starting the rerank worker thread");
    let state = Arc::new(RerankState {
        model,
        batcher,
        cfg,
    });
    let own = Router::new()
        .route("/v1/rerank", post(handle))
        .route("/rerank", post(handle));
    crate::single_task_router(
        own,
        &["/v1/rerank"],
        post(unavailable),
        meta,
        &state.cfg,
        state.clone(),
    )
}

/// Serves a reranker on `listener` (from [`crate::bind`]) until Ctrl-C (or SIGTERM).
pub async fn serve_rerank(
    listener: std::net::TcpListener,
    model: Arc<CrossEncoder>,
    cfg: ServerConfig,
) -> std::io::Result<()> {
    let limits = cfg.limits;
    crate::serve_router(listener, rerank_router(model, cfg), limits).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_shapes() {
        let n = |v: Value| documents(&v).map(|x| x.len());
        assert_eq!(n(json!(["a", "b"])).unwrap(), 2);
        assert_eq!(n(json!([{"text": "a"}])).unwrap(), 1);
        assert!(n(json!([])).unwrap_err().message.contains("empty"));
        let many = Value::Array(vec![json!("x"); MAX_DOCUMENTS + 1]);
        assert!(n(many).unwrap_err().message.contains("at most"));
        assert!(n(json!("a")).is_err());
        assert!(n(json!([1])).is_err());
        assert!(n(json!([{"content": "a"}])).is_err());
    }
}
