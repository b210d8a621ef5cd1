//! Per-machine kernel choices: measured once on the running CPU, cached, and installed into the
//! kernels before the first weights are loaded ([`ensure`]).
//!
//! The measurement ([`oxinfer_kernels::tuning`]) takes about a second, so its result is kept in
//! `<cache>/tuning/<cpu>.json` (the cache folder of [`crate::hub::cache_dir`]), keyed by the
//! CPU's model name and the thread count, and reused by every later process on that machine.
//! Measuring needs optimized code: builds with debug assertions (tests, debug binaries) use the
//! known-CPU table instead and write nothing. `OXINFER_TUNE=0` also skips the measurement and
//! `OXINFER_ZMM=0|1` forces the choice (see [`oxinfer_kernels::dispatch`]).

use oxinfer_kernels::dispatch::{self, ChoiceSource, PerFormat, TwoGroupChoice};
use oxinfer_kernels::tuning::{measure_two_group, TwoGroupTiming};
use oxinfer_kernels::WeightFormat;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Version of the cache file (its layout, and the kernels it timed); a file of another
/// version is measured again. 2: the packed K-quant kernels prefetch per sub-block, which
/// changed their speed from memory (timings of version 1 are of other kernels). 3: a prefill
/// measurement beside the decode one, each choosing for its own product sizes.
const CACHE_VERSION: u32 = 3;

/// What [`ensure`] decided for this process.
#[derive(Clone, Debug)]
pub struct CpuTuning {
    /// The choice in effect.
    pub two_group: TwoGroupChoice,
    /// The measurements behind a [`ChoiceSource::Measured`] choice (empty otherwise).
    pub timings: Vec<TwoGroupTiming>,
    /// The cache file read or written, if any.
    pub cache_file: Option<PathBuf>,
    /// Whether the timings were read from the cache (false: measured by this process).
    pub cached: bool,
}

impl CpuTuning {
    /// One line for `oxinfer devices` / `bench`: what runs for Q4_K/Q6_K products and why.
    pub fn describe(&self) -> String {
        let c = self.two_group;
        let on = |b: bool| if b { "512-bit" } else { "256-bit" };
        let mut s = format!(
            "Q4_K {} / Q6_K {} decode, {} / {} prefill kernels ({})",
            on(c.decode.q4k),
            on(c.decode.q6k),
            on(c.prefill.q4k),
            on(c.prefill.q6k),
            c.source.name()
        );
        for t in &self.timings {
            s.push_str(&format!(
                "; {}: decode 256-bit {:.1} GB/s, 512-bit {:.1} GB/s, prefill {:.0} / {:.0} GFLOP/s",
                t.format, t.one_group_gbs, t.two_group_gbs, t.one_group_gflops, t.two_group_gflops
            ));
        }
        if let (Some(f), true) = (&self.cache_file, self.cached) {
            s.push_str(&format!(" (cached in {})", f.display()));
        }
        s
    }
}

/// The cache file's contents.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct CacheFile {
    version: u32,
    cpu: String,
    threads: usize,
    timings: Vec<CachedTiming>,
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct CachedTiming {
    format: String,
    one_group_gbs: f64,
    two_group_gbs: f64,
    one_group_gflops: f64,
    two_group_gflops: f64,
}

impl CachedTiming {
    fn from_timing(t: &TwoGroupTiming) -> Self {
        Self {
            format: t.format.to_string(),
            one_group_gbs: t.one_group_gbs,
            two_group_gbs: t.two_group_gbs,
            one_group_gflops: t.one_group_gflops,
            two_group_gflops: t.two_group_gflops,
        }
    }

    fn to_timing(&self) -> Option<TwoGroupTiming> {
        let format = [WeightFormat::Q4K, WeightFormat::Q6K]
            .into_iter()
            .find(|f| f.to_string() == self.format)?;
        let ok = |v: f64| v.is_finite() && v > 0.0;
        let all = [
            self.one_group_gbs,
            self.two_group_gbs,
            self.one_group_gflops,
            self.two_group_gflops,
        ];
        all.into_iter().all(ok).then_some(TwoGroupTiming {
            format,
            one_group_gbs: self.one_group_gbs,
            two_group_gbs: self.two_group_gbs,
            one_group_gflops: self.one_group_gflops,
            two_group_gflops: self.two_group_gflops,
        })
    }
}

