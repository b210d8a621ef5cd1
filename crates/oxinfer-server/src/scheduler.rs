//! Continuous batching: one std thread owns the model's compute and runs every active request
//! together, one [`CausalLm::forward_batch`] pass per step (decode tokens of all generating
//! slots plus a bounded chunk of prompt tokens of the slots still prefilling). New requests
//! join between steps; a request whose client went away is dropped before the next step.
//!
//! Each of the `parallel` slots keeps its KV cache and the tokens it holds after a request
//! ends, so a follow-up request (the same conversation one turn later) is placed in the slot
//! sharing its longest prefix and only runs the tokens that differ.

use crate::metrics::Metrics;
use oxinfer::arch::SeqBatch;
use oxinfer::engine::grammar::{Constraint, Grammar, Vocabulary};
use oxinfer::engine::stop::StopMatcher;
use oxinfer::engine::{Sampler, SamplingParams, StopReason};
use oxinfer::nn::KvCache;
use oxinfer::tokenizer::StreamDecoder;
use oxinfer::Model;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// Prompt tokens run per step while other slots are decoding (keeps their step time short).
const PREFILL_CHUNK_SHARED: usize = 128;
/// Prompt tokens run per step when nobody is decoding.
const PREFILL_CHUNK_ALONE: usize = 512;

/// One generation asked of the scheduler.
pub struct GenRequest {
    /// Prompt token ids (whole conversation; a cached prefix is reused).
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    /// Report the log-probability of each token and this many alternatives.
    pub logprobs: Option<usize>,
    /// Constrain the output to this JSON grammar.
    pub grammar: Option<Arc<Grammar>>,
    /// Where events go; a closed channel cancels the request.
    pub events: UnboundedSender<Event>,
    /// Holds the request's place in the admission count until the request is dropped.
    ticket: Option<Ticket>,
}

impl GenRequest {
    /// A request (not yet admitted: [`Scheduler::submit_all`] admits it).
    pub fn new(
        prompt: Vec<u32>,
        max_tokens: usize,
        sampling: SamplingParams,
        events: UnboundedSender<Event>,
    ) -> Self {
        GenRequest {
            prompt,
            max_tokens,
            sampling,
            stop: Vec::new(),
            logprobs: None,
            grammar: None,
            events,
            ticket: None,
        }
    }
}

/// One admitted request's share of [`Scheduler`]'s in-flight count, given back when the
/// request is dropped (finished, failed, cancelled or refused), whichever path drops it.
struct Ticket(Arc<AtomicUsize>);

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A token's log-probability and the most likely alternatives.
#[derive(Clone, Debug)]
pub struct TokenLogprob {
    pub logprob: f32,
    /// `(id, logprob)`, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// What the scheduler reports about one request.
#[derive(Debug)]
pub enum Event {
    /// The first step that includes the request ran (it left the queue).
    Started,
    /// One generated token and the text it releases (may be empty).
    Token {
        id: u32,
        text: String,
        logprob: Option<TokenLogprob>,
    },
    /// Text released at the end (a held-back partial character or stop-string prefix).
    Text(String),
    /// Generation ended.
    Done {
        reason: StopReason,
        prompt_tokens: usize,
        cached_tokens: usize,
        completion_tokens: usize,
    },
    /// The request failed.
    Error(String),
}

/// Why requests were not accepted.
#[derive(Debug, Clone, Copy)]
pub enum Refused {
    /// Every slot is busy and the queue cannot take them all; `waiting` requests wait.
    QueueFull { waiting: usize },
    /// More requests at once than slots plus queue places: they could never all be admitted.
    TooMany { asked: usize, capacity: usize },
}

/// Settings of the scheduler.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Sequences generated at once.
    pub parallel: usize,
    /// Requests that may wait for a slot; more are refused.
    pub queue: usize,
    /// Positions of each slot's KV cache.
    pub ctx: usize,
}

/// Handle to the scheduler thread.
pub struct Scheduler {
    tx: mpsc::Sender<GenRequest>,
    waiting: Arc<AtomicUsize>,
    /// Requests admitted and not yet dropped (waiting or in a slot).
    in_flight: Arc<AtomicUsize>,
    /// Slots plus queue places: the most requests in flight.
    capacity: usize,
}

impl Scheduler {
    /// Starts the scheduler thread on `model`.
    pub fn start(model: Arc<Model>, cfg: SchedulerConfig, metrics: Arc<Metrics>) -> Scheduler {
        let (tx, rx) = mpsc::channel();
        let waiting = Arc::new(AtomicUsize::new(0));
        let w = waiting.clone();
        let capacity = cfg.parallel.max(1) + cfg.queue;
        std::thread::Builder::new()
            .name("oxinfer-scheduler".into())
            .spawn(move || run(&model, cfg, rx, w, metrics))
            .expect("spawning the scheduler thread");
        Scheduler {
            tx,
            waiting,
            in_flight: Arc::new(AtomicUsize::new(0)),
            capacity,
        }
    }

