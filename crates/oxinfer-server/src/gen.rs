//! What both generation endpoints share: reading the body, sampling settings, the context
//! check, submitting to the scheduler, and collecting its events.

use crate::api::GenFields;
use crate::error::ApiError;
use crate::reqlog::Tally;
use crate::scheduler::{self, Event, GenRequest, Refused, TokenLogprob};
use crate::AppState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use oxinfer::engine::grammar::Grammar;
use oxinfer::engine::{GenerateOptions, SamplingParams, SeqRequest, Speculation, StopReason};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// Parses a JSON body; malformed JSON or a wrong field gives 400, an oversized body 413.
pub fn parse_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body.map_err(|r| ApiError::with_status(r.status(), r.body_text()))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid: {e}")))
}

/// A fresh response id with `prefix`.
pub fn new_id(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    format!("{prefix}-{:x}{:04x}", t, n & 0xffff)
}

/// Sampling settings from the request (llama.cpp's defaults for fields not given).
pub fn sampling(g: &GenFields) -> Result<SamplingParams, ApiError> {
    let mut p = SamplingParams::default();
    if let Some(t) = g.temperature {
        p.temperature = t;
    }
    if let Some(v) = g.top_p {
        p.top_p = v;
    }
    if let Some(k) = g.top_k {
        p.top_k = usize::try_from(k)
            .map_err(|_| ApiError::bad_request("top_k must be ≥ 0").with_param("top_k"))?;
    }
    if let Some(v) = g.min_p {
        p.min_p = v;
    }
    if let Some(v) = g.presence_penalty {
        p.presence_penalty = v;
    }
    if let Some(v) = g.frequency_penalty {
        p.frequency_penalty = v;
    }
    if let Some(v) = g.repeat_penalty {
        p.repeat_penalty = v;
    }
    p.seed = match g.seed {
        Some(s) => s as u64,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    };
    p.validate()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(p)
}

/// Most prompt-lookup or draft-model tokens a request may ask for per step.
pub const MAX_LOOKUP: u32 = 64;

/// Speculative decoding of a request: its `speculative` field over the server's `default`
/// (`lookup` and `draft_max` each replace the default's when given; 0 turns one off).
/// `draft_max` above 0 needs a draft model or draft head (`has_draft`).
pub fn speculation(
    g: &GenFields,
    default: Speculation,
    has_draft: bool,
) -> Result<Speculation, ApiError> {
    let Some(f) = g.speculative.as_ref() else {
        return Ok(default);
    };
    let bad = |msg: String| Err(ApiError::bad_request(msg).with_param("speculative"));
    for (name, v) in [("lookup", f.lookup), ("draft_max", f.draft_max)] {
        if let Some(n) = v.filter(|&n| n > MAX_LOOKUP) {
            return bad(format!(
                "speculative.{name} {n} is more than the {MAX_LOOKUP} allowed"
            ));
        }
    }
    if f.draft_max.is_some_and(|n| n > 0) && !has_draft {
        return bad(
            "speculative.draft_max needs a draft model or drafter: this server was \
                    started without --draft"
                .to_string(),
        );
    }
    Ok(Speculation {
        lookup: f.lookup.map_or(default.lookup, |n| n as usize),
        draft_max: f.draft_max.map_or(default.draft_max, |n| n as usize),
        ..default
    })
}

/// How many choices (`n`) the request asks for, at most `max`.
pub fn choices(g: &GenFields, max: u32) -> Result<usize, ApiError> {
    match g.n {
        None => Ok(1),
        Some(n) if (1..=max).contains(&n) => Ok(n as usize),
        Some(n) => Err(ApiError::bad_request(format!(
            "n = {n} is not supported (1 ..= {max} here)"
        ))
        .with_param("n")),
    }
}

/// Most tokens to generate: the request's limit, else what the context leaves.
pub fn max_tokens(g: &GenFields, prompt: usize, ctx: usize) -> Result<usize, ApiError> {
    let left = ctx.saturating_sub(prompt).max(1);
    match g.max_completion_tokens.or(g.max_tokens) {
        Some(0) => {
            Err(ApiError::bad_request("max_tokens must be at least 1").with_param("max_tokens"))
        }
        Some(n) => Ok((n as usize).min(left)),
        None => Ok(left),
    }
}

