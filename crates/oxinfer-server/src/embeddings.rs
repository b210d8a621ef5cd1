//! `POST /v1/embeddings` (OpenAI shape) over an [`Embedder`]: `input` as a string, an array
//! of strings, an array of token ids or an array of such arrays; `encoding_format` `float` or
//! `base64` (little-endian float32); `dimensions` only as the model's own width (no model
//! served here is Matryoshka-trained); `usage` counts the tokens the model saw (special tokens
//! included). Inputs longer than the model's `max_seq_length` are cut, as sentence-transformers
//! does, unless the request says `"truncate": false` (then 400). The inputs of concurrent
//! requests run as one batch ([`crate::batcher`]).
//!
//! A server on an embedding model answers only this, `/v1/models` and `/health`; its chat and
//! completion endpoints say so with a 400. A server on a chat model answers `/v1/embeddings`
//! with a 400 naming the model.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use base64::Engine;
use oxinfer::embed::{EmbedOptions, Embedder, Encoded};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::batcher::Batcher;
use crate::error::ApiError;
use crate::{off_worker, ServerConfig};

/// Most inputs one request may carry (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

/// What the embedding handlers share.
struct EmbedState {
    embedder: Arc<Embedder>,
    /// Runs the inputs of the requests waiting together as one batch (each pass already uses
    /// every core).
    batcher: Batcher<Encoded, Vec<f32>>,
    cfg: ServerConfig,
}

/// The body of `POST /v1/embeddings`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmbeddingRequest {
    input: Value,
    model: Option<String>,
    encoding_format: Option<String>,
    dimensions: Option<usize>,
    #[allow(dead_code)]
    user: Option<String>,
    /// Not OpenAI: `false` refuses inputs over the model's limit instead of cutting them.
    truncate: Option<bool>,
}

/// One input as given: text or token ids.
enum Input {
    Text(String),
    Tokens(Vec<u32>),
}

/// The inputs of `input`, in order; 400 for an empty list or a value of another shape.
fn inputs(v: &Value) -> Result<Vec<Input>, ApiError> {
    let bad = || {
        ApiError::bad_request(
            "input must be a string, an array of strings, an array of token ids or an array of \
             arrays of token ids",
        )
        .with_param("input")
    };
    let tokens = |a: &[Value]| -> Result<Vec<u32>, ApiError> {
        a.iter()
            .map(|t| {
                t.as_u64()
                    .and_then(|x| u32::try_from(x).ok())
                    .ok_or_else(bad)
            })
            .collect()
    };
    match v {
        Value::String(s) => Ok(vec![Input::Text(s.clone())]),
        Value::Array(a) if a.is_empty() => {
            Err(ApiError::bad_request("input is an empty list").with_param("input"))
        }
        Value::Array(a) if a.len() > MAX_INPUTS => Err(ApiError::bad_request(format!(
            "input has {} items; at most {MAX_INPUTS} per request",
            a.len()
        ))
        .with_param("input")),
        Value::Array(a) if a.iter().all(Value::is_number) => Ok(vec![Input::Tokens(tokens(a)?)]),
        Value::Array(a) => a
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(Input::Text(s.clone())),
                Value::Array(t) => Ok(Input::Tokens(tokens(t)?)),
                _ => Err(bad()),
            })
            .collect(),
        _ => Err(bad()),
    }
}

/// One embedding in the requested encoding.
fn encode_vector(v: &[f32], base64: bool) -> Value {
    if !base64 {
        return json!(v);
    }
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
}

