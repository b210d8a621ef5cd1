//! Continuous batching: one std thread owns the model's compute and feeds every admitted
//! request into the engine's [`BatchGenerator`], which runs them together (one forward pass
//! per step; see [`oxinfer::engine::batch`]). New requests join between steps; a request whose
//! client went away is dropped before the next step. This module only adds what a server
//! needs around it: admission (tickets, the queue, 503 when full), forwarding each request's
//! events to its HTTP handler, cancellation, and metrics.
//!
//! Each of the `parallel` slots keeps its KV cache and the tokens it holds after a request
//! ends, so a follow-up request (the same conversation one turn later) is placed in the slot
//! sharing its longest prefix and only runs the tokens that differ.

use crate::metrics::Metrics;
use crate::reqlog::Tally;
use oxinfer::engine::batch::{BatchConfig, BatchGenerator, SeqEvent, SeqRequest};
use oxinfer::engine::StopReason;
use oxinfer::Model;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

pub use oxinfer::engine::batch::TokenLogprob;

/// One generation asked of the scheduler.
pub struct GenRequest {
    /// Prompt (whole conversation; a cached prefix is reused) and generation options.
    pub seq: SeqRequest,
    client: Client,
}

impl GenRequest {
    /// A request (not yet admitted: [`Scheduler::submit_all`] admits it) whose events go to
    /// `events`; a closed channel cancels it.
    pub fn new(seq: SeqRequest, events: UnboundedSender<Event>) -> Self {
        GenRequest {
            seq,
            client: Client {
                events,
                ticket: None,
                tally: None,
                submitted: Instant::now(),
                first_token: None,
            },
        }
    }

    /// Also adds the request's token counts to `tally` when it finishes (the request log).
    pub fn with_tally(mut self, tally: Option<Arc<Tally>>) -> Self {
        self.client.tally = tally;
        self
    }
}

/// Who waits for a request's events: the batch generator's tag of each sequence.
struct Client {
    /// Where events go; a closed channel cancels the request.
    events: UnboundedSender<Event>,
    /// Holds the request's place in the admission count until the request is dropped.
    ticket: Option<Ticket>,
    /// Where the request's token counts go when it finishes.
    tally: Option<Arc<Tally>>,
    /// When the request was made, and when its first token came (for `/metrics`).
    submitted: Instant,
    first_token: Option<Instant>,
}

impl Client {
    fn send(&self, ev: Event) -> bool {
        self.events.send(ev).is_ok()
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

/// What the scheduler reports about one request.
#[derive(Debug)]
pub enum Event {
    /// The request left the queue and took a slot.
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
#[derive(Clone)]
pub struct SchedulerConfig {
    /// Sequences generated at once.
    pub parallel: usize,
    /// Requests that may wait for a slot; more are refused.
    pub queue: usize,
    /// Positions of each slot's KV cache.
    pub ctx: usize,
    /// The draft model requests may speculate with (its vocabulary checked against the
    /// model's): each slot then keeps a draft cache of `ctx` positions.
    pub draft: Option<Arc<Model>>,
}

/// Handle to the scheduler thread.
pub struct Scheduler {
    tx: mpsc::Sender<GenRequest>,
    waiting: Arc<AtomicUsize>,
    /// Requests admitted and not yet dropped (waiting or in a slot).
    in_flight: Arc<AtomicUsize>,
    /// Slots plus queue places: the most requests in flight.
    capacity: usize,
    /// Cleared when the scheduler thread ends, however it ends (`/health` reports it).
    alive: Arc<AtomicBool>,
}

/// Clears the liveness flag when dropped: at the scheduler thread's return or while a panic
/// unwinds out of it.
struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Scheduler {
    /// Starts the scheduler thread on `model`.
    pub fn start(model: Arc<Model>, cfg: SchedulerConfig, metrics: Arc<Metrics>) -> Scheduler {
        let (tx, rx) = mpsc::channel();
        let waiting = Arc::new(AtomicUsize::new(0));
        let w = waiting.clone();
        let capacity = cfg.parallel.max(1) + cfg.queue;
        let alive = Arc::new(AtomicBool::new(true));
        let guard = AliveGuard(alive.clone());
        std::thread::Builder::new()
            .name("oxinfer-scheduler".into())
            .spawn(move || {
                let _guard = guard;
                run(&model, cfg, rx, w, metrics)
            })
            .expect("spawning the scheduler thread");
        Scheduler {
            tx,
            waiting,
            in_flight: Arc::new(AtomicUsize::new(0)),
            capacity,
            alive,
        }
    }

    /// Whether the scheduler thread is still running (it only ends when every handle is
    /// dropped, or through a bug outside the per-step panic guard).
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
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
                r.client.ticket = Some(Ticket(self.in_flight.clone()));
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

/// The scheduler thread: admits queued requests into free slots, steps the batch, and
/// forwards events until every [`Scheduler`] handle is gone.
fn run(
    model: &Model,
    cfg: SchedulerConfig,
    rx: mpsc::Receiver<GenRequest>,
    waiting_count: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
) {
    let Some(tok) = model.tokenizer() else {
        // Handlers refuse requests for models without a tokenizer; refuse anything that
        // still arrives and stay up (so `/health` keeps telling the truth).
        for r in rx {
            r.client
                .send(Event::Error("the model has no tokenizer".into()));
        }
        return;
    };
    let shape = BatchConfig::new(cfg.parallel.max(1), cfg.ctx);
    let draft = cfg.draft.clone();
    let mut batch: BatchGenerator<'_, Client> = BatchGenerator::new(model.lm(), Some(tok), &shape);
    if let Some(d) = &draft {
        batch = batch.with_draft(d.lm());
    } else if let Some(head) = model.draft_head() {
        batch = batch.with_draft_head(head);
    }
    metrics.slots.store(batch.slot_count(), Ordering::Relaxed);
    let mut waiting: VecDeque<GenRequest> = VecDeque::new();
    loop {
        // Collect new requests; block only when there is nothing to do.
        if waiting.is_empty() && batch.is_idle() {
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
            let gone = r.client.events.is_closed();
            if gone {
                waiting_count.fetch_sub(1, Ordering::AcqRel);
                metrics.cancelled.fetch_add(1, Ordering::Relaxed);
            }
            !gone
        });
        // Fill free slots, each request in the free slot sharing its longest prefix.
        while batch.has_free_slot() {
            let Some(r) = waiting.pop_front() else { break };
            waiting_count.fetch_sub(1, Ordering::AcqRel);
            r.client.send(Event::Started);
            if let Err(refused) = batch.admit(r.seq, r.client) {
                let (error, client) = refused.into_parts();
                client.send(Event::Error(error.to_string()));
            }
        }
        metrics.queue_length.store(waiting.len(), Ordering::Relaxed);
        // Cancel requests whose client left.
        let gone = batch.cancel_where(|c| c.events.is_closed());
        metrics.cancelled.fetch_add(gone, Ordering::Relaxed);
        metrics
            .active_slots
            .store(batch.active(), Ordering::Relaxed);
        if batch.is_idle() {
            continue;
        }
        step(&mut batch, &metrics);
        metrics
            .active_slots
            .store(batch.active(), Ordering::Relaxed);
        metrics
            .kv_cache_bytes
            .store(batch.kv_bytes(), Ordering::Relaxed);
    }
}

/// One step of every admitted request, forwarding their events. A bug in the engine must not
/// take the server down: a panic fails the requests in flight and starts every slot afresh.
fn step(batch: &mut BatchGenerator<'_, Client>, metrics: &Metrics) {
    let t0 = Instant::now();
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        batch.step(|client, ev| forward(client, ev, metrics))
    }));
    match ran {
        Ok(Ok(report)) => {
            metrics
                .prompt_tokens
                .fetch_add(report.prompt_tokens, Ordering::Relaxed);
            metrics.record_step(report.sampled, t0.elapsed());
        }
        Ok(Err(failed)) => {
            for c in failed.failed {
                c.send(Event::Error(failed.error.to_string()));
            }
        }
        Err(_) => {
            for c in batch.reset() {
                c.send(Event::Error("internal error: the engine panicked".into()));
            }
        }
    }
}

