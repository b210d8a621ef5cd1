//! `oxinfer bench`: prompt-processing and generation speed like llama-bench (mean ± standard
//! deviation of tok/s over repetitions, markdown or JSON), optionally at a depth (`-d`: that
//! many positions already in the KV cache), and `--memory`: measured read bandwidth and the
//! decode ceiling it implies for a model.

use crate::common::{ModelArgs, ModelPositional};
use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use oxinfer::nn::KvCache;
use oxinfer::Model;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub positional: ModelPositional,
    /// Prompt lengths to test (pp), comma-separated; 0 skips.
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    pub n_prompt: Vec<usize>,
    /// Tokens to generate (tg); 0 skips.
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    pub n_gen: Vec<usize>,
    /// Positions already in the KV cache when each test starts (llama-bench's -d),
    /// comma-separated; the cache is filled once per depth and each repetition runs on a copy.
    #[arg(
        short = 'd',
        long = "n-depth",
        visible_alias = "depth",
        value_delimiter = ',',
        default_value = "0"
    )]
    pub n_depth: Vec<usize>,
    #[command(flatten)]
    pub kv: crate::kv_args::KvArgs,
    /// Repetitions of each test.
    #[arg(short = 'r', long, default_value_t = 3)]
    pub reps: usize,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Md)]
    pub output: Output,
    /// Measure memory read bandwidth (and, with -m, the decode ceiling it implies).
    #[arg(long)]
    pub memory: bool,
    /// With --memory: time each weight format's one-token product beside the probe (`all`, or
    /// GGUF names: `q4_k,q6_k`).
    #[arg(long, requires = "memory")]
    pub formats: Option<String>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Output {
    Md,
    Json,
}

struct Row {
    test: String,
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
    samples: Vec<f64>,
}

fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

/// Deterministic token ids spread over the vocabulary.
fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % vocab as u64) as u32
        })
        .collect()
}

/// A cache of room for `depth + room` positions holding `depth` positions of deterministic
/// tokens.
fn prefilled(model: &Model, depth: usize, room: usize) -> Result<KvCache> {
    let lm = model.lm();
    let mut cache = lm.new_cache(depth + room);
    let ids = tokens(depth, model.config().vocab_size, u64::MAX);
    for chunk in ids.chunks(oxinfer::engine::generate::DEFAULT_PREFILL_CHUNK) {
        lm.forward(chunk, &mut cache, false)?;
    }
    Ok(cache)
}

/// The cache every test of one depth starts from, and how each repetition gets its own copy.
struct DepthCache<'m> {
    model: &'m Model,
    depth: usize,
    room: usize,
    base: KvCache,
}

impl<'m> DepthCache<'m> {
    /// `depth` positions prefilled, with room for `room` more.
    fn new(model: &'m Model, depth: usize, room: usize) -> Result<Self> {
        let base = prefilled(model, depth, room)?;
        Ok(DepthCache {
            model,
            depth,
            room,
            base,
        })
    }

    /// Runs `f` on a cache holding the depth's positions. A host cache is copied; a cache whose
    /// rows a device holds is used in place and rewound afterwards (`KvCache::clone` copies the
    /// host's rows only, and uploading them again would fall inside the timed run), prefilled
    /// again when it cannot rewind (recurrent state, a sliding ring that dropped rows).
    fn run<T>(&mut self, f: impl FnOnce(&mut KvCache) -> Result<T>) -> Result<T> {
        if self.base.device().is_none() {
            return f(&mut self.base.clone());
        }
        let r = f(&mut self.base);
        self.base.truncate(self.depth);
        if self.base.len() != self.depth {
            self.base = prefilled(self.model, self.depth, self.room)?;
        }
        r
    }
}

fn run_pp(model: &Model, base: &mut DepthCache, n: usize, seed: u64) -> Result<f64> {
    let lm = model.lm();
    let ids = tokens(n, model.config().vocab_size, seed);
    base.run(|cache| {
        let t0 = Instant::now();
        for chunk in ids.chunks(oxinfer::engine::generate::DEFAULT_PREFILL_CHUNK) {
            lm.forward(chunk, cache, false)?;
        }
        Ok(n as f64 / t0.elapsed().as_secs_f64())
    })
}

fn run_tg(model: &Model, base: &mut DepthCache, n: usize, seed: u64) -> Result<f64> {
    let lm = model.lm();
    let ids = tokens(n, model.config().vocab_size, seed);
    base.run(|cache| {
        let t0 = Instant::now();
        for &id in &ids {
            lm.forward(&[id], cache, false)?;
        }
        Ok(n as f64 / t0.elapsed().as_secs_f64())
    })
}