/// The CPU's model name (`/proc/cpuinfo`'s `model name`, else the vendor and family).
pub fn cpu_name() -> String {
    let from_proc = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        });
    from_proc.unwrap_or_else(|| match dispatch::cpu_vendor_family() {
        Some((v, f)) => format!("{v:?} family {f:#x}"),
        None => std::env::consts::ARCH.to_string(),
    })
}

/// What identifies a CPU for the cache: its model name plus vendor and family (virtual machines
/// often report only `AMD EPYC`, which covers both Zen 4 and Zen 5).
fn cpu_key() -> String {
    match dispatch::cpu_vendor_family() {
        Some((v, f)) => format!("{} ({v:?} family {f:#x})", cpu_name()),
        None => cpu_name(),
    }
}

/// The cache file name for `cpu` at `threads`: the name's letters and digits, lower-case,
/// other runs of characters folded into one `-`.
fn cache_name(cpu: &str, threads: usize) -> String {
    let mut s = String::new();
    for c in cpu.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
        } else if !s.ends_with('-') {
            s.push('-');
        }
    }
    format!("{}-t{threads}.json", s.trim_matches('-'))
}

/// Timings read from `path` when it is a cache file of this version for `cpu` and `threads`
/// with one valid entry per format.
fn read_cache(path: &Path, cpu: &str, threads: usize) -> Option<Vec<TwoGroupTiming>> {
    let f: CacheFile = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    if f.version != CACHE_VERSION || f.cpu != cpu || f.threads != threads {
        return None;
    }
    let timings: Option<Vec<_>> = f.timings.iter().map(CachedTiming::to_timing).collect();
    timings.filter(|t| t.len() == 2)
}