async fn handle(
    State(st): State<Arc<EmbedState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match run(st, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run(
    st: Arc<EmbedState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: EmbeddingRequest = crate::gen::parse_body(body)?;
    st.cfg.check_model(req.model.as_deref())?;
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "encoding_format '{other}' is not supported (float, base64)"
            ))
            .with_param("encoding_format"))
        }
    };
    let dim = st.embedder.dim();
    if let Some(d) = req.dimensions.filter(|&d| d != dim) {
        return Err(ApiError::bad_request(format!(
            "dimensions {d}: the model '{}' gives {dim}-dimensional embeddings and is not \
             Matryoshka-trained, so they cannot be shortened",
            st.cfg.model_id
        ))
        .with_param("dimensions"));
    }
    let items = inputs(&req.input)?;
    let truncate = req.truncate.unwrap_or(true);
    let e = st.embedder.clone();
    let encoded = off_worker(move || -> Result<Vec<Encoded>, ApiError> {
        let opts = EmbedOptions {
            truncate,
            ..EmbedOptions::default()
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Input::Text(t) => e.encode(i, t, &opts),
                Input::Tokens(ids) => e.encode_ids(i, ids, truncate),
            })
            .collect::<Result<Vec<Encoded>, _>>()
            .map_err(|err| ApiError::bad_request(err.to_string()).with_param("input"))
    })
    .await??;
    let tokens = encoded.iter().map(|x| x.ids.len()).sum::<usize>();
    let vectors = st.batcher.submit(encoded).await?;
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| json!({"object": "embedding", "index": i, "embedding": encode_vector(v, base64)}))
        .collect();
    Ok(axum::Json(json!({
        "object": "list",
        "data": data,
        "model": st.cfg.model_id,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
    .into_response())
}

/// The 400 of a generation endpoint on an embedding server.
async fn generation_unavailable(State(st): State<Arc<EmbedState>>, req: Request) -> ApiError {
    crate::endpoint_unavailable(&st.cfg, "embedding", req.uri().path(), "/v1/embeddings")
}

/// The 400 of `/v1/rerank` on an embedding server.
async fn not_a_reranker(State(st): State<Arc<EmbedState>>) -> ApiError {
    crate::rerank::not_a_reranker(&st.cfg.model_id)
}

/// The 400 of `/v1/embeddings` on a server of a chat model.
pub(crate) async fn not_an_embedding_model(State(st): State<Arc<crate::AppState>>) -> ApiError {
    ApiError::bad_request(format!(
        "the model '{}' is a text-generation model, not an embedding model; serve one with \
         `oxinfer serve -m <embedding model>` (e.g. all-minilm-l6-v2)",
        st.cfg.model_id
    ))
    .with_param("model")
    .with_code("model_not_supported")
}

/// The router of a server on an embedding model, behind the same key, body, JSON,
/// `Host`/`Origin` and logging layers as a generation server ([`crate::protect`]).
pub fn embeddings_router(embedder: Arc<Embedder>, cfg: ServerConfig) -> Router {
    let meta = json!({
        "kind": "embedding",
        "dimensions": embedder.dim(),
        "max_tokens": embedder.max_tokens(),
    });
    let model = embedder.clone();
    let batcher = Batcher::start("embed", cfg.queue, move |inputs: &[Encoded]| {
        model
            .embed_encoded(inputs, &EmbedOptions::default())
            .map_err(|e| e.to_string())
    })
    .expect("starting the embedding worker thread");
    let state = Arc::new(EmbedState {
        embedder,
        batcher,
        cfg,
    });
    let own = Router::new()
        .route("/v1/embeddings", post(handle))
        .route("/v1/rerank", post(not_a_reranker));
    crate::single_task_router(
        own,
        &["/v1/embeddings", "/v1/rerank"],
        post(generation_unavailable),
        meta,
        &state.cfg,
        state.clone(),
    )
}

/// Serves an embedding model on `listener` (from [`crate::bind`]) until Ctrl-C (or SIGTERM).
pub async fn serve_embeddings(
    listener: std::net::TcpListener,
    embedder: Arc<Embedder>,
    cfg: ServerConfig,
) -> std::io::Result<()> {
    let limits = cfg.limits;
    crate::serve_router(listener, embeddings_router(embedder, cfg), limits).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_shapes() {
        let n = |v: Value| inputs(&v).map(|x| x.len());
        assert_eq!(n(json!("a")).unwrap(), 1);
        assert_eq!(n(json!(["a", "b"])).unwrap(), 2);
        assert_eq!(n(json!([1, 2, 3])).unwrap(), 1);
        assert_eq!(n(json!([[1, 2], [3]])).unwrap(), 2);
        assert!(n(json!([])).unwrap_err().message.contains("empty"));
        let many = Value::Array(vec![json!("x"); MAX_INPUTS + 1]);
        assert!(n(many).unwrap_err().message.contains("at most"));
        assert!(n(json!({"a": 1})).is_err());
        assert!(n(json!([-1])).is_err());
        assert!(n(json!([["a"]])).is_err());
    }

    #[test]
    fn base64_is_little_endian_f32() {
        let v = encode_vector(&[1.0, -2.0], true);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap())
            .unwrap();
        assert_eq!(
            bytes,
            [1.0f32.to_le_bytes(), (-2.0f32).to_le_bytes()].concat()
        );
    }
}
