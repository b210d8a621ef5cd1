//! One work budget per schema compilation: every step whose count a schema can multiply
//! (schema nodes, `allOf` merges, `oneOf` proofs, `$ref` expansions, enum checks, regex → DFA
//! work) charges units here, and a wall-clock deadline backs the count up. Past either limit
//! compilation stops with an error naming the keyword being compiled when it ran out, so a
//! hostile schema costs at most a bounded amount of CPU time.
//!
//! The budget is shared by `&` reference (interior mutability): the proofs that charge it run
//! inside closures that only borrow the compiler.

use crate::clock::Instant;
use std::cell::Cell;
use std::time::Duration;

/// Limits of one compilation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompileLimits {
    /// Work units (about one elementary step each: a node, a merge, a DFA transition, a byte
    /// of an enum check).
    pub work: u64,
    /// Wall-clock time.
    pub time: Duration,
}

/// Default work units: every `format` pattern needs under a quarter of it (tested), ordinary
/// schemas far less. A unit's real cost varies with the kind of work, so on a busy machine the
/// deadline can end a compilation before the units run out (the oxinfer serve tests measured
/// 2-4 s for schemas that stayed within the units).
pub const DEFAULT_WORK: u64 = 20_000_000;
/// Default wall-clock deadline.
pub const DEFAULT_TIME: Duration = Duration::from_secs(5);

impl Default for CompileLimits {
    fn default() -> Self {
        CompileLimits {
            work: DEFAULT_WORK,
            time: DEFAULT_TIME,
        }
    }
}

/// Units charged between two looks at the clock.
const CLOCK_EVERY: u64 = 1 << 14;

/// The budget of one compilation in progress.
#[derive(Debug)]
pub struct Budget {
    limits: CompileLimits,
    deadline: Instant,
    used: Cell<u64>,
    next_clock: Cell<u64>,
    /// The keyword being compiled when the budget ran out (set once).
    spent_in: Cell<Option<&'static str>>,
}

/// The budget ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exhausted {
    /// The keyword being compiled at that moment.
    pub keyword: &'static str,
}

impl Budget {
    /// A fresh budget; the deadline counts from now.
    pub fn new(limits: CompileLimits) -> Self {
        Budget {
            limits,
            deadline: Instant::now() + limits.time,
            used: Cell::new(0),
            next_clock: Cell::new(CLOCK_EVERY),
            spent_in: Cell::new(None),
        }
    }

    /// Charges `units` of work done for `keyword`; `Err` once the work or the time is spent
    /// (and on every later call).
    pub fn charge(&self, units: u64, keyword: &'static str) -> Result<(), Exhausted> {
        if let Some(k) = self.spent_in.get() {
            return Err(Exhausted { keyword: k });
        }
        let used = self.used.get().saturating_add(units);
        self.used.set(used);
        let mut out = used > self.limits.work;
        if !out && used >= self.next_clock.get() {
            self.next_clock.set(used + CLOCK_EVERY);
            out = Instant::now() > self.deadline;
        }
        if out {
            self.spent_in.set(Some(keyword));
            return Err(Exhausted { keyword });
        }
        Ok(())
    }

    /// The keyword the budget ran out in, if it did.
    pub fn spent_in(&self) -> Option<&'static str> {
        self.spent_in.get()
    }

    /// Units charged so far.
    pub fn used(&self) -> u64 {
        self.used.get()
    }

    /// The message of an exhausted budget.
    pub fn message(&self, keyword: &str) -> String {
        format!(
            "compiling '{keyword}' exceeds the compilation budget ({} work units or {} ms): \
             the schema is too large or multiplies too much (allOf over anyOf, $ref with \
             siblings, oneOf, enum checks, patterns)",
            self.limits.work,
            self.limits.time.as_millis()
        )
    }
}

impl std::fmt::Display for Exhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "compilation budget exhausted in '{}'", self.keyword)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_and_time_run_out_naming_the_keyword() {
        let b = Budget::new(CompileLimits {
            work: 10,
            time: Duration::from_secs(60),
        });
        assert!(b.charge(10, "allOf").is_ok());
        assert_eq!(b.charge(1, "oneOf"), Err(Exhausted { keyword: "oneOf" }));
        // Stays spent, still naming where it ran out.
        assert_eq!(b.charge(0, "enum"), Err(Exhausted { keyword: "oneOf" }));
        assert_eq!(b.spent_in(), Some("oneOf"));
        let t = Budget::new(CompileLimits {
            work: u64::MAX,
            time: Duration::ZERO,
        });
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(
            t.charge(CLOCK_EVERY, "pattern"),
            Err(Exhausted { keyword: "pattern" })
        );
    }
}
