//! `POST /v1/chat/completions`: one reply, whole or streamed as server-sent events, with tool
//! calls parsed out of the text and JSON output constrained by a grammar.

use crate::api::{ChatRequest, Tool};
use crate::error::ApiError;
use crate::gen::{self, Job};
use crate::prompt;
use crate::scheduler::Event;
use crate::{unix_now, AppState};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use oxinfer::engine::grammar::Grammar;
use oxinfer::engine::tool_calls::{parse_call, ToolCall, ToolCallParser};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedReceiver;

/// How tool calls are read from the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ToolMode {
    /// No tools: the text is the answer.
    Off,
    /// The model may write `<tool_call>` blocks among its text.
    Auto,
    /// The output is forced (by a grammar) to be one call's JSON.
    Forced,
}

pub async fn handle(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    st.metrics.requests_chat.fetch_add(1, Ordering::Relaxed);
    match run(&st, body).await {
        Ok(r) => r,
        Err(e) => {
            st.metrics.requests_failed.fetch_add(1, Ordering::Relaxed);
            e.into_response()
        }
    }
}

/// The tools offered and how calls are read, from `tools` and `tool_choice`.
fn tool_setup(req: &ChatRequest) -> Result<(ToolMode, Vec<&Tool>), ApiError> {
    let tools: Vec<&Tool> = req.tools.iter().flatten().collect();
    if let Some(t) = tools.iter().find(|t| t.kind != "function") {
        return Err(ApiError::bad_request(format!(
            "tool type '{}' is not supported (only 'function')",
            t.kind
        ))
        .with_param("tools"));
    }
    let choice = req.tool_choice.as_ref();
    let mode = match choice {
        None | Some(Value::Null) => {
            if tools.is_empty() {
                ToolMode::Off
            } else {
                ToolMode::Auto
            }
        }
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolMode::Off,
            "auto" => ToolMode::Auto,
            "required" => ToolMode::Forced,
            other => {
                return Err(ApiError::bad_request(format!(
                    "tool_choice '{other}' is not one of none, auto, required"
                ))
                .with_param("tool_choice"))
            }
        },
        Some(v) => {
            let name = v
                .pointer("/function/name")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ApiError::bad_request("tool_choice object needs function.name")
                        .with_param("tool_choice")
                })?;
            let one: Vec<&Tool> = tools
                .iter()
                .copied()
                .filter(|t| t.function.name == name)
                .collect();
            if one.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "tool_choice names '{name}', which is not in tools"
                ))
                .with_param("tool_choice"));
            }
            return Ok((ToolMode::Forced, one));
        }
    };
    if mode != ToolMode::Off && tools.is_empty() {
        return Err(
            ApiError::bad_request("tool_choice asks for a tool but tools is empty")
                .with_param("tools"),
        );
    }
    Ok((mode, tools))
}

/// The grammar of `response_format`, if any.
fn response_grammar(rf: Option<&Value>) -> Result<Option<Grammar>, ApiError> {
    let Some(rf) = rf else { return Ok(None) };
    let bad = |m: String| ApiError::bad_request(m).with_param("response_format");
    match rf.get("type").and_then(Value::as_str) {
        None | Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Grammar::any_object())),
        Some("json_schema") => {
            let schema = rf
                .pointer("/json_schema/schema")
                .ok_or_else(|| bad("json_schema.schema is missing".into()))?;
            Grammar::from_schema(schema)
                .map(Some)
                .map_err(|e| bad(e.to_string()))
        }
        Some(other) => Err(bad(format!(
            "response_format type '{other}' is not one of text, json_object, json_schema"
        ))),
    }
}