    /// Admits all of `reqs` or none: they are queued together only when slots plus queue
    /// places can take every one of them (the `n` choices of one request); otherwise nothing
    /// is submitted.
    pub fn submit_all(&self, reqs: Vec<GenRequest>) -> Result<(), Refused> {
        let (k, cap) = (reqs.len(), self.capacity);
        if k > cap {
            return Err(Refused::TooMany {
                asked: k,
                capacity: cap,
            });
        }
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n + k <= cap).then_some(n + k)
            })
            .map_err(|_| Refused::QueueFull {
                waiting: self.waiting(),
            })?;
        // Tickets first: from here on every dropped request gives its place back.
        let reqs: Vec<GenRequest> = reqs
            .into_iter()
            .map(|mut r| {
                r.ticket = Some(Ticket(self.in_flight.clone()));
                r
            })
            .collect();
        self.waiting.fetch_add(k, Ordering::AcqRel);
        for r in reqs {
            if self.tx.send(r).is_err() {
                // The scheduler thread is gone; the unsent requests drop their tickets.
                return Err(Refused::QueueFull { waiting: 0 });
            }
        }
        Ok(())
    }

    /// Requests waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }
}

/// A request being served in a slot.
struct Active<'m> {
    req: GenRequest,
    /// Prompt tokens already in the cache (reused or run).
    pos: usize,
    reused: usize,
    sampler: Sampler,
    /// Prompt and generated tokens (for the penalties).
    history: Vec<u32>,
    generated: usize,
    /// The token to run next while decoding.
    next: u32,
    tok: &'m oxinfer::Tokenizer,
    stream: StreamDecoder<'m>,
    stops: StopMatcher,
    constraint: Option<Constraint>,
}

struct Slot<'m> {
    cache: KvCache,
    /// Tokens whose keys and values `cache` holds.
    cached: Vec<u32>,
    active: Option<Active<'m>>,
    last_used: Instant,
}

fn run(
    model: &Model,
    cfg: SchedulerConfig,
    rx: mpsc::Receiver<GenRequest>,
    waiting_count: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
) {
    let Some(tok) = model.tokenizer() else {
        // Handlers refuse requests for models without a tokenizer; nothing to do.
        return;
    };
    let lm = model.lm();
    let vocab = Arc::new(Vocabulary::new(tok, lm.config().vocab_size));
    let mut slots: Vec<Slot<'_>> = (0..cfg.parallel.max(1))
        .map(|_| Slot {
            cache: lm.new_cache(cfg.ctx),
            cached: Vec::new(),
            active: None,
            last_used: Instant::now(),
        })
        .collect();
    metrics.slots.store(slots.len(), Ordering::Relaxed);
    let mut waiting: VecDeque<GenRequest> = VecDeque::new();
    loop {
        // Collect new requests; block only when there is nothing to do.
        let idle = waiting.is_empty() && slots.iter().all(|s| s.active.is_none());
        if idle {
            match rx.recv() {
                Ok(r) => waiting.push_back(r),
                Err(_) => return,
            }
        }
        while let Ok(r) = rx.try_recv() {
            waiting.push_back(r);
        }
        // Drop waiting requests whose client left.
        waiting.retain(|r| {
            let gone = r.events.is_closed();
            if gone {
                waiting_count.fetch_sub(1, Ordering::AcqRel);
                metrics.cancelled.fetch_add(1, Ordering::Relaxed);
            }
            !gone
        });
        // Fill free slots, each request in the free slot sharing its longest prefix.
        while !waiting.is_empty() {
            let Some(i) = pick_slot(&slots, &waiting[0].prompt) else {
                break;
            };
            let req = waiting.pop_front().expect("not empty");
            waiting_count.fetch_sub(1, Ordering::AcqRel);
            start(&mut slots[i], req, tok, &vocab);
        }
        metrics.queue_length.store(waiting.len(), Ordering::Relaxed);
        // Cancel requests whose client left.
        for s in &mut slots {
            if s.active.as_ref().is_some_and(|a| a.req.events.is_closed()) {
                s.active = None;
                metrics.cancelled.fetch_add(1, Ordering::Relaxed);
            }
        }
        let active = slots.iter().filter(|s| s.active.is_some()).count();
        metrics.active_slots.store(active, Ordering::Relaxed);
        if active == 0 {
            continue;
        }
        // A bug in the engine must not take the server down: fail the requests of this step
        // and start their slots afresh.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            step(lm, &mut slots, &metrics)
        }));
        if ran.is_err() {
            for s in &mut slots {
                if let Some(a) = s.active.take() {
                    let _ = a
                        .req
                        .events
                        .send(Event::Error("internal error: the engine panicked".into()));
                }
                s.cache.clear();
                s.cached.clear();
            }
        }
        let active = slots.iter().filter(|s| s.active.is_some()).count();
        metrics.active_slots.store(active, Ordering::Relaxed);
    }
}

