//! One log line per request on stderr: time, method, path, status, prompt and generated
//! tokens, and duration, as text or as one JSON object per line (`--log-format`). A streamed
//! answer is logged when its stream ends (or the client leaves), with its final counts.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::json;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// How request lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `2026-12-02T21:30:00.123Z POST /v1/chat/completions 200 tokens=12+24 0.412s`.
    #[default]
    Text,
    /// `{"time": ..., "method": ..., "path": ..., "status": ..., "prompt_tokens": ...,
    /// "completion_tokens": ..., "duration_ms": ...}`.
    Json,
    /// No request lines.
    Off,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            "off" => Ok(LogFormat::Off),
            other => Err(format!(
                "log format '{other}' is not one of text, json, off"
            )),
        }
    }
}

/// Tokens a request ran: its handler passes this to the scheduler (a request extension),
/// which adds each finished choice's counts.
#[derive(Debug, Default)]
pub struct Tally {
    prompt: AtomicUsize,
    completion: AtomicUsize,
}

impl Tally {
    /// Adds one finished generation: its prompt tokens (counted once per request) and
    /// generated tokens (summed over choices).
    pub fn add(&self, prompt: usize, completion: usize) {
        self.prompt.fetch_max(prompt, Ordering::Relaxed);
        self.completion.fetch_add(completion, Ordering::Relaxed);
    }
}

/// Everything a request's line says; written when dropped.
struct Line {
    format: LogFormat,
    method: Method,
    path: String,
    status: StatusCode,
    tally: Arc<Tally>,
    start: Instant,
}

impl Drop for Line {
    fn drop(&mut self) {
        let (p, c) = (
            self.tally.prompt.load(Ordering::Relaxed),
            self.tally.completion.load(Ordering::Relaxed),
        );
        let secs = self.start.elapsed().as_secs_f64();
        let time = utc_timestamp(SystemTime::now());
        match self.format {
            LogFormat::Off => {}
            LogFormat::Text => eprintln!(
                "{time} {} {} {} tokens={p}+{c} {secs:.3}s",
                self.method,
                self.path,
                self.status.as_u16()
            ),
            LogFormat::Json => eprintln!(
                "{}",
                json!({
                    "time": time,
                    "method": self.method.as_str(),
                    "path": self.path,
                    "status": self.status.as_u16(),
                    "prompt_tokens": p,
                    "completion_tokens": c,
                    "duration_ms": (secs * 1e6).round() / 1e3,
                })
            ),
        }
    }
}

/// The middleware: gives the request a [`Tally`] and logs its line once the answer is out
/// (for a server-sent event stream: when the stream ends or is dropped).
pub async fn log(State(format): State<LogFormat>, mut req: Request, next: Next) -> Response {
    let tally = Arc::new(Tally::default());
    req.extensions_mut().insert(tally.clone());
    let (method, path, start) = (
        req.method().clone(),
        req.uri().path().to_string(),
        Instant::now(),
    );
    let resp = next.run(req).await;
    let line = Line {
        format,
        method,
        path,
        status: resp.status(),
        tally,
        start,
    };
    let streamed = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !streamed {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        let _written_when_dropped = &line;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}

/// `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn utc_timestamp(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_are_utc_civil_dates() {
        let at = |s: u64| utc_timestamp(UNIX_EPOCH + Duration::from_millis(s));
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(at(1_796_247_000_123), "2026-12-02T21:30:00.123Z");
    }

    #[test]
    fn log_formats_parse() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert!("xml"
            .parse::<LogFormat>()
            .unwrap_err()
            .contains("text, json"));
    }
}
