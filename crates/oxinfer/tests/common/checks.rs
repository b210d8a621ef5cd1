//! Checks of a model against the transformers references of a tiny-checkpoint fixture
//! (`reference.json` with per-prompt ids, `.npy` logits and greedy ids).

use std::path::{Path, PathBuf};

use oxinfer::arch::SeqBatch;
use oxinfer::engine::sampler::argmax;
use oxinfer::Model;
use serde_json::Value;

use super::{fixtures, ids, max_abs_diff, read_npy_f32, reference};

/// Logits of every prompt position, run in pieces of `chunk` tokens.
pub fn prompt_logits(model: &Model, prompt: &[u32], chunk: usize) -> Vec<f32> {
    let lm = model.lm();
    let mut cache = lm.new_cache(prompt.len() + 64);
    let mut out = Vec::new();
    for piece in prompt.chunks(chunk) {
        out.extend(lm.forward(piece, &mut cache, true).expect("forward"));
    }
    out
}

/// `n` greedy tokens after `prompt` (prefill, then one token per step through the cache).
pub fn greedy(model: &Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let lm = model.lm();
    let mut cache = lm.new_cache(prompt.len() + n + 1);
    let logits = lm.forward(prompt, &mut cache, false).expect("prefill");
    greedy_continue(model, &mut cache, &logits, n)
}

/// `n` greedy tokens following `last_logits` (the logits of the last position already in
/// `cache`), one token per step, not stopping at end-of-generation tokens.
pub fn greedy_continue(
    model: &Model,
    cache: &mut oxinfer::nn::KvCache,
    last_logits: &[f32],
    n: usize,
) -> Vec<u32> {
    let lm = model.lm();
    let mut next = argmax(last_logits);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(next);
        next = argmax(&lm.forward(&[next], cache, false).expect("decode"));
    }
    out
}

/// Checks one fixture prompt `p` (from `reference.json` in `dir`) on `model`: the prompt logits
/// run in pieces of each size in `chunks` (0 = the whole prompt) within `tol` of the reference,
/// and identical greedy ids. Returns the largest logit difference seen.
pub fn check_prompt(
    model: &Model,
    source: &Path,
    dir: &Path,
    p: &Value,
    chunks: &[usize],
    tol: f32,
) -> f32 {
    let prompt = ids(&p["ids"]);
    let (shape, want) = read_npy_f32(&dir.join(p["logits_file"].as_str().expect("file")));
    assert_eq!(shape, vec![prompt.len(), model.config().vocab_size]);
    let mut worst = 0f32;
    for &chunk in chunks {
        let chunk = if chunk == 0 { prompt.len() } else { chunk };
        let d = max_abs_diff(&prompt_logits(model, &prompt, chunk), &want);
        println!(
            "{} prompt {} chunk {chunk}: max abs logit diff {d:.3e}",
            source.display(),
            p["name"]
        );
        assert!(
            d <= tol,
            "{} prompt {} chunk {chunk}: max abs logit diff {d}",
            source.display(),
            p["name"]
        );
        worst = worst.max(d);
    }
    let want_ids = ids(&p["greedy_ids"]);
    let got_ids = greedy(model, &prompt, want_ids.len());
    assert_eq!(
        got_ids,
        want_ids,
        "{} prompt {} greedy",
        source.display(),
        p["name"]
    );
    worst
}

/// The fixture folder `dir` itself (`""`) or a file in it (e.g. `"model.gguf"`), per entry.
pub fn sources_in(dir: &Path, names: &[&str]) -> Vec<PathBuf> {
    names
        .iter()
        .map(|n| {
            if n.is_empty() {
                dir.to_path_buf()
            } else {
                dir.join(n)
            }
        })
        .collect()
}