/// Sends one engine event to the request's handler; `false` (the client left) cancels it.
fn forward(client: &mut Client, ev: SeqEvent, metrics: &Metrics) -> bool {
    match ev {
        SeqEvent::Token { id, text, logprob } => {
            if client.first_token.is_none() {
                let now = Instant::now();
                metrics.ttft_seconds.observe(now - client.submitted);
                client.first_token = Some(now);
            }
            client.send(Event::Token { id, text, logprob })
        }
        SeqEvent::Text(text) => client.send(Event::Text(text)),
        SeqEvent::Finished(f) => {
            if f.reason == StopReason::Cancelled {
                metrics.cancelled.fetch_add(1, Ordering::Relaxed);
            }
            if let (Some(first), n @ 2..) = (client.first_token, f.tokens.len()) {
                metrics
                    .token_seconds
                    .observe(first.elapsed() / (n as u32 - 1));
            }
            if let Some(t) = &client.tally {
                t.add(f.prompt_tokens, f.tokens.len());
            }
            let d = f.timings.draft;
            metrics.draft_tokens.fetch_add(d.drafted, Ordering::Relaxed);
            metrics
                .draft_accepted
                .fetch_add(d.accepted, Ordering::Relaxed);
            client.send(Event::Done {
                reason: f.reason,
                prompt_tokens: f.prompt_tokens,
                cached_tokens: f.cached_tokens,
                completion_tokens: f.tokens.len(),
            })
        }
    }
}

/// How long a client should wait before retrying when the queue is full: the time one step
/// of every slot takes, a rough bound, at least one second.
pub fn retry_after(metrics: &Metrics) -> Duration {
    let step = metrics.mean_step();
    Duration::from_secs((step.as_secs_f64() * 64.0).ceil().clamp(1.0, 60.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scheduler thread that dies by a panic (outside the per-step guard) clears its
    /// liveness flag while unwinding, so `/health` turns to 503 instead of staying "ok".
    #[test]
    fn liveness_flag_clears_when_the_thread_panics() {
        let alive = Arc::new(AtomicBool::new(true));
        let guard = AliveGuard(alive.clone());
        let t = std::thread::spawn(move || {
            let _guard = guard;
            assert!(std::hint::black_box(false), "simulated scheduler bug");
        });
        assert!(t.join().is_err());
        assert!(!alive.load(Ordering::Acquire));
    }
}
