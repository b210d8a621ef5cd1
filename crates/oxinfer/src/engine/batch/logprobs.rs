//! Log-probabilities of sampled tokens and their most likely alternatives, as OpenAI's
//! `logprobs` report them.

/// A token's log-probability and the most likely alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    /// Natural log of the chosen token's probability.
    pub logprob: f32,
    /// `(id, logprob)`, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// The log-sum-exp of `logits` (`[vocab]`, −∞ entries ignored) and the `k` most likely tokens
/// with their log-probabilities, most likely first.
pub fn top_logprobs(logits: &[f32], k: usize) -> (f32, Vec<(u32, f32)>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits
        .iter()
        .filter(|v| v.is_finite())
        .map(|&v| f64::from(v - max).exp())
        .sum();
    let lse = max + sum.ln() as f32;
    let mut idx: Vec<u32> = (0..logits.len() as u32)
        .filter(|&i| logits[i as usize].is_finite())
        .collect();
    let k = k.min(idx.len());
    if k > 0 {
        let cmp = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]);
        idx.select_nth_unstable_by(k - 1, cmp);
        idx.truncate(k);
        idx.sort_by(cmp);
    } else {
        idx.clear();
    }
    (
        lse,
        idx.into_iter()
            .map(|i| (i, logits[i as usize] - lse))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probabilities_sum_to_one_and_top_is_sorted() {
        let logits = [1.0f32, 3.0, f32::NEG_INFINITY, 2.0];
        let (lse, top) = top_logprobs(&logits, 5);
        let total: f32 = logits
            .iter()
            .filter(|v| v.is_finite())
            .map(|v| (v - lse).exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-6, "{total}");
        let ids: Vec<u32> = top.iter().map(|t| t.0).collect();
        assert_eq!(ids, [1, 3, 0], "masked token left out, best first");
        assert!((top[0].1 - (3.0 - lse)).abs() < 1e-6);
    }
}