/// The free slot whose cached tokens share the longest prefix with `prompt` (least recently
/// used on ties), or `None` when all are busy.
fn pick_slot(slots: &[Slot<'_>], prompt: &[u32]) -> Option<usize> {
    slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.active.is_none())
        .max_by_key(|(_, s)| {
            let common = s
                .cached
                .iter()
                .zip(prompt)
                .take_while(|(a, b)| a == b)
                .count();
            (common, std::cmp::Reverse(s.last_used))
        })
        .map(|(i, _)| i)
}

/// Puts `req` in `slot`, keeping the cached prefix it shares.
fn start<'m>(
    slot: &mut Slot<'m>,
    req: GenRequest,
    tok: &'m oxinfer::Tokenizer,
    vocab: &Arc<Vocabulary>,
) {
    let prompt = &req.prompt;
    let mut common = slot
        .cached
        .iter()
        .zip(prompt)
        .take_while(|(a, b)| a == b)
        .count();
    // At least one prompt token must run to produce logits.
    common = common.min(prompt.len().saturating_sub(1));
    slot.cache.truncate(common);
    // A cache that cannot rewind that far empties itself.
    common = common.min(slot.cache.len());
    slot.cached.truncate(common);
    let _ = req.events.send(Event::Started);
    slot.last_used = Instant::now();
    slot.active = Some(Active {
        pos: common,
        reused: common,
        sampler: Sampler::new(req.sampling.clone()),
        history: prompt.clone(),
        generated: 0,
        next: 0,
        tok,
        stream: tok.stream(),
        stops: StopMatcher::new(&req.stop),
        constraint: req
            .grammar
            .clone()
            .map(|g| Constraint::new(g, vocab.clone())),
        req,
    });
}