async fn run(
    st: &Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: ChatRequest = gen::parse_body(body)?;
    st.check_model(req.model.as_deref())?;
    let sampling = gen::sampling(&req.gen)?;
    let (mode, tools) = tool_setup(&req)?;
    let mut grammar = response_grammar(req.response_format.as_ref())?;
    if mode == ToolMode::Forced {
        grammar = Some(
            Grammar::from_schema(&prompt::tool_call_schema(&tools))
                .map_err(|e| ApiError::bad_request(e.to_string()).with_param("tools"))?,
        );
    }
    let offered: Vec<Tool> = tools.iter().map(|t| (*t).clone()).collect();
    let text = prompt::render(
        &st.model,
        &req.messages,
        (mode != ToolMode::Off).then_some(offered.as_slice()),
    )?;
    let ids = st
        .model
        .tokenize(&text, st.model.adds_bos())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    gen::check_context(ids.len(), st.cfg.ctx)?;
    let job = Job {
        max_tokens: gen::max_tokens(&req.gen, ids.len(), st.cfg.ctx)?,
        prompt: ids,
        sampling,
        stop: req.gen.stop.map(|s| s.into_vec()).unwrap_or_default(),
        logprobs: req
            .logprobs
            .unwrap_or(false)
            .then(|| req.top_logprobs.unwrap_or(0).min(20) as usize),
        grammar: grammar.map(Arc::new),
    };
    let rx = gen::submit(st, job)?;
    let model = req.model.clone().unwrap_or_else(|| st.cfg.model_id.clone());
    let id = gen::new_id("chatcmpl");
    if req.gen.stream.unwrap_or(false) {
        let usage = req
            .gen
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage);
        return Ok(stream_response(st.clone(), rx, id, model, mode, usage));
    }
    let c = gen::collect(rx).await?;
    let (content, calls) = split_calls(&c.text, mode);
    let finish = if calls.is_empty() {
        c.reason.map(|r| r.as_str()).unwrap_or("stop")
    } else {
        "tool_calls"
    };
    let mut message = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(
            calls
                .iter()
                .enumerate()
                .map(|(i, c)| call_json(c, i, false))
                .collect(),
        );
        if content.is_empty() {
            message["content"] = Value::Null;
        }
    }
    let logprobs = req.logprobs.unwrap_or(false).then(|| {
        let entries: Vec<Value> = c
            .tokens
            .iter()
            .filter_map(|(id, lp)| lp.as_ref().map(|lp| gen::chat_logprob(st, *id, lp)))
            .collect();
        json!({"content": entries})
    });
    st.metrics.generated_tokens.load(Ordering::Relaxed);
    Ok(axum::Json(json!({
        "id": id,
        "object": "chat.completion",
        "created": unix_now(),
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": logprobs,
            "finish_reason": finish,
        }],
        "usage": c.usage,
    }))
    .into_response())
}

/// The content and tool calls of a whole reply.
fn split_calls(text: &str, mode: ToolMode) -> (String, Vec<ToolCall>) {
    match mode {
        ToolMode::Off => (text.to_string(), Vec::new()),
        ToolMode::Forced => match parse_call(text) {
            Some(c) => (String::new(), vec![c]),
            None => (text.to_string(), Vec::new()),
        },
        ToolMode::Auto => {
            let mut p = ToolCallParser::new();
            let mut a = p.push(text);
            let b = p.finish();
            a.content.push_str(&b.content);
            a.calls.extend(b.calls);
            (a.content.trim().to_string(), a.calls)
        }
    }
}

/// A `tool_calls` entry (`index` included when streaming).
fn call_json(c: &ToolCall, index: usize, streaming: bool) -> Value {
    let mut v = json!({
        "id": gen::new_id("call"),
        "type": "function",
        "function": {"name": c.name, "arguments": c.arguments},
    });
    if streaming {
        v["index"] = json!(index);
    }
    v
}

/// State of one streamed reply.
struct Streamer {
    st: Arc<AppState>,
    rx: UnboundedReceiver<Event>,
    id: String,
    model: String,
    created: u64,
    mode: ToolMode,
    include_usage: bool,
    parser: ToolCallParser,
    /// Forced mode: the whole output, parsed at the end.
    forced_text: String,
    calls: usize,
    /// Chunks ready to send.
    out: std::collections::VecDeque<String>,
    done: bool,
}

