//! A Prometheus histogram of durations with fixed buckets, updated without locks.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in seconds (a `+Inf` bucket follows).
pub const BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Observations of a duration: how many fell at or below each bound, their count and sum.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Observations per bucket (not cumulative); the last one is `+Inf`.
    counts: [AtomicU64; BUCKETS.len() + 1],
    /// Sum of the observations, in microseconds.
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    /// Records one duration.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = BUCKETS
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(BUCKETS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Appends the exposition text of the histogram `name` (`_bucket`, `_sum`, `_count`).
    pub fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cumulative = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            cumulative += c.load(Ordering::Relaxed);
            let le = BUCKETS
                .get(i)
                .map_or_else(|| "+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}");
        // The count of the buckets read above, so `+Inf` and `_count` always agree.
        let _ = writeln!(out, "{name}_count {cumulative}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_end_with_the_count() {
        let h = Histogram::default();
        for ms in [0, 3, 3, 40, 2000, 1_000_000] {
            h.observe(Duration::from_millis(ms));
        }
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "test");
        assert!(out.contains("# TYPE x_seconds histogram"));
        assert!(out.contains("x_seconds_bucket{le=\"0.001\"} 1\n"));
        assert!(out.contains("x_seconds_bucket{le=\"0.005\"} 3\n"));
        assert!(out.contains("x_seconds_bucket{le=\"0.05\"} 4\n"));
        assert!(out.contains("x_seconds_bucket{le=\"2.5\"} 5\n"));
        assert!(out.contains("x_seconds_bucket{le=\"300\"} 5\n"));
        assert!(out.contains("x_seconds_bucket{le=\"+Inf\"} 6\n"));
        assert!(out.contains("x_seconds_count 6\n"));
        assert!(out.contains("x_seconds_sum 1002.046\n"), "{out}");
        assert_eq!(h.count(), 6);
    }
}