/// One forward pass over every active slot, then sampling for those whose prompt is done.
fn step(lm: &dyn oxinfer::arch::CausalLm, slots: &mut [Slot<'_>], metrics: &Metrics) {
    let t0 = Instant::now();
    let decoding = slots
        .iter()
        .filter(|s| {
            s.active
                .as_ref()
                .is_some_and(|a| a.pos >= a.req.prompt.len())
        })
        .count();
    let mut budget = if decoding > 0 {
        PREFILL_CHUNK_SHARED
    } else {
        PREFILL_CHUNK_ALONE
    };
    // Which slots run this step, and how many tokens each.
    let mut plan: Vec<(usize, usize)> = Vec::new();
    for (i, s) in slots.iter().enumerate() {
        let Some(a) = &s.active else { continue };
        let left = a.req.prompt.len() - a.pos.min(a.req.prompt.len());
        if left == 0 {
            plan.push((i, 1));
        } else if budget > 0 {
            let n = left.min(budget);
            budget -= n;
            plan.push((i, n));
        }
    }
    let mut batch: Vec<SeqBatch<'_>> = Vec::with_capacity(plan.len());
    let mut fed: Vec<Vec<u32>> = Vec::with_capacity(plan.len());
    {
        let mut it = slots.iter_mut().enumerate();
        for &(i, n) in &plan {
            let (_, s) = it.find(|(j, _)| *j == i).expect("planned slot exists");
            let Slot { cache, active, .. } = s;
            let a = active.as_ref().expect("planned slot is active");
            let tokens: Vec<u32> = if a.pos < a.req.prompt.len() {
                a.req.prompt[a.pos..a.pos + n].to_vec()
            } else {
                vec![a.next]
            };
            fed.push(tokens);
            batch.push(SeqBatch {
                tokens: &[],
                cache,
                all_logits: false,
            });
        }
        for (b, t) in batch.iter_mut().zip(&fed) {
            b.tokens = t;
        }
    }
    let result = lm.forward_batch(&mut batch);
    drop(batch);
    let logits = match result {
        Ok(l) => l,
        Err(e) => {
            for &(i, _) in &plan {
                if let Some(a) = slots[i].active.take() {
                    let _ = a.req.events.send(Event::Error(e.to_string()));
                }
                slots[i].cache.clear();
                slots[i].cached.clear();
            }
            return;
        }
    };
    let mut new_tokens = 0;
    for ((&(i, _), tokens), mut logits) in plan.iter().zip(fed).zip(logits) {
        let slot = &mut slots[i];
        slot.cached.extend_from_slice(&tokens);
        slot.last_used = Instant::now();
        let a = slot.active.as_mut().expect("planned slot is active");
        if a.pos < a.req.prompt.len() {
            a.pos += tokens.len();
            metrics
                .prompt_tokens
                .fetch_add(tokens.len(), Ordering::Relaxed);
            if a.pos < a.req.prompt.len() {
                continue;
            }
        }
        new_tokens += 1;
        if let Some(reason) = sample(a, &mut logits, slot.cache.len(), slot.cache.capacity()) {
            if reason == StopReason::Cancelled {
                metrics.cancelled.fetch_add(1, Ordering::Relaxed);
            }
            finish(slot, reason);
        }
    }
    metrics.record_step(new_tokens, t0.elapsed());
}

/// Samples the next token of `a` from `logits`, streams it, and says whether generation ends.
fn sample(
    a: &mut Active<'_>,
    logits: &mut [f32],
    cached: usize,
    capacity: usize,
) -> Option<StopReason> {
    a.sampler.apply_penalties(logits, &a.history);
    if let Some(c) = &a.constraint {
        let p = a.sampler.params();
        let need = if p.temperature <= 0.0 { 1 } else { p.top_k };
        c.mask(logits, need);
    }
    let logprob = a.req.logprobs.map(|k| top_logprobs(logits, k));
    // Penalties are already in the logits.
    let id = a.sampler.sample(logits, &[]);
    let logprob = logprob.map(|(lse, top)| TokenLogprob {
        logprob: logits[id as usize] - lse,
        top,
    });
    a.generated += 1;
    a.history.push(id);
    a.next = id;
    let grammar_done = match &mut a.constraint {
        Some(c) => {
            c.advance(id);
            c.is_finished()
        }
        None => false,
    };
    if a.stream_is_eos(id) {
        return Some(StopReason::Eos);
    }
    let piece = a.stream.push(id);
    let (text, stopped) = a.stops.push(&piece);
    if a.req
        .events
        .send(Event::Token { id, text, logprob })
        .is_err()
    {
        return Some(StopReason::Cancelled);
    }
    if stopped {
        Some(StopReason::StopString)
    } else if grammar_done {
        Some(StopReason::Eos)
    } else if a.generated >= a.req.max_tokens {
        Some(StopReason::MaxTokens)
    } else if cached >= capacity {
        Some(StopReason::ContextFull)
    } else {
        None
    }
}

impl Active<'_> {
    fn stream_is_eos(&self, id: u32) -> bool {
        self.tok.is_eog(id)
    }
}

/// Ends the request in `slot`: flushes held text and reports the counts.
fn finish(slot: &mut Slot<'_>, reason: StopReason) {
    let Some(mut a) = slot.active.take() else {
        return;
    };
    if reason != StopReason::StopString {
        let tail = a.stream.finish();
        let (mut text, _) = a.stops.push(&tail);
        text += &a.stops.finish();
        if !text.is_empty() {
            let _ = a.req.events.send(Event::Text(text));
        }
    }
    let _ = a.req.events.send(Event::Done {
        reason,
        prompt_tokens: a.req.prompt.len(),
        cached_tokens: a.reused,
        completion_tokens: a.generated,
    });
    // The last sampled token was never run: the cache holds the rest.
    debug_assert_eq!(slot.cached.len(), slot.cache.len());
}

/// The log-sum-exp of `logits` and the `k` most likely tokens with their log-probabilities.
fn top_logprobs(logits: &[f32], k: usize) -> (f32, Vec<(u32, f32)>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits
        .iter()
        .filter(|v| v.is_finite())
        .map(|&v| f64::from(v - max).exp())
        .sum();
    let lse = max + sum.ln() as f32;
    let mut idx: Vec<u32> = (0..logits.len() as u32)
        .filter(|&i| logits[i as usize].is_finite())
        .collect();
    let k = k.min(idx.len());
    if k > 0 {
        let cmp = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]);
        idx.select_nth_unstable_by(k - 1, cmp);
        idx.truncate(k);
        idx.sort_by(cmp);
    } else {
        idx.clear();
    }
    (
        lse,
        idx.into_iter()
            .map(|i| (i, logits[i as usize] - lse))
            .collect(),
    )
}

/// How long a client should wait before retrying when the queue is full: the time one step
/// of every slot takes, a rough bound, at least one second.
pub fn retry_after(metrics: &Metrics) -> Duration {
    let step = metrics.mean_step();
    Duration::from_secs((step.as_secs_f64() * 64.0).ceil().clamp(1.0, 60.0) as u64)
}
