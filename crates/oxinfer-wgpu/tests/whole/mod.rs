//! What the whole-model wgpu test binaries share: the backend installed process-wide on adapter
//! 0 (as `--device wgpu` does), the count of plan and encoder passes it ran, and greedy tokens
//! against the CPU path.
#![allow(dead_code)]

use crate::common::greedy;
use crate::device;
use oxinfer::backend;
use oxinfer::Model;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// Serializes the tests: `cpu_only` (the CPU twins) is process-wide.
pub static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Installs the backend on adapter 0 once; false (after the skip line) without one.
pub fn installed() -> bool {
    static DONE: OnceLock<bool> = OnceLock::new();
    *DONE.get_or_init(|| match device::backend() {
        Some(b) => {
            backend::install(Some(Box::new(b)));
            true
        }
        None => false,
    })
}

/// Plan passes the installed backend ran so far (from its stats).
pub fn device_passes() -> u64 {
    calls_of("run_plan")
}

/// Whole encoder passes (`run_encoder`) the installed backend ran so far.
pub fn encoder_passes() -> u64 {
    calls_of("run_encoder")
}

/// Calls of the installed backend's operations whose names start with `op` (from its stats).
fn calls_of(op: &str) -> u64 {
    let stats = backend::active()
        .and_then(|b| b.stats())
        .unwrap_or_default();
    stats
        .lines()
        .filter(|l| l.trim_start().starts_with(op))
        .filter_map(|l| l.split_whitespace().find_map(|w| w.parse::<u64>().ok()))
        .sum()
}

/// `n` greedy tokens after `prompt` on the device and on the CPU; asserts they are the same
/// and that the device ran passes.
pub fn greedy_matches_cpu(model: &Model, prompt: &[u32], n: usize, what: &str) {
    let before = device_passes();
    let start = Instant::now();
    let dev = greedy(model, prompt, n);
    let dev_s = start.elapsed().as_secs_f64();
    let passes = device_passes() - before;
    let start = Instant::now();
    let cpu = {
        let _cpu = backend::cpu_only();
        greedy(model, prompt, n)
    };
    println!(
        "{what}: {n} greedy tokens, device {dev_s:.1} s ({passes} passes), CPU {:.1} s",
        start.elapsed().as_secs_f64()
    );
    assert!(
        passes > n as u64 / 2,
        "{what}: the plan did not run on the device"
    );
    assert_eq!(dev, cpu, "{what}: greedy tokens differ from the CPU path");
}
