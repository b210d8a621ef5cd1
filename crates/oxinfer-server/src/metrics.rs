//! Counters, gauges and histograms served at `GET /metrics` in Prometheus' text format.

use crate::histogram::Histogram;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Window over which `oxinfer_generation_tokens_per_second` is measured.
const RATE_WINDOW: Duration = Duration::from_secs(10);

/// Server-wide counters, updated by handlers and the scheduler.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests received, per endpoint: chat, completions, other.
    pub requests_chat: AtomicUsize,
    pub requests_completions: AtomicUsize,
    /// Requests answered with an error status (4xx/5xx).
    pub requests_failed: AtomicUsize,
    /// Requests refused because the queue was full.
    pub rejected_queue_full: AtomicUsize,
    /// Requests whose client disconnected before the end.
    pub cancelled: AtomicUsize,
    /// Prompt tokens run (reused cache positions are not counted).
    pub prompt_tokens: AtomicUsize,
    /// Tokens generated.
    pub generated_tokens: AtomicUsize,
    /// Speculative decoding: drafted tokens the model checked, and those it accepted.
    pub draft_tokens: AtomicUsize,
    pub draft_accepted: AtomicUsize,
    /// Requests waiting for a slot.
    pub queue_length: AtomicUsize,
    /// Slots generating now, and slots in all.
    pub active_slots: AtomicUsize,
    pub slots: AtomicUsize,
    /// Bytes the slots' KV caches hold (host memory, keys and values).
    pub kv_cache_bytes: AtomicUsize,
    /// Forward passes run, and their total time in microseconds.
    pub steps: AtomicU64,
    pub step_micros: AtomicU64,
    /// Time of each forward pass of the batch (prefill chunks and decode steps of every slot).
    pub step_seconds: Histogram,
    /// Per request: from its submission to its first generated token (queueing included).
    pub ttft_seconds: Histogram,
    /// Per request: mean time between its generated tokens after the first.
    pub token_seconds: Histogram,
    /// Recent steps `(when, tokens generated)`, for the rate.
    recent: Mutex<Vec<(Instant, usize)>>,
}

impl Metrics {
    /// Records one scheduler step that generated `tokens` tokens in `took`.
    pub fn record_step(&self, tokens: usize, took: Duration) {
        self.generated_tokens.fetch_add(tokens, Ordering::Relaxed);
        self.steps.fetch_add(1, Ordering::Relaxed);
        self.step_micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        self.step_seconds.observe(took);
        if let Ok(mut r) = self.recent.lock() {
            let now = Instant::now();
            r.retain(|(t, _)| now.duration_since(*t) < RATE_WINDOW);
            r.push((now, tokens));
        }
    }

    /// Mean time of a forward pass so far (zero before the first).
    pub fn mean_step(&self) -> Duration {
        let n = self.steps.load(Ordering::Relaxed);
        if n == 0 {
            return Duration::ZERO;
        }
        Duration::from_micros(self.step_micros.load(Ordering::Relaxed) / n)
    }

    /// Generated tokens per second over the last ten seconds.
    pub fn tokens_per_second(&self) -> f64 {
        let Ok(r) = self.recent.lock() else {
            return 0.0;
        };
        let now = Instant::now();
        let n: usize = r
            .iter()
            .filter(|(t, _)| now.duration_since(*t) < RATE_WINDOW)
            .map(|(_, n)| n)
            .sum();
        n as f64 / RATE_WINDOW.as_secs_f64()
    }

    /// The Prometheus exposition text.
    pub fn render(&self) -> String {
        let g = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, lines: &[(String, f64)]| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (labels, v) in lines {
                let _ = writeln!(out, "{name}{labels} {v}");
            }
        };
        metric(
            "oxinfer_requests_total",
            "counter",
            "Generation requests received, by endpoint.",
            &[
                ("{endpoint=\"chat\"}".into(), g(&self.requests_chat) as f64),
                (
                    "{endpoint=\"completions\"}".into(),
                    g(&self.requests_completions) as f64,
                ),
            ],
        );
        let plain = |v: usize| vec![(String::new(), v as f64)];
        metric(
            "oxinfer_requests_failed_total",
            "counter",
            "Requests answered with an error status.",
            &plain(g(&self.requests_failed)),
        );
        metric(
            "oxinfer_requests_rejected_total",
            "counter",
            "Requests refused with 503 because the queue was full.",
            &plain(g(&self.rejected_queue_full)),
        );
        metric(
            "oxinfer_requests_cancelled_total",
            "counter",
            "Requests whose client disconnected before the end.",
            &plain(g(&self.cancelled)),
        );
        metric(
            "oxinfer_prompt_tokens_total",
            "counter",
            "Prompt tokens run through the model (cached prefixes excluded).",
            &plain(g(&self.prompt_tokens)),
        );
        metric(
            "oxinfer_generated_tokens_total",
            "counter",
            "Tokens generated.",
            &plain(g(&self.generated_tokens)),
        );
        metric(
            "oxinfer_draft_tokens_total",
            "counter",
            "Speculative decoding: drafted tokens the model checked (finished requests).",
            &plain(g(&self.draft_tokens)),
        );
        metric(
            "oxinfer_draft_accepted_tokens_total",
            "counter",
            "Speculative decoding: drafted tokens the model accepted (finished requests).",
            &plain(g(&self.draft_accepted)),
        );
        metric(
            "oxinfer_queue_length",
            "gauge",
            "Requests waiting for a slot.",
            &plain(g(&self.queue_length)),
        );
        metric(
            "oxinfer_active_slots",
            "gauge",
            "Slots generating now.",
            &plain(g(&self.active_slots)),
        );
        metric(
            "oxinfer_slots",
            "gauge",
            "Slots (--parallel).",
            &plain(g(&self.slots)),
        );
        metric(
            "oxinfer_kv_cache_bytes",
            "gauge",
            "Bytes the slots' KV caches hold now (keys and values in the --cache-type-k/-v types; grows with the positions stored, not with --ctx).",
            &plain(g(&self.kv_cache_bytes)),
        );
        metric(
            "oxinfer_generation_tokens_per_second",
            "gauge",
            "Tokens generated per second over the last 10 s, all requests together.",
            &[(String::new(), self.tokens_per_second())],
        );
        self.step_seconds.render(
            &mut out,
            "oxinfer_step_seconds",
            "Time of one forward pass of the batch (all active requests together).",
        );
        self.ttft_seconds.render(
            &mut out,
            "oxinfer_time_to_first_token_seconds",
            "Per request: time from its submission (queueing included) to its first token.",
        );
        self.token_seconds.render(
            &mut out,
            "oxinfer_time_per_output_token_seconds",
            "Per request: mean time between generated tokens after the first.",
        );
        out
    }
}
