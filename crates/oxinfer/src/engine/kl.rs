//! KL divergence between the next-token distributions of two models on the same text (two
//! precisions of one model, or two implementations), measured the way llama.cpp's
//! `llama-perplexity --kl-divergence` does: the perplexity windows of [`super::perplexity`]
//! (non-overlapping windows of `ctx` tokens, BOS first when given, the second half of each
//! window scored), and at each scored position `KL(P_ref ‖ P_model) = Σ p_ref (ln p_ref − ln
//! p_model)`, whether both put the same token first, and each model's log-likelihood of the
//! actual next token.

use crate::arch::CausalLm;
use crate::error::{Error, Result};

/// Statistics of a KL-divergence run (the figures llama-perplexity prints).
#[derive(Clone, Debug)]
pub struct KlStats {
    /// Windows evaluated.
    pub chunks: usize,
    /// Positions scored.
    pub scored: usize,
    /// Perplexity of the model under test, with its standard error.
    pub ppl_model: (f64, f64),
    /// Perplexity of the reference, with its standard error.
    pub ppl_ref: (f64, f64),
    /// Mean KL divergence (nats) and its standard error.
    pub mean_kl: (f64, f64),
    /// Median KL.
    pub median_kl: f64,
    /// 99th percentile of KL.
    pub p99_kl: f64,
    /// 99.9th percentile of KL.
    pub p999_kl: f64,
    /// Largest KL.
    pub max_kl: f64,
    /// Fraction of positions where both models rank the same token first, with its standard
    /// error.
    pub top1_agree: (f64, f64),
}

/// Log-softmax of one row of logits, in f64.
fn log_softmax(row: &[f32], out: &mut Vec<f64>) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = row.iter().map(|&l| f64::from(l - max).exp()).sum();
    let lse = sum.ln();
    out.clear();
    out.extend(row.iter().map(|&l| f64::from(l - max) - lse));
}

fn argmax(v: &[f64]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// Running sums for a mean and its standard error.
#[derive(Default)]
struct Moments {
    n: f64,
    sum: f64,
    sum2: f64,
}

impl Moments {
    fn push(&mut self, x: f64) {
        self.n += 1.0;
        self.sum += x;
        self.sum2 += x * x;
    }
    fn mean_err(&self) -> (f64, f64) {
        let mean = self.sum / self.n;
        let var = (self.sum2 / self.n - mean * mean).max(0.0);
        let err = if self.n > 1.0 {
            (var / (self.n - 1.0)).sqrt()
        } else {
            0.0
        };
        (mean, err)
    }
}

/// The `q`-quantile (0..=1) of sorted values, linearly interpolated.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Compares `model` with `reference` on `tokens` (the text, without BOS) in windows of `ctx`
/// (BOS `bos` first in each window when given; at most `max_chunks` windows), both models fed
/// the same pieces of at most `prefill_chunk` tokens. `progress(done, total)` runs after each
/// window.
///
/// # Errors
/// Different vocabulary sizes; `ctx` out of range or longer than the text; model errors.
#[allow(clippy::too_many_arguments)]
pub fn kl_divergence(
    model: &dyn CausalLm,
    reference: &dyn CausalLm,
    tokens: &[u32],
    ctx: usize,
    bos: Option<u32>,
    max_chunks: Option<usize>,
    prefill_chunk: usize,
    mut progress: impl FnMut(usize, usize),
) -> Result<KlStats> {
    let vocab = model.config().vocab_size;
    if reference.config().vocab_size != vocab {
        return Err(Error::Request(format!(
            "the models have different vocabularies ({vocab} and {} tokens): KL divergence needs \
             the same tokenizer",
            reference.config().vocab_size
        )));
    }
    if !(4..=1 << 20).contains(&ctx) {
        return Err(Error::Request(format!(
            "--ctx {ctx} is out of range (4 ..= 1048576)"
        )));
    }
    let mut n_chunks = tokens.len() / ctx;
    if let Some(m) = max_chunks {
        n_chunks = n_chunks.min(m);
    }
    if n_chunks == 0 {
        return Err(Error::Request(format!(
            "the text has {} tokens; --ctx {ctx} needs at least {ctx}",
            tokens.len()
        )));
    }
    let first = ctx / 2;
    let (mut nll_m, mut nll_r, mut kl_m) =
        (Moments::default(), Moments::default(), Moments::default());
    let mut kls = Vec::new();
    let mut agree = 0usize;
    let (mut lm, mut lr) = (Vec::new(), Vec::new());
    let piece_len = prefill_chunk.max(1);
    for c in 0..n_chunks {
        let start = c * ctx;
        let mut window = tokens[start..start + ctx].to_vec();
        if let Some(b) = bos {
            window[0] = b;
        }
        let mut cache_m = model.new_cache(ctx);
        let mut cache_r = reference.new_cache(ctx);
        for (pi, piece) in window.chunks(piece_len).enumerate() {
            let base = pi * piece_len;
            let out_m = model.forward(piece, &mut cache_m, true)?;
            let out_r = reference.forward(piece, &mut cache_r, true)?;
            for k in 0..piece.len() {
                let j = base + k;
                if j < first || j + 1 >= ctx {
                    continue;
                }
                log_softmax(&out_m[k * vocab..(k + 1) * vocab], &mut lm);
                log_softmax(&out_r[k * vocab..(k + 1) * vocab], &mut lr);
                let target = tokens[start + j + 1] as usize;
                nll_m.push(-lm[target]);
                nll_r.push(-lr[target]);
                let kl: f64 = lr
                    .iter()
                    .zip(&lm)
                    .map(|(&r, &m)| if r > -700.0 { r.exp() * (r - m) } else { 0.0 })
                    .sum::<f64>()
                    .max(0.0);
                kl_m.push(kl);
                kls.push(kl);
                agree += usize::from(argmax(&lm) == argmax(&lr));
            }
        }
        progress(c + 1, n_chunks);
    }
    kls.sort_by(f64::total_cmp);
    let n = kls.len() as f64;
    let ppl = |m: &Moments| {
        let (mean, err) = m.mean_err();
        (mean.exp(), err * mean.exp())
    };
    let p = agree as f64 / n;
    Ok(KlStats {
        chunks: n_chunks,
        scored: kls.len(),
        ppl_model: ppl(&nll_m),
        ppl_ref: ppl(&nll_r),
        mean_kl: kl_m.mean_err(),
        median_kl: quantile(&kls, 0.5),
        p99_kl: quantile(&kls, 0.99),
        p999_kl: quantile(&kls, 0.999),
        max_kl: *kls.last().unwrap_or(&0.0),
        top1_agree: (p, (p * (1.0 - p) / (n - 1.0).max(1.0)).sqrt()),
    })
}
