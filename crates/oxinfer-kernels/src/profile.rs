//! `--profile`: per-operation time, call count, and achieved bandwidth or FLOP/s. Off by
//! default (one relaxed atomic load per operation); when on, each operation records into a
//! shared table on drop of its [`Scope`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ENABLED: AtomicBool = AtomicBool::new(false);
static TABLE: Mutex<BTreeMap<String, Stat>> = Mutex::new(BTreeMap::new());

/// Totals of one operation kind.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stat {
    /// Number of operations recorded.
    pub calls: u64,
    /// Total wall time.
    pub time: Duration,
    /// Bytes of weights (or data) read.
    pub bytes: u64,
    /// Floating-point (or integer multiply-add) operations, 2 per multiply-add.
    pub flops: u64,
}

/// Turns recording on or off (process-wide).
pub fn enable(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether recording is on.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A timed operation; records when dropped.
pub struct Scope {
    op: String,
    start: Instant,
    bytes: u64,
    flops: u64,
}

impl Drop for Scope {
    fn drop(&mut self) {
        let dt = self.start.elapsed();
        let mut t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
        let s = t.entry(std::mem::take(&mut self.op)).or_default();
        s.calls += 1;
        s.time += dt;
        s.bytes += self.bytes;
        s.flops += self.flops;
    }
}

/// Starts timing `op` (reading `bytes`, doing `flops`) when profiling is on.
#[inline]
pub fn scope(op: impl FnOnce() -> String, bytes: u64, flops: u64) -> Option<Scope> {
    enabled().then(|| Scope {
        op: op(),
        start: Instant::now(),
        bytes,
        flops,
    })
}

/// Clears the table.
pub fn reset() {
    TABLE.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// A snapshot of the table.
pub fn snapshot() -> BTreeMap<String, Stat> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The table as aligned text, slowest operation first, with GB/s and GFLOP/s.
pub fn report() -> String {
    let mut rows: Vec<(String, Stat)> = snapshot().into_iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1.time));
    let total: f64 = rows.iter().map(|r| r.1.time.as_secs_f64()).sum();
    let mut out = format!(
        "{:<24} {:>8} {:>10} {:>6} {:>9} {:>9}\n",
        "operation", "calls", "time ms", "%", "GB/s", "GFLOP/s"
    );
    for (op, s) in rows {
        let secs = s.time.as_secs_f64().max(1e-12);
        out += &format!(
            "{:<24} {:>8} {:>10.2} {:>6.1} {:>9.2} {:>9.2}\n",
            op,
            s.calls,
            secs * 1e3,
            100.0 * secs / total.max(1e-12),
            s.bytes as f64 / secs / 1e9,
            s.flops as f64 / secs / 1e9
        );
    }
    out
}
