//! The endpoints that describe the server: `GET /` (a status page), `GET /health`,
//! `GET /v1/models` and `GET /metrics`.

use crate::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse};
use serde_json::json;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What each endpoint does, for the status page and the start-up message.
pub(crate) const ENDPOINTS: [(&str, &str, &str); 6] = [
    (
        "POST",
        "/v1/chat/completions",
        "chat (needs the model's chat template)",
    ),
    ("POST", "/v1/completions", "raw text continuation"),
    ("GET", "/v1/models", "the model names requests may use"),
    ("GET", "/health", "liveness (no key needed)"),
    ("GET", "/metrics", "Prometheus metrics"),
    ("GET", "/", "this page"),
];

/// The start-up lines saying which endpoints this model serves (a model without a chat
/// template serves no chat).
pub fn endpoint_summary(has_template: bool) -> String {
    let mut out = String::from("endpoints:");
    for (method, path, _) in ENDPOINTS {
        let _ = write!(out, " {method} {path},");
    }
    out.pop();
    if !has_template {
        out.push_str(
            "\nnote: the model has no chat template: POST /v1/chat/completions answers 400; \
             use POST /v1/completions (raw text)",
        );
    }
    out
}

/// `200 {"status":"ok"}` while the scheduler thread runs; `503 {"status":"error", ...}` once it
/// has died (every generation request would fail), so a supervisor can restart the server.
pub async fn health(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    if st.sched.is_alive() {
        (StatusCode::OK, axum::Json(json!({"status": "ok"})))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"status": "error", "error": "the scheduler thread has stopped"})),
        )
    }
}

/// One entry per accepted name: the model's id first, then its aliases.
pub async fn models(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    let data: Vec<_> = st
        .model_names()
        .into_iter()
        .map(|name| {
            json!({
                "id": name,
                "object": "model",
                "created": st.created,
                "owned_by": "oxinfer",
                "meta": {
                    "architecture": st.model.config().arch.name(),
                    "context_length": st.cfg.ctx,
                    "parallel": st.cfg.parallel,
                },
            })
        })
        .collect();
    axum::Json(json!({"object": "list", "data": data}))
}

pub async fn metrics_text(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    st.metrics
        .queue_length
        .store(st.sched.waiting(), Ordering::Relaxed);
    let mut text = st.metrics.render();
    crate::media_parts::render_metrics(&st.media_cache, &mut text);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// `GET /`: a plain HTML page (no scripts, no external assets) with the model, the endpoints,
/// the slots in use and the uptime.
pub async fn status_page(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    let up = st.started.elapsed().as_secs();
    let uptime = format!("{}h {:02}m {:02}s", up / 3600, up / 60 % 60, up % 60);
    let names: Vec<String> = st.model_names().iter().map(|n| escape(n)).collect();
    let template = if st.model.chat_template().is_some() {
        "yes"
    } else {
        "no (chat requests answer 400; use /v1/completions)"
    };
    let mut rows = String::new();
    for (method, path, what) in ENDPOINTS {
        let _ = write!(
            rows,
            "<tr><td>{method}</td><td><code>{path}</code></td><td>{what}</td></tr>"
        );
    }
    let m = &st.metrics;
    let page = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>oxinfer</title></head><body>\
         <h1>oxinfer server</h1><table>\
         <tr><th align=left>model</th><td>{}</td></tr>\
         <tr><th align=left>architecture</th><td>{}</td></tr>\
         <tr><th align=left>chat template</th><td>{template}</td></tr>\
         <tr><th align=left>slots</th><td>{} active of {} ({} positions each), {} waiting</td></tr>\
         <tr><th align=left>uptime</th><td>{uptime}</td></tr>\
         <tr><th align=left>version</th><td>{}</td></tr>\
         </table><h2>Endpoints</h2><table>{rows}</table></body></html>",
        names.join(", "),
        escape(st.model.config().arch.name()),
        m.active_slots.load(Ordering::Relaxed),
        st.cfg.parallel,
        st.cfg.ctx,
        st.sched.waiting(),
        env!("CARGO_PKG_VERSION"),
    );
    Html(page)
}

/// `s` with HTML's special characters escaped.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_says_when_chat_is_not_served() {
        let with = endpoint_summary(true);
        assert!(with.contains("POST /v1/chat/completions") && !with.contains("note"));
        let without = endpoint_summary(false);
        assert!(without.contains("no chat template") && without.contains("/v1/completions"));
        assert_eq!(
            escape("<a href=\"x\">&"),
            "&lt;a href=&quot;x&quot;&gt;&amp;"
        );
    }
}