/// Checks every prompt of the fixture in `dir` from each of `sources` (the folder itself or a
/// GGUF twin) with prefill chunks `chunks` ([`check_prompt`]); prints and returns the largest
/// logit difference seen.
pub fn check_sources(dir: &Path, sources: &[PathBuf], chunks: &[usize], tol: f32) -> f32 {
    let r = reference(dir);
    let mut worst_all = 0f32;
    for source in sources {
        let model = Model::load(source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
        let mut worst = 0f32;
        for p in r["prompts"].as_array().expect("prompts") {
            worst = worst.max(check_prompt(&model, source, dir, p, chunks, tol));
        }
        println!(
            "{}: worst max abs logit diff {worst:e}",
            source.strip_prefix(fixtures()).unwrap_or(source).display()
        );
        worst_all = worst_all.max(worst);
    }
    worst_all
}

/// One batched pass over two sequences (each with its tokens and cache); `all_logits` for both.
pub fn forward_two(
    model: &Model,
    seqs: [(&[u32], &mut oxinfer::nn::KvCache); 2],
    all_logits: bool,
) -> Vec<Vec<f32>> {
    let [(t0, c0), (t1, c1)] = seqs;
    let mut batch = [
        SeqBatch {
            tokens: t0,
            cache: c0,
            all_logits,
            media: None,
        },
        SeqBatch {
            tokens: t1,
            cache: c1,
            all_logits,
            media: None,
        },
    ];
    model
        .lm()
        .forward_batch(&mut batch)
        .expect("batched forward")
}

/// The fixture's first two prompts (`dir`'s reference.json) as two sequences of one batch:
/// a prefill of the first prompt minus its last token and of the whole second prompt (all
/// logits), then a decode-style step of both (the first prompt's last token beside the second
/// sequence's greedy next token). Each sequence's prefill and the first one's step are within
/// `tol` of its own reference; the second one's step is within 1e-5 of running it alone.
/// Returns the largest reference difference seen.
pub fn check_two_sequences_batched(model: &Model, dir: &Path, tol: f32) -> f32 {
    let r = reference(dir);
    let prompts = r["prompts"].as_array().expect("prompts");
    let (p0, p1) = (ids(&prompts[0]["ids"]), ids(&prompts[1]["ids"]));
    let want = |k: usize| {
        let file = prompts[k]["logits_file"].as_str().expect("logits_file");
        read_npy_f32(&dir.join(file)).1
    };
    let (w0, w1) = (want(0), want(1));
    let vocab = model.config().vocab_size;
    let lm = model.lm();
    let (mut c0, mut c1) = (lm.new_cache(256), lm.new_cache(256));
    let n0 = p0.len() - 1;
    let out = forward_two(model, [(&p0[..n0], &mut c0), (&p1, &mut c1)], true);
    let prefill = [
        max_abs_diff(&out[0], &w0[..n0 * vocab]),
        max_abs_diff(&out[1], &w1),
    ];
    assert!(
        prefill[0] <= tol && prefill[1] <= tol,
        "{}: batched prefill {prefill:?}",
        dir.display()
    );
    let next1 = argmax(&out[1][(p1.len() - 1) * vocab..]);
    let step = forward_two(model, [(&p0[n0..], &mut c0), (&[next1], &mut c1)], false);
    let step0 = max_abs_diff(&step[0], &w0[n0 * vocab..]);
    assert!(step0 <= tol, "{}: batched step {step0}", dir.display());
    let mut alone = lm.new_cache(256);
    lm.forward(&p1, &mut alone, false).expect("prefill alone");
    let want1 = lm.forward(&[next1], &mut alone, false).expect("step alone");
    let d1 = max_abs_diff(&step[1], &want1);
    assert!(d1 <= 1e-5, "{}: batched vs alone {d1}", dir.display());
    prefill[0].max(prefill[1]).max(step0)
}

/// Checks a real-model reference's `top20` lists (per position from `first`, pairs of
/// `[id, logit]`) against `logits` (`[positions from first, vocab]`): each within `tol`.
/// Returns the largest difference; `label` names the prompt in failures.
pub fn check_top20(
    logits: &[f32],
    vocab: usize,
    first: usize,
    top20: &Value,
    tol: f32,
    label: &str,
) -> f32 {
    let mut worst = 0f32;
    for (k, top) in top20.as_array().expect("top20").iter().enumerate() {
        for pair in top.as_array().expect("top20 list") {
            let id = pair[0].as_u64().expect("id") as usize;
            let want = pair[1].as_f64().expect("logit") as f32;
            let got = logits[k * vocab + id];
            worst = worst.max((got - want).abs());
            assert!(
                (got - want).abs() <= tol,
                "{label} pos {} id {id}: {got} vs {want}",
                first + k
            );
        }
    }
    worst
}

/// A real model with llama.cpp's perplexity reference over the fixed text
/// `tests/fixtures/texts/ppl-en.txt`.
pub struct PerplexityCase {
    /// The loaded model.
    pub model: Model,
    /// The reference JSON (`text_tokens`, `perplexity` cases, ...).
    pub reference: Value,
    /// The text's token ids (BOS first when the model adds one), equal to llama.cpp's.
    pub tokens: Vec<u32>,
    /// The BOS id each perplexity window starts with, when the model adds one.
    pub bos: Option<u32>,
}

/// Loads `model_path` and the llama.cpp reference `reference_rel` (under the fixtures) and
/// asserts that the fixed text tokenizes to llama.cpp's ids.
pub fn perplexity_case(model_path: &Path, reference_rel: &str) -> PerplexityCase {
    let reference = super::fixture_json(reference_rel);
    let text = std::fs::read_to_string(fixtures().join("texts/ppl-en.txt")).expect("ppl-en.txt");
    let model = Model::load(model_path).expect("load");
    let tokens = model.tokenize(&text, model.adds_bos()).expect("tokenize");
    assert_eq!(
        tokens,
        ids(&reference["text_tokens"]),
        "text tokenization differs from llama.cpp"
    );
    let bos = model
        .adds_bos()
        .then(|| model.tokenizer().expect("tokenizer").bos_id())
        .flatten();
    PerplexityCase {
        model,
        reference,
        tokens,
        bos,
    }
}