/// Writes the cache file through a temporary file and a rename (concurrent processes never
/// see half a file). Failures are ignored: the next process measures again.
fn write_cache(path: &Path, cpu: &str, threads: usize, timings: &[TwoGroupTiming]) {
    let file = CacheFile {
        version: CACHE_VERSION,
        cpu: cpu.to_string(),
        threads,
        timings: timings.iter().map(CachedTiming::from_timing).collect(),
    };
    let Ok(text) = serde_json::to_vec_pretty(&file) else {
        return;
    };
    let Some(dir) = path.parent() else { return };
    let tmp = dir.join(format!(".{}.{}", std::process::id(), "tmp"));
    let _ = std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&tmp, text))
        .and_then(|_| std::fs::rename(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
}

/// The choice the timings make, (decode, prefill): per format and regime, the variant that is
/// faster by more than the margin, and `table` (the known-CPU table's answer) on a tie or
/// without a timing.
fn choose(timings: &[TwoGroupTiming], table: bool) -> (PerFormat, PerFormat) {
    let pick = |f: WeightFormat, verdict: fn(&TwoGroupTiming) -> Option<bool>| {
        timings
            .iter()
            .find(|t| t.format == f)
            .and_then(verdict)
            .unwrap_or(table)
    };
    let per = |verdict: fn(&TwoGroupTiming) -> Option<bool>| PerFormat {
        q4k: pick(WeightFormat::Q4K, verdict),
        q6k: pick(WeightFormat::Q6K, verdict),
    };
    (
        per(TwoGroupTiming::decode_verdict),
        per(TwoGroupTiming::prefill_verdict),
    )
}

/// Makes and installs this process's kernel choices once (later calls return the same answer):
/// nothing to measure when the CPU lacks the kernels, `OXINFER_ZMM` is set, `OXINFER_TUNE=0`
/// or the build has debug assertions; else the cached timings for this CPU and thread count,
/// else a fresh measurement, cached. Call it before loading weights ([`crate::engine::Model`]
/// does).
pub fn ensure() -> &'static CpuTuning {
    static TUNING: OnceLock<CpuTuning> = OnceLock::new();
    TUNING.get_or_init(|| {
        let fixed = dispatch::two_group_choice_if_fixed();
        let measure = fixed.is_none() && dispatch::tuning_enabled() && !cfg!(debug_assertions);
        if !measure {
            return CpuTuning {
                two_group: dispatch::two_group_choice(),
                timings: Vec::new(),
                cache_file: None,
                cached: false,
            };
        }
        let (cpu, threads) = (cpu_key(), oxinfer_kernels::num_threads());
        let path = crate::hub::cache_dir()
            .join("tuning")
            .join(cache_name(&cpu, threads));
        let (timings, cached) = match read_cache(&path, &cpu, threads) {
            Some(t) => (t, true),
            None => {
                let t: Vec<_> = [WeightFormat::Q4K, WeightFormat::Q6K]
                    .into_iter()
                    .filter_map(measure_two_group)
                    .collect();
                if t.len() == 2 {
                    write_cache(&path, &cpu, threads, &t);
                }
                (t, false)
            }
        };
        let two_group = if timings.is_empty() {
            dispatch::two_group_choice()
        } else {
            let (decode, prefill) = choose(&timings, dispatch::cpu_table_two_group());
            dispatch::install_measured_two_group(decode, prefill)
        };
        let timings = if two_group.source == ChoiceSource::Measured {
            timings
        } else {
            Vec::new()
        };
        CpuTuning {
            two_group,
            timings,
            cache_file: Some(path),
            cached,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(format: WeightFormat, one: f64, two: f64) -> TwoGroupTiming {
        TwoGroupTiming {
            format,
            one_group_gbs: one,
            two_group_gbs: two,
            one_group_gflops: 100.0 * two,
            two_group_gflops: 100.0 * one,
        }
    }

    #[test]
    fn cache_names_are_file_safe() {
        assert_eq!(
            cache_name("AMD EPYC 9R14 96-Core Processor", 2),
            "amd-epyc-9r14-96-core-processor-t2.json"
        );
        assert_eq!(
            cache_name("  (weird)/cpu\\name ", 16),
            "weird-cpu-name-t16.json"
        );
    }

    #[test]
    fn cache_round_trip_and_rejects() {
        let dir = std::env::temp_dir().join(format!("oxinfer-tuning-{}", std::process::id()));
        let path = dir.join("cpu-t2.json");
        let t = vec![
            timing(WeightFormat::Q4K, 40.0, 30.0),
            timing(WeightFormat::Q6K, 35.0, 38.0),
        ];
        write_cache(&path, "Some CPU", 2, &t);
        assert_eq!(read_cache(&path, "Some CPU", 2), Some(t.clone()));
        // another CPU, another thread count: measure again
        assert_eq!(read_cache(&path, "Other CPU", 2), None);
        assert_eq!(read_cache(&path, "Some CPU", 4), None);
        // timings of an older version are of other kernels: measure again
        let mut old: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        old["version"] = serde_json::json!(CACHE_VERSION - 1);
        std::fs::write(&path, old.to_string()).unwrap();
        assert_eq!(read_cache(&path, "Some CPU", 2), None);
        // a damaged or hostile file is measured again, never trusted
        std::fs::write(&path, b"{\"version\":2,\"cpu\":\"Some CPU\",\"threads\":2,").unwrap();
        assert_eq!(read_cache(&path, "Some CPU", 2), None);
        let bad = serde_json::json!({"version": CACHE_VERSION, "cpu": "Some CPU", "threads": 2, "timings": [
            {"format": "Q4_K", "one_group_gbs": -1.0, "two_group_gbs": 3.0,
             "one_group_gflops": 1.0, "two_group_gflops": 3.0},
            {"format": "Q6_K", "one_group_gbs": 1.0, "two_group_gbs": 3.0,
             "one_group_gflops": 1.0, "two_group_gflops": 3.0}]});
        std::fs::write(&path, bad.to_string()).unwrap();
        assert_eq!(read_cache(&path, "Some CPU", 2), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn each_format_and_regime_takes_the_faster_variant() {
        // Prefill timings are the decode ones swapped (see `timing`).
        let t = [
            timing(WeightFormat::Q4K, 40.0, 30.0),
            timing(WeightFormat::Q6K, 35.0, 38.0),
        ];
        let pf = |q4k, q6k| PerFormat { q4k, q6k };
        for table in [false, true] {
            assert_eq!(choose(&t, table), (pf(false, true), pf(true, false)));
        }
        // Ties and missing timings: the known-CPU table decides.
        let tie = [timing(WeightFormat::Q4K, 40.0, 40.5)];
        assert_eq!(choose(&tie, true), (pf(true, true), pf(true, true)));
        assert_eq!(choose(&tie, false), (pf(false, false), pf(false, false)));
        assert_eq!(choose(&[], false), (pf(false, false), pf(false, false)));
    }

    #[test]
    fn ensure_is_stable_and_consistent_with_the_kernels() {
        let a = ensure();
        assert_eq!(a.two_group, dispatch::two_group_choice());
        assert!(std::ptr::eq(a, ensure()));
        assert!(!a.describe().is_empty());
    }
}