pub fn run(mut a: BenchArgs) -> Result<()> {
    a.model = std::mem::take(&mut a.positional).merge_into(a.model)?;
    if a.reps == 0 {
        bail!("--reps must be at least 1");
    }
    if a.memory {
        let formats = match &a.formats {
            Some(list) => crate::bench_memory::parse_formats(list)?,
            None => Vec::new(),
        };
        let model = match a.model.model.is_some() {
            true => Some(a.model.load()?),
            false => {
                a.model.prepare_runtime()?;
                None
            }
        };
        return crate::bench_memory::run(model, &formats);
    }
    let model = a.kv.apply(a.model.load()?)?;
    let threads = oxinfer_kernels::pool::pool_threads();
    let mut rows = Vec::new();
    let ctx = model.config().context_length;
    let room = a
        .n_prompt
        .iter()
        .chain(&a.n_gen)
        .max()
        .copied()
        .unwrap_or(0);
    for &d in &a.n_depth {
        if d + room > ctx {
            bail!("-d {d} with -p/-n up to {room} exceeds the model's context ({ctx})");
        }
        let mut base = DepthCache::new(&model, d, room + 1)?;
        rows.extend(run_tests(&model, &a, &mut base)?);
    }
    print_rows(&model, &a, &rows, threads)
}

/// The pp and tg tests of `a`, each starting from a copy of `base`.
fn run_tests(model: &Model, a: &BenchArgs, base: &mut DepthCache) -> Result<Vec<Row>> {
    let d = base.depth;
    let at = |t: String| if d > 0 { format!("{t} @ d{d}") } else { t };
    let mut rows = Vec::new();
    for &p in a.n_prompt.iter().filter(|&&p| p > 0) {
        // Warm-up. A device backend sizes its pinned and scratch buffers on the first pass of a
        // size and decodes its weights on first use, so it warms up on the full prompt (as
        // llama-bench always does); the CPU needs only a short one.
        let warm = if oxinfer::backend::active().is_some() {
            p
        } else {
            p.min(32)
        };
        run_pp(model, base, warm, 0)?;
        let samples = (0..a.reps)
            .map(|r| run_pp(model, base, p, r as u64 + 1))
            .collect::<Result<Vec<_>>>()?;
        rows.push(Row {
            test: at(format!("pp{p}")),
            n_prompt: p,
            n_gen: 0,
            n_depth: d,
            samples,
        });
    }
    for &n in a.n_gen.iter().filter(|&&n| n > 0) {
        run_tg(model, base, n.min(8), 0)?; // warm-up
        let samples = (0..a.reps)
            .map(|r| run_tg(model, base, n, r as u64 + 1))
            .collect::<Result<Vec<_>>>()?;
        rows.push(Row {
            test: at(format!("tg{n}")),
            n_prompt: 0,
            n_gen: n,
            n_depth: d,
            samples,
        });
    }
    Ok(rows)
}

/// Prints the table (or JSON) of `rows`, then the profile when asked.
fn print_rows(model: &Model, a: &BenchArgs, rows: &[Row], threads: usize) -> Result<()> {
    let info = model.info();
    let model_type = format!(
        "{} {:.0}M {}",
        info.architecture,
        info.parameters as f64 / 1e6,
        info.config.dtype.clone().unwrap_or_default()
    );
    let cpu = format!("CPU ({})", oxinfer_kernels::vecdot::detected_isa().name());
    let mut backend = match oxinfer::backend::active() {
        Some(b) => format!("{} + {cpu}", b.name()),
        None => cpu,
    };
    let kv = model.kv_types();
    if !kv.is_f32() {
        backend = format!("{backend}, KV {}/{}", kv.k, kv.v);
    }
    let name = model
        .path()
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    match a.output {
        Output::Md => {
            println!("| model | size | params | backend | threads | test | t/s |");
            println!("| --- | ---: | ---: | --- | ---: | ---: | ---: |");
            for r in rows {
                let (m, s) = mean_std(&r.samples);
                println!(
                    "| {model_type} | {:.2} MiB | {:.2} M | {backend} | {threads} | {} | {m:.2} ± {s:.2} |",
                    info.file_size as f64 / 1048576.0,
                    info.parameters as f64 / 1e6,
                    r.test
                );
            }
        }
        Output::Json => {
            let out: Vec<serde_json::Value> = rows
                .iter()
                .map(|r| {
                    let (m, s) = mean_std(&r.samples);
                    serde_json::json!({
                        "model_filename": name,
                        "model_type": model_type,
                        "model_size": info.file_size,
                        "model_n_params": info.parameters,
                        "backends": backend,
                        "n_threads": threads,
                        "n_prompt": r.n_prompt,
                        "n_gen": r.n_gen,
                        "n_depth": r.n_depth,
                        "type_k": kv.k.name(),
                        "type_v": kv.v.name(),
                        "test": r.test,
                        "avg_ts": m,
                        "stddev_ts": s,
                        "samples_ts": r.samples,
                    })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
    }
    crate::common::print_profile();
    Ok(())
}