impl Streamer {
    fn chunk(&self, delta: Value, finish: Option<&str>, logprobs: Option<Value>) -> String {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        })
        .to_string()
    }

    fn push_text(&mut self, text: &str, logprobs: Option<Value>) {
        match self.mode {
            ToolMode::Off => {
                if !text.is_empty() || logprobs.is_some() {
                    let c = self.chunk(json!({"content": text}), None, logprobs);
                    self.out.push_back(c);
                }
            }
            ToolMode::Forced => self.forced_text.push_str(text),
            ToolMode::Auto => {
                let p = self.parser.push(text);
                self.emit(p.content, p.calls, logprobs);
            }
        }
    }

    fn emit(&mut self, content: String, calls: Vec<ToolCall>, logprobs: Option<Value>) {
        if !content.is_empty() || logprobs.is_some() {
            let c = self.chunk(json!({"content": content}), None, logprobs);
            self.out.push_back(c);
        }
        for call in calls {
            let v = call_json(&call, self.calls, true);
            self.calls += 1;
            let c = self.chunk(json!({"tool_calls": [v]}), None, None);
            self.out.push_back(c);
        }
    }

    /// Turns one scheduler event into chunks.
    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Started => {}
            Event::Token { id, text, logprob } => {
                let lp =
                    logprob.map(|lp| json!({"content": [gen::chat_logprob(&self.st, id, &lp)]}));
                self.push_text(&text, lp);
            }
            Event::Text(t) => self.push_text(&t, None),
            Event::Done {
                reason,
                prompt_tokens,
                cached_tokens,
                completion_tokens,
            } => {
                match self.mode {
                    ToolMode::Auto => {
                        let p = self.parser.finish();
                        self.emit(p.content, p.calls, None);
                    }
                    ToolMode::Forced => {
                        let text = std::mem::take(&mut self.forced_text);
                        let (content, calls) = split_calls(&text, ToolMode::Forced);
                        self.emit(content, calls, None);
                    }
                    ToolMode::Off => {}
                }
                let finish = if self.calls > 0 {
                    "tool_calls"
                } else {
                    reason.as_str()
                };
                let c = self.chunk(json!({}), Some(finish), None);
                self.out.push_back(c);
                if self.include_usage {
                    let u = json!({
                        "id": self.id,
                        "object": "chat.completion.chunk",
                        "created": self.created,
                        "model": self.model,
                        "choices": [],
                        "usage": gen::usage(prompt_tokens, cached_tokens, completion_tokens),
                    });
                    self.out.push_back(u.to_string());
                }
                self.out.push_back("[DONE]".into());
                self.done = true;
            }
            Event::Error(e) => {
                self.out.push_back(ApiError::internal(e).body().to_string());
                self.out.push_back("[DONE]".into());
                self.done = true;
            }
        }
    }
}

fn stream_response(
    st: Arc<AppState>,
    rx: UnboundedReceiver<Event>,
    id: String,
    model: String,
    mode: ToolMode,
    include_usage: bool,
) -> Response {
    let mut s = Streamer {
        st,
        rx,
        id,
        model,
        created: unix_now(),
        mode,
        include_usage,
        parser: ToolCallParser::new(),
        forced_text: String::new(),
        calls: 0,
        out: Default::default(),
        done: false,
    };
    let first = s.chunk(json!({"role": "assistant", "content": ""}), None, None);
    s.out.push_back(first);
    let events = stream::unfold(s, |mut s| async move {
        loop {
            if let Some(data) = s.out.pop_front() {
                return Some((Ok::<_, Infallible>(SseEvent::default().data(data)), s));
            }
            if s.done {
                return None;
            }
            match s.rx.recv().await {
                Some(ev) => s.on_event(ev),
                None => return None,
            }
        }
    });
    Sse::new(events.boxed())
        .keep_alive(KeepAlive::default())
        .into_response()
}
