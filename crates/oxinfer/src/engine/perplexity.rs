//! Perplexity the way llama.cpp's `llama-perplexity` measures it: the text is tokenized once,
//! cut into non-overlapping windows of `ctx` tokens (the first token of each window replaced
//! by BOS when the model adds one), and only the second half of each window is scored.

use crate::arch::CausalLm;
use crate::error::{Error, Result};

/// Result of a perplexity run.
#[derive(Clone, Debug)]
pub struct Perplexity {
    /// exp(mean negative log-likelihood).
    pub ppl: f64,
    /// Standard error of the estimate (llama.cpp's `+/-`).
    pub error: f64,
    /// Windows evaluated.
    pub chunks: usize,
    /// Tokens scored.
    pub scored: usize,
    /// Per scored position: the model's most likely next token (for top-1 agreement).
    pub top1: Vec<u32>,
}

/// Scores `tokens` (the whole text, without BOS) in windows of `ctx`. `bos` is inserted at the
/// start of each window when given; at most `max_chunks` windows are run. `progress` is
/// called after each window with (done, total, running ppl).
pub fn perplexity(
    lm: &dyn CausalLm,
    tokens: &[u32],
    ctx: usize,
    bos: Option<u32>,
    max_chunks: Option<usize>,
    prefill_chunk: usize,
    mut progress: impl FnMut(usize, usize, f64),
) -> Result<Perplexity> {
    if ctx < 4 {
        return Err(Error::Request(format!(
            "--ctx {ctx} is too small (at least 4)"
        )));
    }
    if ctx > 1 << 20 {
        return Err(Error::Request(format!("--ctx {ctx} is too large")));
    }
    let mut n_chunks = tokens.len() / ctx;
    if let Some(m) = max_chunks {
        n_chunks = n_chunks.min(m);
    }
    if n_chunks == 0 {
        return Err(Error::Request(format!(
            "the text has {} tokens; perplexity with --ctx {ctx} needs at least {ctx}",
            tokens.len()
        )));
    }
    let first = ctx / 2;
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    let mut top1 = Vec::new();
    for c in 0..n_chunks {
        let start = c * ctx;
        let mut window = tokens[start..start + ctx].to_vec();
        if let Some(b) = bos {
            window[0] = b;
        }
        let mut cache = lm.new_cache(ctx);
        // Position j's target is the next token (the last position's is unused).
        let targets: Vec<u32> = (0..ctx)
            .map(|j| tokens.get(start + j + 1).copied().unwrap_or(0))
            .collect();
        let mut scores = Vec::with_capacity(ctx);
        let step = prefill_chunk.max(1);
        for (piece, want) in window.chunks(step).zip(targets.chunks(step)) {
            scores.extend(lm.forward_scores(piece, &mut cache, want)?);
        }
        for s in &scores[first..ctx - 1] {
            nll -= s.logp;
            nll2 += s.logp * s.logp;
            count += 1;
            top1.push(s.argmax);
        }
        progress(c + 1, n_chunks, (nll / count as f64).exp());
    }
    let n = count as f64;
    let mean = nll / n;
    let var = nll2 / n - mean * mean;
    let ppl = mean.exp();
    let error = if var > 0.0 && count > 1 {
        (var / (n - 1.0)).sqrt() * ppl
    } else {
        0.0
    };
    Ok(Perplexity {
        ppl,
        error,
        chunks: n_chunks,
        scored: count,
        top1,
    })
}
