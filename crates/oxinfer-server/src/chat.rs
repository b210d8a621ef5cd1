//! `POST /v1/chat/completions`: `n` replies (generated side by side through the scheduler),
//! whole or streamed as server-sent events, with tool calls (in the template's format) and a
//! thinking model's `reasoning_content` parsed out of the text, and JSON output constrained by
//! a grammar. A reply cut by `max_tokens` ends with `finish_reason: "length"` and may then be
//! incomplete JSON, as with OpenAI.

use crate::api::{ChatRequest, Tool, MAX_CONSTRAINED_TOP_K};
use crate::error::ApiError;
use crate::gen::{self, Job};
use crate::media_parts;
use crate::prompt;
use crate::reply::{Delta, ReplyParser, ToolMode};
use crate::reqlog::Tally;
use crate::scheduler::Event;
use crate::{off_worker, unix_now, AppState};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use futures_util::stream::{self, BoxStream, StreamExt};
use oxinfer::engine::grammar::Grammar;
use oxinfer::engine::thinking::prompt_opens_think;
use oxinfer::engine::tool_calls::{ToolCall, ToolFormat};
use oxinfer::engine::SamplingParams;
use oxinfer::tokenizer::GuardedPrompt;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedReceiver;

pub async fn handle(
    State(st): State<Arc<AppState>>,
    tally: Option<Extension<Arc<Tally>>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    st.metrics.requests_chat.fetch_add(1, Ordering::Relaxed);
    match run(&st, body, tally.map(|Extension(t)| t)).await {
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

/// Most choices (`n`) one request may ask for.
const MAX_N: u32 = 16;

/// How replies of this request are read.
#[derive(Clone, Copy)]
struct Reading {
    mode: ToolMode,
    format: ToolFormat,
    /// Split off a reasoning trace (`Some(true)`: the prompt opened it).
    think: Option<bool>,
}

impl Reading {
    fn parser(&self) -> ReplyParser {
        ReplyParser::new(self.mode, self.format, self.think)
    }
}

/// A tool call id the model's template accepts back.
fn call_id(format: ToolFormat) -> String {
    match format {
        ToolFormat::Mistral => {
            let id = gen::new_id("");
            let seed = id
                .bytes()
                .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
            format.call_id(seed)
        }
        _ => gen::new_id("call"),
    }
}

/// What a request becomes before it is queued: prompt tokens, grammar, how replies are read.
struct Prepared {
    ids: Vec<u32>,
    media: Option<Arc<oxinfer::plan::media::MediaEmbeds>>,
    grammar: Option<Arc<Grammar>>,
    reading: Reading,
}

/// Compiles the grammar, renders the template and tokenizes the prompt (CPU work the request
/// controls: run off the async workers, see [`crate::off_worker`]).
fn prepare(st: &AppState, req: &ChatRequest) -> Result<Prepared, ApiError> {
    let (mode, tools) = tool_setup(req)?;
    let media = media_parts::media_inputs(&req.messages)?;
    let media = media_parts::encode(&st.model, &st.media_cache, &media)?;
    let mut grammar = response_grammar(req.response_format.as_ref())?;
    if mode == ToolMode::Forced {
        grammar = Some(
            Grammar::from_schema(&prompt::tool_call_schema(&tools))
                .map_err(|e| ApiError::bad_request(e.to_string()).with_param("tools"))?,
        );
    }
    let offered: Vec<Tool> = tools.iter().map(|t| (*t).clone()).collect();
    let offered = (mode != ToolMode::Off).then_some(offered.as_slice());
    let prompt = if st.cfg.allow_special_in_content {
        GuardedPrompt::trusted(prompt::render(&st.model, &req.messages, offered)?)
    } else {
        prompt::render_guarded(&st.model, &req.messages, offered)?
    };
    let src = st
        .model
        .tokenizer()
        .and_then(|t| t.chat_template())
        .unwrap_or("");
    let thinking_template = src.contains("<think>") || src.contains("<|channel>");
    let reading = Reading {
        mode,
        format: ToolFormat::detect(src),
        think: (grammar.is_none() && thinking_template).then(|| prompt_opens_think(&prompt.text())),
    };
    let ids = st
        .model
        .tokenize_prompt(&prompt, st.model.adds_bos())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let (ids, media) = if media.is_empty() {
        (ids, None)
    } else {
        let (ids, m) = media_parts::place(&st.model, &media, &ids)?;
        (ids, Some(m))
    };
    Ok(Prepared {
        ids,
        media,
        grammar: grammar.map(Arc::new),
        reading,
    })
}

/// Whether the output will be constrained by a grammar: a JSON `response_format`, or a tool
/// call that `tool_choice` requires.
fn is_constrained(req: &ChatRequest) -> bool {
    let format = req
        .response_format
        .as_ref()
        .and_then(|rf| rf.get("type"))
        .and_then(Value::as_str);
    let forced = match &req.tool_choice {
        Some(Value::String(s)) => s == "required",
        Some(Value::Null) | None => false,
        Some(_) => true,
    };
    matches!(format, Some("json_object" | "json_schema")) || forced
}

/// 400 naming `top_k` when a constrained request at a temperature above 0 asks for more than
/// [`MAX_CONSTRAINED_TOP_K`] candidates (0: the whole vocabulary) per step. Checked before
/// the grammar is compiled.
fn check_constrained_top_k(sampling: &SamplingParams) -> Result<(), ApiError> {
    let k = sampling.top_k;
    if sampling.temperature > 0.0 && (k == 0 || k > MAX_CONSTRAINED_TOP_K) {
        return Err(ApiError::bad_request(format!(
            "top_k = {k} with a JSON response_format or a required tool call: constrained \
             sampling needs 1 ..= {MAX_CONSTRAINED_TOP_K} (or temperature 0)"
        ))
        .with_param("top_k"));
    }
    Ok(())
}

async fn run(
    st: &Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
    tally: Option<Arc<Tally>>,
) -> Result<Response, ApiError> {
    let req: ChatRequest = gen::parse_body(body)?;
    st.check_model(req.model.as_deref())?;
    let sampling = gen::sampling(&req.gen)?;
    let n = gen::choices(&req.gen, MAX_N)?;
    let stop = req.gen.stop_strings()?;
    let constrained = is_constrained(&req);
    if constrained {
        check_constrained_top_k(&sampling)?;
    }
    let shared = st.clone();
    let work = move || {
        let p = prepare(&shared, &req);
        (req, p)
    };
    // A grammar to compile goes to the compiler threads (bounded memory), the rest to the
    // blocking pool (a cheap request never waits for a compilation).
    let (req, prepared) = if constrained {
        st.compiler.run(work).await?
    } else {
        off_worker(work).await?
    };
    let Prepared {
        ids,
        media,
        grammar,
        reading,
    } = prepared?;
    gen::check_context(ids.len(), st.cfg.ctx)?;
    let max_tokens = gen::max_tokens(&req.gen, ids.len(), st.cfg.ctx)?;
    let logprobs = req
        .logprobs
        .unwrap_or(false)
        .then(|| req.top_logprobs.unwrap_or(0).min(20) as usize);
    let speculation = gen::speculation(&req.gen, st.cfg.speculation, st.can_draft())?;
    let jobs = (0..n)
        .map(|i| {
            let mut sampling = sampling.clone();
            sampling.seed = sampling.seed.wrapping_add(i as u64);
            Job {
                max_tokens,
                prompt: ids.clone(),
                sampling,
                stop: stop.clone(),
                logprobs,
                grammar: grammar.clone(),
                speculation,
                media: media.clone(),
            }
        })
        .collect();
    let rxs = gen::submit(st, jobs, tally)?;
    // The name of what served the request, whichever name the request used.
    let model = st.cfg.model_id.clone();
    let id = gen::new_id("chatcmpl");
    if req.gen.stream.unwrap_or(false) {
        let usage = req
            .gen
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage);
        return Ok(stream_response(st.clone(), rxs, id, model, reading, usage));
    }
    let collected = futures_util::future::join_all(rxs.into_iter().map(gen::collect)).await;
    let mut choices = Vec::with_capacity(n);
    let (mut prompt_tokens, mut cached, mut completion) = (0, 0, 0);
    for (i, c) in collected.into_iter().enumerate() {
        let c = c?;
        if i == 0 {
            prompt_tokens = c.usage["prompt_tokens"].as_u64().unwrap_or(0);
            cached = c.usage["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0);
        }
        completion += c.usage["completion_tokens"].as_u64().unwrap_or(0);
        let d = reading.parser().whole(&c.text);
        let finish = if d.calls.is_empty() {
            c.reason.map(|r| r.as_str()).unwrap_or("stop")
        } else {
            "tool_calls"
        };
        let mut message = json!({"role": "assistant", "content": d.content});
        if !d.reasoning.is_empty() {
            message["reasoning_content"] = json!(d.reasoning);
        }
        if !d.calls.is_empty() {
            message["tool_calls"] = Value::Array(
                d.calls
                    .iter()
                    .enumerate()
                    .map(|(i, call)| call_json(call, i, false, reading.format))
                    .collect(),
            );
            if d.content.is_empty() {
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
        choices.push(json!({
            "index": i,
            "message": message,
            "logprobs": logprobs,
            "finish_reason": finish,
        }));
    }
    let usage = gen::usage(prompt_tokens as usize, cached as usize, completion as usize);
    Ok(axum::Json(json!({
        "id": id,
        "object": "chat.completion",
        "created": unix_now(),
        "model": model,
        "choices": choices,
        "usage": usage,
    }))
    .into_response())
}

/// A `tool_calls` entry (`index` included when streaming).
fn call_json(c: &ToolCall, index: usize, streaming: bool, format: ToolFormat) -> Value {
    let mut v = json!({
        "id": call_id(format),
        "type": "function",
        "function": {"name": c.name, "arguments": c.arguments},
    });
    if streaming {
        v["index"] = json!(index);
    }
    v
}

/// State of one streamed choice.
struct Choice {
    parser: ReplyParser,
    calls: usize,
    done: bool,
}

/// State of one streamed response (all its choices).
struct Streamer {
    st: Arc<AppState>,
    events: BoxStream<'static, (usize, Event)>,
    id: String,
    model: String,
    created: u64,
    format: ToolFormat,
    include_usage: bool,
    choices: Vec<Choice>,
    usage: (usize, usize, usize),
    /// Chunks ready to send.
    out: std::collections::VecDeque<String>,
    done: bool,
}

impl Streamer {
    fn chunk(
        &self,
        i: usize,
        delta: Value,
        finish: Option<&str>,
        logprobs: Option<Value>,
    ) -> String {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": i, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        })
        .to_string()
    }

    fn emit(&mut self, i: usize, d: Delta, logprobs: Option<Value>) {
        if !d.reasoning.is_empty() {
            let c = self.chunk(i, json!({"reasoning_content": d.reasoning}), None, None);
            self.out.push_back(c);
        }
        if !d.content.is_empty() || logprobs.is_some() {
            let c = self.chunk(i, json!({"content": d.content}), None, logprobs);
            self.out.push_back(c);
        }
        for call in d.calls {
            let v = call_json(&call, self.choices[i].calls, true, self.format);
            self.choices[i].calls += 1;
            let c = self.chunk(i, json!({"tool_calls": [v]}), None, None);
            self.out.push_back(c);
        }
    }

    /// Turns one scheduler event of choice `i` into chunks.
    fn on_event(&mut self, i: usize, ev: Event) {
        match ev {
            Event::Started => {}
            Event::Token { id, text, logprob } => {
                let lp =
                    logprob.map(|lp| json!({"content": [gen::chat_logprob(&self.st, id, &lp)]}));
                let d = self.choices[i].parser.push(&text);
                self.emit(i, d, lp);
            }
            Event::Text(t) => {
                let d = self.choices[i].parser.push(&t);
                self.emit(i, d, None);
            }
            Event::Done {
                reason,
                prompt_tokens,
                cached_tokens,
                completion_tokens,
            } => {
                let d = self.choices[i].parser.finish();
                self.emit(i, d, None);
                let finish = if self.choices[i].calls > 0 {
                    "tool_calls"
                } else {
                    reason.as_str()
                };
                let c = self.chunk(i, json!({}), Some(finish), None);
                self.out.push_back(c);
                self.choices[i].done = true;
                if i == 0 {
                    self.usage.0 = prompt_tokens;
                    self.usage.1 = cached_tokens;
                }
                self.usage.2 += completion_tokens;
                if self.choices.iter().all(|c| c.done) {
                    if self.include_usage {
                        let (p, c, g) = self.usage;
                        let u = json!({
                            "id": self.id,
                            "object": "chat.completion.chunk",
                            "created": self.created,
                            "model": self.model,
                            "choices": [],
                            "usage": gen::usage(p, c, g),
                        });
                        self.out.push_back(u.to_string());
                    }
                    self.out.push_back("[DONE]".into());
                    self.done = true;
                }
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
    rxs: Vec<UnboundedReceiver<Event>>,
    id: String,
    model: String,
    reading: Reading,
    include_usage: bool,
) -> Response {
    let n = rxs.len();
    let events = stream::select_all(rxs.into_iter().enumerate().map(|(i, rx)| {
        stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) })
            .map(move |e| (i, e))
            .boxed()
    }))
    .boxed();
    let mut s = Streamer {
        st,
        events,
        id,
        model,
        created: unix_now(),
        format: reading.format,
        include_usage,
        choices: (0..n)
            .map(|_| Choice {
                parser: reading.parser(),
                calls: 0,
                done: false,
            })
            .collect(),
        usage: (0, 0, 0),
        out: Default::default(),
        done: false,
    };
    for i in 0..n {
        let first = s.chunk(i, json!({"role": "assistant", "content": ""}), None, None);
        s.out.push_back(first);
    }
    let events = stream::unfold(s, |mut s| async move {
        loop {
            if let Some(data) = s.out.pop_front() {
                return Some((Ok::<_, Infallible>(SseEvent::default().data(data)), s));
            }
            if s.done {
                return None;
            }
            match s.events.next().await {
                Some((i, ev)) => s.on_event(i, ev),
                None => return None,
            }
        }
    });
    Sse::new(events.boxed())
        .keep_alive(KeepAlive::default())
        .into_response()
}
