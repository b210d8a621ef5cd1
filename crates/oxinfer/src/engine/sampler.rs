//! Token sampling: repetition penalties, top-k, top-p, min-p, temperature, seeded draws;
//! greedy when the temperature is zero. The order follows llama.cpp's default chain
//! (penalties → top-k → top-p → min-p → temperature → draw).

use crate::error::Error;

/// Sampling settings of one request.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; `0` picks the most likely token (greedy).
    pub temperature: f32,
    /// Keep the `k` most likely tokens; `0` disables.
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches `p`; `1` disables.
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` × the top probability; `0` disables.
    pub min_p: f32,
    /// Divide positive (multiply negative) logits of recently seen tokens; `1` disables.
    pub repeat_penalty: f32,
    /// How many recent tokens the penalties look at.
    pub repeat_last_n: usize,
    /// OpenAI-style penalty subtracted once from the logit of any seen token.
    pub presence_penalty: f32,
    /// OpenAI-style penalty subtracted per occurrence of a seen token.
    pub frequency_penalty: f32,
    /// Seed of the random draws.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: 0,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding (argmax), no penalties.
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            ..Default::default()
        }
    }

    /// Checks ranges, naming the value at fault.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |what: String| Err(Error::Request(what));
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad(format!("temperature {} must be ≥ 0", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p {} must be in (0, 1]", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min_p {} must be in [0, 1]", self.min_p));
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad(format!(
                "repeat penalty {} must be > 0",
                self.repeat_penalty
            ));
        }
        for (n, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !v.is_finite() || v.abs() > 2.0 {
                return bad(format!("{n} {v} must be in [-2, 2]"));
            }
        }
        Ok(())
    }
}

/// A small, fast, seedable generator (SplitMix64 seeding a xoshiro256**).
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator whose sequence depends only on `seed`.
    pub fn new(seed: u64) -> Self {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^ (x >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Draws tokens from logits according to [`SamplingParams`].
#[derive(Clone, Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
}

/// Candidate order: the larger logit first, the lower id first on ties.
fn best_first(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// The `k` best finite entries of `logits` as (id, logit) in no particular order ([`best_first`]
/// decides ties: the lower id stays), or every finite entry when `k` is 0 or covers them.
/// One pass with a buffer of `2k`: an entry joins while it beats the k-th best kept so far, and
/// a full buffer is cut back to its best `k` (no vocabulary-sized copy per token).
fn top_candidates(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let finite = logits
        .iter()
        .enumerate()
        .filter(|(_, l)| l.is_finite())
        .map(|(i, &l)| (i as u32, l));
    if k == 0 || k >= logits.len() {
        return finite.collect();
    }
    let mut cand: Vec<(u32, f32)> = Vec::with_capacity(2 * k);
    // The k-th best so far once the buffer was first cut; later ids lose ties to it.
    let mut floor = f32::NEG_INFINITY;
    for c in finite {
        if c.1 > floor {
            cand.push(c);
            if cand.len() == 2 * k {
                cand.select_nth_unstable_by(k - 1, best_first);
                cand.truncate(k);
                floor = cand[k - 1].1;
            }
        }
    }
    if cand.len() > k {
        cand.select_nth_unstable_by(k - 1, best_first);
        cand.truncate(k);
    }
    cand
}

/// Index of the largest value (the first one on ties), as greedy decoding picks. NaN never
/// wins, except that a NaN at index 0 is returned as is (no value compares above it).
pub fn argmax(logits: &[f32]) -> u32 {
    if logits.first().is_none_or(|v| v.is_nan()) {
        return 0;
    }
    // The maximum in sixteen independent lanes (the compiler vectorizes this; a single running
    // index is a chain of dependent compares, ~150 us on a 152k-entry vocabulary), then the
    // first position holding it.
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = m.max(v);
        }
    }
    let best = lanes
        .into_iter()
        .chain(rest.iter().copied())
        .fold(f32::NEG_INFINITY, f32::max);
    logits.iter().position(|&v| v == best).unwrap_or(0) as u32
}

impl Sampler {
    /// A sampler with its own seeded generator.
    pub fn new(params: SamplingParams) -> Self {
        let rng = Rng::new(params.seed);
        Sampler { params, rng }
    }

    /// The settings.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Whether the next token is always the logits' argmax: greedy, with no penalty that
    /// could move it.
    pub fn is_plain_greedy(&self) -> bool {
        self.params.temperature <= 0.0 && !self.penalizes()
    }

    /// Whether any repetition, presence or frequency penalty is set.
    fn penalizes(&self) -> bool {
        let p = &self.params;
        p.repeat_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0
    }

    /// Applies the penalties to `logits` in place given the tokens seen so far.
    pub fn apply_penalties(&self, logits: &mut [f32], history: &[u32]) {
        let p = &self.params;
        if !self.penalizes() {
            return;
        }
        let recent = &history[history.len().saturating_sub(p.repeat_last_n)..];
        let mut counts: std::collections::HashMap<u32, u32> = Default::default();
        for &id in recent {
            *counts.entry(id).or_default() += 1;
        }
        for (&id, &n) in &counts {
            let Some(l) = logits.get_mut(id as usize) else {
                continue;
            };
            if p.repeat_penalty != 1.0 {
                *l = if *l > 0.0 {
                    *l / p.repeat_penalty
                } else {
                    *l * p.repeat_penalty
                };
            }
            *l -= n as f32 * p.frequency_penalty + p.presence_penalty;
        }
    }

    /// Picks the next token from `logits` (`[vocab]`), `history` being every token so far.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let mut logits = logits.to_vec();
        self.apply_penalties(&mut logits, history);
        self.sample_penalized(&logits)
    }

    /// [`Self::sample`] for logits that already carry the penalties ([`Self::apply_penalties`]):
    /// no copy of the row.
    pub fn sample_penalized(&mut self, logits: &[f32]) -> u32 {
        match self.distribution(logits) {
            Distribution::Greedy(id) => id,
            Distribution::Weighted(cand) => self.draw(&cand),
        }
    }

    /// Decides on a drafted token `draft` with the speculative-sampling rule, the draft being a
    /// point mass (q(draft) = 1): `draft` is accepted with probability min(1, p(draft) / q(draft))
    /// = p(draft), where p is the distribution [`Self::sample`] draws from (penalties must
    /// already be in `logits`); on rejection the token comes from the residual
    /// max(0, p − q), normalized. The token returned is thus distributed exactly as
    /// [`Self::sample`]'s; greedy decoding accepts exactly when `draft` is the argmax.
    /// Returns the token and whether it is the accepted draft.
    pub fn verify_draft(&mut self, logits: &[f32], draft: u32) -> (u32, bool) {
        let cand = match self.distribution(logits) {
            Distribution::Greedy(id) => return (id, id == draft),
            Distribution::Weighted(cand) => cand,
        };
        let p_draft = cand.iter().find(|c| c.0 == draft).map_or(0.0, |c| c.1);
        if p_draft > 0.0 && self.rng.next_f64() < p_draft {
            return (draft, true);
        }
        let residual: Vec<(u32, f64)> = cand
            .into_iter()
            .map(|(id, p)| (id, if id == draft { 0.0 } else { p }))
            .collect();
        let total: f64 = residual.iter().map(|c| c.1).sum();
        if total <= 0.0 {
            // p is the point mass on `draft` up to rounding: nothing else can be drawn.
            return (draft, true);
        }
        let residual: Vec<(u32, f64)> = residual.into_iter().map(|(i, p)| (i, p / total)).collect();
        (self.draw(&residual), false)
    }

    /// The distribution the next token is drawn from, given penalized `logits`: top-k, top-p,
    /// min-p and temperature applied, candidates best first.
    fn distribution(&self, logits: &[f32]) -> Distribution {
        let p = &self.params;
        if p.temperature <= 0.0 {
            return Distribution::Greedy(argmax(logits));
        }
        // Candidates sorted by logit, best first (the lower id first on ties).
        let mut cand = top_candidates(logits, p.top_k);
        if cand.is_empty() {
            return Distribution::Greedy(argmax(logits));
        }
        cand.sort_unstable_by(best_first);
        let probs = softmax(cand.iter().map(|c| c.1));
        // top-p: the smallest prefix reaching p.
        let mut keep = cand.len();
        if p.top_p < 1.0 {
            let mut acc = 0.0;
            for (i, &pr) in probs.iter().enumerate() {
                acc += pr;
                if acc >= f64::from(p.top_p) {
                    keep = i + 1;
                    break;
                }
            }
        }
        // min-p: relative to the best token.
        if p.min_p > 0.0 {
            let floor = probs[0] * f64::from(p.min_p);
            keep = keep.min(probs.iter().take_while(|&&pr| pr >= floor).count().max(1));
        }
        cand.truncate(keep);
        let probs = softmax(cand.iter().map(|c| c.1 / p.temperature));
        Distribution::Weighted(cand.iter().map(|c| c.0).zip(probs).collect())
    }

    /// Draws one token of `cand` (probabilities summing to 1).
    fn draw(&mut self, cand: &[(u32, f64)]) -> u32 {
        let r = self.rng.next_f64();
        let mut acc = 0.0;
        for &(id, pr) in cand {
            acc += pr;
            if r < acc {
                return id;
            }
        }
        cand[cand.len() - 1].0
    }
}

/// What the next token is drawn from.
enum Distribution {
    /// Always this token (temperature 0, or no finite logit).
    Greedy(u32),
    /// Token ids and their probabilities (summing to 1), best first.
    Weighted(Vec<(u32, f64)>),
}

fn softmax(xs: impl Iterator<Item = f32> + Clone) -> Vec<f64> {
    let max = xs.clone().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f64> = xs.map(|x| f64::from(x - max).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|v| v / s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first index whose value no later value exceeds: the one-compare-per-element loop
    /// `argmax` must agree with.
    fn argmax_reference(logits: &[f32]) -> u32 {
        let mut best = 0;
        for (i, &v) in logits.iter().enumerate() {
            if v > logits[best] {
                best = i;
            }
        }
        best as u32
    }

    proptest::proptest! {
        /// The one-pass top-k keeps what sorting every finite entry (logit descending, id
        /// ascending) and taking the first k keeps.
        #[test]
        fn top_candidates_match_a_full_sort(
            picks in proptest::collection::vec(0usize..10, 0..300),
            k in 0usize..40,
        ) {
            const VALUES: [f32; 10] =
                [0.0, 1.5, -2.0, 3.25, f32::NAN, f32::NEG_INFINITY, 1.5, 7.0, -7.0, 0.5];
            let logits: Vec<f32> = picks.iter().map(|&i| VALUES[i] + (i % 3) as f32).collect();
            let mut got = top_candidates(&logits, k);
            got.sort_unstable_by(best_first);
            let mut want: Vec<(u32, f32)> = logits
                .iter()
                .enumerate()
                .filter(|(_, l)| l.is_finite())
                .map(|(i, &l)| (i as u32, l))
                .collect();
            want.sort_by(best_first);
            if k > 0 {
                want.truncate(k);
            }
            proptest::prop_assert_eq!(got, want);
        }

        #[test]
        fn argmax_matches_the_reference_loop(
            // Few distinct values (many ties), with NaN, infinities and signed zeros mixed in.
            picks in proptest::collection::vec(0usize..12, 0..80),
        ) {
            const VALUES: [f32; 12] = [
                0.0, -0.0, 1.5, -2.0, 3.25, f32::NAN, f32::INFINITY, f32::NEG_INFINITY,
                1.5, 7.0, -7.0, 0.5,
            ];
            let logits: Vec<f32> = picks.iter().map(|&i| VALUES[i]).collect();
            proptest::prop_assert_eq!(argmax(&logits), argmax_reference(&logits));
        }
    }

    #[test]
    fn greedy_is_argmax() {
        let mut s = Sampler::new(SamplingParams::greedy());
        assert_eq!(s.sample(&[0.1, 3.0, 2.9, -1.0], &[]), 1);
    }

    #[test]
    fn repeat_penalty_changes_choice() {
        let mut s = Sampler::new(SamplingParams {
            repeat_penalty: 2.0,
            ..SamplingParams::greedy()
        });
        assert_eq!(s.sample(&[0.1, 3.0, 2.0, -1.0], &[1]), 2);
    }

    #[test]
    fn top_k_one_is_greedy_and_seed_reproducible() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let mut a = Sampler::new(SamplingParams {
            top_k: 1,
            ..Default::default()
        });
        assert_eq!(a.sample(&logits, &[]), argmax(&logits));
        let params = SamplingParams {
            temperature: 1.5,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 7,
            ..Default::default()
        };
        let run = |p: &SamplingParams| {
            let mut s = Sampler::new(p.clone());
            (0..50).map(|_| s.sample(&logits, &[])).collect::<Vec<_>>()
        };
        assert_eq!(run(&params), run(&params));
        let distinct: std::collections::HashSet<_> = run(&params).into_iter().collect();
        assert!(
            distinct.len() > 3,
            "temperature sampling should vary: {distinct:?}"
        );
    }

    #[test]
    fn min_p_and_top_p_restrict_candidates() {
        // One dominant token: min_p 0.5 leaves only it.
        let logits = [10.0, 0.0, 0.0, 0.0];
        let mut s = Sampler::new(SamplingParams {
            temperature: 5.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.5,
            ..Default::default()
        });
        for _ in 0..20 {
            assert_eq!(s.sample(&logits, &[]), 0);
        }
        let mut s = Sampler::new(SamplingParams {
            temperature: 5.0,
            top_k: 0,
            top_p: 0.1,
            min_p: 0.0,
            ..Default::default()
        });
        for _ in 0..20 {
            assert_eq!(s.sample(&logits, &[]), 0);
        }
    }

    /// The speculative rule leaves the sampled distribution unchanged: tokens drawn through
    /// `verify_draft` (with the draft inside the candidates, outside them, and under greedy)
    /// are as frequent as tokens drawn through `sample`, and the draft is accepted with its
    /// probability.
    #[test]
    fn verify_draft_keeps_the_distribution() {
        let logits = [2.0f32, 1.5, 1.0, 0.2, -1.0, -3.0];
        let params = SamplingParams {
            temperature: 1.0,
            top_k: 5,
            top_p: 1.0,
            min_p: 0.0,
            seed: 9,
            ..Default::default()
        };
        let n = 200_000;
        let mut plain = Sampler::new(params.clone());
        let mut want = [0usize; 6];
        for _ in 0..n {
            want[plain.sample(&logits, &[]) as usize] += 1;
        }
        for draft in [0u32, 2, 5] {
            let mut s = Sampler::new(SamplingParams {
                seed: 10,
                ..params.clone()
            });
            let (mut got, mut hits) = ([0usize; 6], 0);
            for _ in 0..n {
                let (id, hit) = s.verify_draft(&logits, draft);
                got[id as usize] += 1;
                hits += usize::from(hit);
                assert_eq!(hit, id == draft);
            }
            for t in 0..6 {
                let (a, b) = (want[t] as f64 / n as f64, got[t] as f64 / n as f64);
                assert!(
                    (a - b).abs() < 0.006,
                    "draft {draft}, token {t}: {a} vs {b}"
                );
            }
            assert_eq!(hits, got[draft as usize]);
        }
        let mut g = Sampler::new(SamplingParams::greedy());
        assert_eq!(g.verify_draft(&logits, 0), (0, true));
        assert_eq!(g.verify_draft(&logits, 3), (0, false));
    }
}