/// 400 when the prompt does not fit the context, saying by how much.
pub fn check_context(prompt: usize, ctx: usize) -> Result<(), ApiError> {
    if prompt == 0 {
        return Err(ApiError::bad_request("the prompt is empty"));
    }
    if prompt > ctx {
        return Err(ApiError::bad_request(format!(
            "the prompt is {prompt} tokens long, which exceeds the context of {ctx} tokens by {} tokens",
            prompt - ctx
        ))
        .with_param("messages")
        .with_code("context_length_exceeded"));
    }
    Ok(())
}

/// Everything the scheduler needs but the channel.
pub struct Job {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    pub logprobs: Option<usize>,
    pub grammar: Option<Arc<Grammar>>,
    pub speculation: Speculation,
    /// Soft tokens of the prompt's images and audio ([`crate::media_parts`]).
    pub media: Option<Arc<oxinfer::plan::media::MediaEmbeds>>,
}

/// Queues `jobs` (the `n` choices of one request) all together or not at all: 503 with
/// `Retry-After` when the queue cannot take every one (nothing is submitted then), 400 when
/// they are more than slots plus queue places.
/// `tally` (the request log's) receives the token counts of every job.
pub fn submit(
    st: &AppState,
    jobs: Vec<Job>,
    tally: Option<Arc<Tally>>,
) -> Result<Vec<UnboundedReceiver<Event>>, ApiError> {
    let mut rxs = Vec::with_capacity(jobs.len());
    let mut reqs = Vec::with_capacity(jobs.len());
    for job in jobs {
        let (tx, rx) = unbounded_channel();
        let opts = GenerateOptions {
            max_tokens: job.max_tokens,
            sampling: job.sampling,
            stop: job.stop,
            logprobs: job.logprobs,
            grammar: job.grammar,
            speculation: job.speculation,
            media: job.media,
            ..GenerateOptions::default()
        };
        let seq = SeqRequest {
            prompt: job.prompt,
            opts,
        };
        reqs.push(GenRequest::new(seq, tx).with_tally(tally.clone()));
        rxs.push(rx);
    }
    st.sched.submit_all(reqs).map_err(|r| match r {
        Refused::QueueFull { waiting } => {
            st.metrics
                .rejected_queue_full
                .fetch_add(1, Ordering::Relaxed);
            ApiError::busy(waiting, scheduler::retry_after(&st.metrics))
        }
        Refused::TooMany { asked, capacity } => ApiError::bad_request(format!(
            "n = {asked} choices exceed what this server can hold at once \
             ({capacity}: --parallel plus --queue)"
        ))
        .with_param("n"),
    })?;
    Ok(rxs)
}

/// A finished generation, collected from the events.
#[derive(Debug, Default)]
pub struct Collected {
    pub text: String,
    pub tokens: Vec<(u32, Option<TokenLogprob>)>,
    pub reason: Option<StopReason>,
    pub usage: Value,
}

/// The `usage` object.
pub fn usage(prompt: usize, cached: usize, completion: usize) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    })
}

/// Waits for the whole generation.
pub async fn collect(mut rx: UnboundedReceiver<Event>) -> Result<Collected, ApiError> {
    let mut c = Collected::default();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Started => {}
            Event::Token { id, text, logprob } => {
                c.text.push_str(&text);
                c.tokens.push((id, logprob));
            }
            Event::Text(t) => c.text.push_str(&t),
            Event::Done {
                reason,
                prompt_tokens,
                cached_tokens,
                completion_tokens,
            } => {
                c.reason = Some(reason);
                c.usage = usage(prompt_tokens, cached_tokens, completion_tokens);
                return Ok(c);
            }
            Event::Error(e) => return Err(ApiError::internal(e)),
        }
    }
    Err(ApiError::internal("the scheduler stopped"))
}

/// The text of a token for log-probability lists.
pub fn token_text(st: &AppState, id: u32) -> (String, Vec<u8>) {
    let bytes = st
        .model
        .tokenizer()
        .and_then(|t| t.token_bytes(id))
        .unwrap_or_default()
        .to_vec();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// One chat `logprobs.content` entry.
pub fn chat_logprob(st: &AppState, id: u32, lp: &TokenLogprob) -> Value {
    let (text, bytes) = token_text(st, id);
    let top: Vec<Value> = lp
        .top
        .iter()
        .map(|&(t, l)| {
            let (tt, tb) = token_text(st, t);
            json!({"token": tt, "logprob": l, "bytes": tb})
        })
        .collect();
    json!({"token": text, "logprob": lp.logprob, "bytes": bytes, "top_logprobs": top})
}
