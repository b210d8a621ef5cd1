//! `POST /v1/completions`: text continuation of a raw prompt, whole or streamed.

use crate::api::CompletionRequest;
use crate::error::ApiError;
use crate::gen::{self, Job};
use crate::reqlog::Tally;
use crate::scheduler::{Event, TokenLogprob};
use crate::{off_worker, unix_now, AppState};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub async fn handle(
    State(st): State<Arc<AppState>>,
    tally: Option<Extension<Arc<Tally>>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    st.metrics
        .requests_completions
        .fetch_add(1, Ordering::Relaxed);
    match run(&st, body, tally.map(|Extension(t)| t)).await {
        Ok(r) => r,
        Err(e) => {
            st.metrics.requests_failed.fetch_add(1, Ordering::Relaxed);
            e.into_response()
        }
    }
}

fn prompt_text(v: &Value) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(a) if a.len() == 1 && a[0].is_string() => {
            Ok(a[0].as_str().unwrap_or_default().to_string())
        }
        _ => Err(
            ApiError::bad_request("prompt must be a string (or an array of one string)")
                .with_param("prompt"),
        ),
    }
}

/// The legacy `logprobs` object of the completions API.
fn legacy_logprobs(st: &AppState, tokens: &[(u32, Option<TokenLogprob>)], offset0: usize) -> Value {
    let mut toks = Vec::new();
    let mut lps = Vec::new();
    let mut tops = Vec::new();
    let mut offsets = Vec::new();
    let mut off = offset0;
    for (id, lp) in tokens {
        let Some(lp) = lp else { continue };
        let (text, _) = gen::token_text(st, *id);
        offsets.push(off);
        off += text.len();
        toks.push(text);
        lps.push(lp.logprob);
        let top: serde_json::Map<String, Value> = lp
            .top
            .iter()
            .map(|&(t, l)| (gen::token_text(st, t).0, json!(l)))
            .collect();
        tops.push(Value::Object(top));
    }
    json!({"tokens": toks, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

async fn run(
    st: &Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
    tally: Option<Arc<Tally>>,
) -> Result<Response, ApiError> {
    let req: CompletionRequest = gen::parse_body(body)?;
    st.check_model(req.model.as_deref())?;
    let sampling = gen::sampling(&req.gen)?;
    gen::choices(&req.gen, 1)?;
    let stop = req.gen.stop_strings()?;
    let text = prompt_text(&req.prompt)?;
    let shared = st.clone();
    let (text, ids) = off_worker(move || {
        let ids = shared.model.tokenize(&text, shared.model.adds_bos());
        (text, ids)
    })
    .await?;
    let ids = ids.map_err(|e| ApiError::bad_request(e.to_string()))?;
    gen::check_context(ids.len(), st.cfg.ctx).map_err(|e| e.with_param("prompt"))?;
    let job = Job {
        max_tokens: match req.gen.max_tokens.or(req.gen.max_completion_tokens) {
            // The legacy endpoint's default is 16 tokens.
            None => 16.min(st.cfg.ctx.saturating_sub(ids.len()).max(1)),
            Some(_) => gen::max_tokens(&req.gen, ids.len(), st.cfg.ctx)?,
        },
        prompt: ids,
        sampling,
        stop,
        logprobs: req.logprobs.map(|k| k.min(5) as usize),
        grammar: None,
        speculation: gen::speculation(&req.gen, st.cfg.speculation, st.can_draft())?,
        media: None,
    };
    let rx = gen::submit(st, vec![job], tally)?.remove(0);
    // The name of what served the request, whichever name the request used.
    let model = st.cfg.model_id.clone();
    let id = gen::new_id("cmpl");
    let created = unix_now();
    let echo = req.echo.unwrap_or(false).then_some(text);
    if req.gen.stream.unwrap_or(false) {
        let include_usage = req
            .gen
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage);
        let chunk = move |text: &str, finish: Option<&str>| {
            json!({
                "id": id, "object": "text_completion", "created": created, "model": model,
                "choices": [{"text": text, "index": 0, "logprobs": null, "finish_reason": finish}],
            })
        };
        let mut first = echo
            .map(|e| vec![chunk(&e, None).to_string()])
            .unwrap_or_default();
        first.reverse();
        let events = stream::unfold(
            (rx, first, false, chunk),
            move |(mut rx, mut out, mut done, chunk)| async move {
                loop {
                    if let Some(d) = out.pop() {
                        return Some((
                            Ok::<_, Infallible>(SseEvent::default().data(d)),
                            (rx, out, done, chunk),
                        ));
                    }
                    if done {
                        return None;
                    }
                    let mut next = Vec::new();
                    match rx.recv().await? {
                        Event::Started => {}
                        Event::Token { text, .. } | Event::Text(text) if text.is_empty() => {}
                        Event::Token { text, .. } | Event::Text(text) => {
                            next.push(chunk(&text, None).to_string())
                        }
                        Event::Done {
                            reason,
                            prompt_tokens,
                            cached_tokens,
                            completion_tokens,
                        } => {
                            next.push(chunk("", Some(reason.as_str())).to_string());
                            if include_usage {
                                let mut u = chunk("", None);
                                u["choices"] = json!([]);
                                u["usage"] =
                                    gen::usage(prompt_tokens, cached_tokens, completion_tokens);
                                next.push(u.to_string());
                            }
                            next.push("[DONE]".into());
                            done = true;
                        }
                        Event::Error(e) => {
                            next.push(ApiError::internal(e).body().to_string());
                            next.push("[DONE]".into());
                            done = true;
                        }
                    }
                    next.reverse();
                    out = next;
                }
            },
        );
        return Ok(Sse::new(events.boxed())
            .keep_alive(KeepAlive::default())
            .into_response());
    }
    let c = gen::collect(rx).await?;
    let prefix = echo.unwrap_or_default();
    let logprobs = req
        .logprobs
        .map(|_| legacy_logprobs(st, &c.tokens, prefix.len()));
    Ok(axum::Json(json!({
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{
            "text": format!("{prefix}{}", c.text),
            "index": 0,
            "logprobs": logprobs,
            "finish_reason": c.reason.map(|r| r.as_str()).unwrap_or("stop"),
        }],
        "usage": c.usage,
    }))
    .into_response())
}
