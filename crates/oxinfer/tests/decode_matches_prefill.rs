//! The real models give a position the same logits, bit for bit, in a many-row pass (prefill,
//! speculative verify) and in a one-row pass (decode): the start of
//! `tests/fixtures/texts/ppl-en.txt` runs once as one prefill and once as a shorter prefill
//! followed by its last tokens one at a time, and every row's logits must be identical.
//! Speculative decoding and prefix reuse are exact only when this holds (docs/speculative.md).
//!
//! Each kernel path runs in a child process of this test binary, since the kernel choice is
//! read once per process: the default (AVX-512 VNNI where the CPU has it) and `OXINFER_VNNI=0`
//! (AVX2) on SmolLM2-135M (280 tokens: two 256-key attention segments) and Gemma 3 270M (520
//! tokens, past its 512-key sliding window, so the decode steps read the sliding layers'
//! rings), 16 of them one at a time; `OXINFER_KERNELS=scalar` (the reference, row by row by
//! construction) on 24 tokens, 8 one at a time.
//!
//! `OXINFER_ROWS_FULL=1` runs every path on the full length and every token one at a time
//! (minutes); `OXINFER_ROWS_KV=q8_0` (any `--cache-type-k` spelling) runs the check on a KV
//! cache of that type.

mod common;

use common::{prompt_logits, real_model, visible_line};
use oxinfer::plan::KvTypes;
use oxinfer::Model;
use oxinfer_kernels::attention::KvType;
use oxinfer_kernels::dispatch::{detected_isa, kernel_set, KERNELS_VAR, VNNI_VAR};

/// Variables telling the child the model file, the prompt length and how many of its last
/// tokens run one at a time (all when 0).
const MODEL_VAR: &str = "OXINFER_ROWS_MODEL";
const TOKENS_VAR: &str = "OXINFER_ROWS_TOKENS";
const DECODE_VAR: &str = "OXINFER_ROWS_DECODE";
/// `1`: every path on the full prompt, every token one at a time.
const FULL_VAR: &str = "OXINFER_ROWS_FULL";
/// A KV cache type for the check (default f32).
const KV_VAR: &str = "OXINFER_ROWS_KV";

/// A kernel path: its name, the environment that selects it, and whether it runs the short
/// prompt (the scalar reference is slow, and row by row by construction).
type KernelPath = (&'static str, &'static [(&'static str, &'static str)], bool);

/// The kernel paths.
const PATHS: [KernelPath; 3] = [
    ("default", &[], false),
    ("avx2", &[(VNNI_VAR, "0")], false),
    ("scalar", &[(KERNELS_VAR, "scalar")], true),
];

/// Runs the check on `file` with `tokens` tokens of the text, once per kernel path.
fn check_paths(file: &str, tokens: usize) {
    if real_model(file).is_none() {
        return;
    }
    let full = std::env::var(FULL_VAR).is_ok_and(|v| v == "1");
    let mut failed = Vec::new();
    for (name, env, short) in PATHS {
        let (n, decode) = match (full, short) {
            (true, _) => (tokens, 0),
            (false, false) => (tokens, 16),
            (false, true) => (24, 8),
        };
        let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["--ignored", "--exact", "child", "--nocapture"])
            .env(MODEL_VAR, file)
            .env(TOKENS_VAR, n.to_string())
            .env(DECODE_VAR, decode.to_string())
            .envs(env.iter().copied())
            .output()
            .expect("run the child test");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        for line in stdout.lines().chain(stderr.lines()) {
            if line.starts_with("rows:") {
                visible_line(&format!("{file} [{name}] {line}"));
            }
        }
        if !(out.status.success() && stdout.contains("1 passed")) {
            failed.push(format!("[{name}]\n{stdout}{stderr}"));
        }
    }
    assert!(failed.is_empty(), "{file}: {}", failed.join("\n"));
}

#[test]
fn smollm2_decode_matches_prefill() {
    check_paths("SmolLM2-135M-Instruct.Q4_1.gguf", 280);
}

#[test]
fn gemma3_decode_matches_prefill() {
    check_paths("gemma-3-270m-q4_k_m.gguf", 520);
}

/// One kernel path (chosen by the parent through the environment): the prompt as one pass, and
/// as a pass of all but its last `decode` tokens then those one at a time; every row's logits
/// compared bit for bit.
#[test]
#[ignore = "run by the tests above, once per kernel path"]
fn child() {
    let file = std::env::var(MODEL_VAR).expect("the model file");
    let n: usize = std::env::var(TOKENS_VAR)
        .expect("the token count")
        .parse()
        .expect("a token count");
    let decode: usize = std::env::var(DECODE_VAR)
        .expect("the decode count")
        .parse()
        .expect("a decode count");
    let path = real_model(&file).expect("the parent found the model");
    let mut model = Model::load(&path).expect("load");
    if let Ok(ty) = std::env::var(KV_VAR) {
        let ty: KvType = ty.parse().expect("a KV type");
        model = model.with_kv_types(KvTypes { k: ty, v: ty });
    }
    let text = std::fs::read_to_string(common::fixtures().join("texts/ppl-en.txt")).unwrap();
    let mut prompt = model.tokenize(&text, model.adds_bos()).expect("tokenize");
    assert!(prompt.len() >= n, "the text has {} tokens", prompt.len());
    prompt.truncate(n);
    let vocab = model.config().vocab_size;
    let t = std::time::Instant::now();
    let together = prompt_logits(&model, &prompt, n);
    let split = if decode == 0 { 0 } else { n - decode.min(n) };
    let lm = model.lm();
    let mut cache = lm.new_cache(n + 1);
    let mut alone = Vec::with_capacity(n * vocab);
    if split > 0 {
        alone.extend(
            lm.forward(&prompt[..split], &mut cache, true)
                .expect("prefill"),
        );
    }
    for tok in &prompt[split..] {
        alone.extend(lm.forward(&[*tok], &mut cache, true).expect("decode"));
    }
    let rows_differing: Vec<usize> = (0..n)
        .filter(|&i| {
            let (a, b) = (
                &together[i * vocab..(i + 1) * vocab],
                &alone[i * vocab..(i + 1) * vocab],
            );
            a.iter().zip(b).any(|(x, y)| x.to_bits() != y.to_bits())
        })
        .collect();
    println!(
        "rows: {n} tokens ({} one at a time), kernels {} ({}), KV {}: {} rows differ (first \
         {:?}), max |logit diff| {:.3e}, {:.1} s",
        n - split,
        kernel_set().name(),
        detected_isa().name(),
        std::env::var(KV_VAR).unwrap_or_else(|_| "f32".into()),
        rows_differing.len(),
        rows_differing.first(),
        common::max_abs_diff(&together, &alone),
        t.elapsed().as_secs_f64()
    );
    assert!(rows_differing.is_empty());
}
