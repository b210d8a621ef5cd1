//! Whole sequences on separate threads. The sequences of an encoder batch never look at each
//! other, so on the CPU a batch can run as groups of consecutive sequences, one group per pool
//! task, each group's products on its own thread, instead of every product split across the
//! threads. That trades about ten parallel regions per layer (whose hand-offs, spin-waits
//! included, were 15 % of `oxinfer embed`'s CPU time on 2 cores) for one region per batch;
//! each group still has hundreds of tokens, enough rows for the GEMM's tiles.

use std::ops::Range;

use crate::arch::bert::EncoderInput;
use crate::error::Result;

/// The fewest tokens a group may have (two of the packed GEMM's 96-token blocks), so that its
/// products keep their weight slices busy.
pub const MIN_GROUP_TOKENS: usize = 192;

/// Groups per thread: more than one, so that tasks claimed dynamically even out groups of
/// unequal cost (and a thread the OS delays) with little idle time at the end.
const GROUPS_PER_THREAD: usize = 4;

/// Consecutive ranges of the sequences of lengths `lens` for `threads` threads, each of at least
/// [`MIN_GROUP_TOKENS`] tokens and about the same number of tokens; `None` when the batch is too
/// small to give every thread two groups (then splitting each product pays better).
pub fn sequence_groups(lens: &[usize], threads: usize) -> Option<Vec<Range<usize>>> {
    let total: usize = lens.iter().sum();
    let want = (threads * GROUPS_PER_THREAD)
        .min(lens.len())
        .min(total / MIN_GROUP_TOKENS);
    if threads < 2 || want < 2 * threads {
        return None;
    }
    let mut groups = Vec::with_capacity(want);
    let (mut start, mut seen) = (0, 0);
    for (i, &n) in lens.iter().enumerate() {
        seen += n;
        // Cut after sequence i once the tokens so far reach the next group's share.
        if seen * want >= (groups.len() + 1) * total && groups.len() + 1 < want {
            groups.push(start..i + 1);
            start = i + 1;
        }
    }
    if start < lens.len() {
        groups.push(start..lens.len());
    }
    Some(groups)
}

/// `forward` over `batch` (whose result is `[Σ tᵢ, width]`, the rows of sequence `i` after those
/// of `0 .. i`), run on the pool as [`sequence_groups`] of `threads` when the batch is big
/// enough, else in one call; either way the rows come back in the batch's order. The first
/// group's error, if any, is returned.
pub fn forward_in_groups(
    batch: &[EncoderInput<'_>],
    threads: usize,
    forward: impl Fn(&[EncoderInput<'_>]) -> Result<Vec<f32>> + Sync,
) -> Result<Vec<f32>> {
    let lens: Vec<usize> = batch.iter().map(|s| s.ids.len()).collect();
    let Some(groups) = sequence_groups(&lens, threads) else {
        return forward(batch);
    };
    let mut outs: Vec<Result<Vec<f32>>> = groups.iter().map(|_| Ok(Vec::new())).collect();
    oxinfer_kernels::pool::for_each_mut(&mut outs, |g, out| {
        *out = forward(&batch[groups[g].clone()]);
    });
    let mut rows = Vec::new();
    for out in outs {
        rows.extend(out?);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The groups cover every sequence once, in order, each with at least the minimum of tokens
    /// (the last may hold the rest), and balance the tokens within one sequence.
    #[test]
    fn groups_cover_the_batch_in_order_and_balance_tokens() {
        let lens: Vec<usize> = (0..32).map(|i| 16 + (i * 37) % 113).collect();
        let total: usize = lens.iter().sum();
        let groups = sequence_groups(&lens, 2).expect("a 32-sequence batch splits");
        assert_eq!(groups.len(), 8);
        assert_eq!(groups[0].start, 0);
        assert_eq!(groups.last().unwrap().end, lens.len());
        for w in groups.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        let longest = *lens.iter().max().unwrap();
        for g in &groups {
            let tokens: usize = lens[g.clone()].iter().sum();
            assert!(tokens >= MIN_GROUP_TOKENS, "{g:?}: {tokens} tokens");
            assert!(
                tokens.abs_diff(total / 8) <= longest,
                "{g:?}: {tokens} tokens"
            );
        }
    }

    /// One thread, few sequences or few tokens: no split (each product is split instead).
    #[test]
    fn small_batches_do_not_split() {
        assert_eq!(sequence_groups(&[100; 32], 1), None);
        assert_eq!(sequence_groups(&[100; 3], 2), None);
        assert_eq!(sequence_groups(&[20; 32], 2), None);
        assert!(sequence_groups(&[200; 4], 2).is_some());
    }

    /// The split run returns the rows of the one-call run, in order, and the first error.
    #[test]
    fn split_forward_keeps_the_rows_in_order() {
        let ids: Vec<Vec<u32>> = (0..20u32).map(|s| (0..60 + s).collect()).collect();
        let batch: Vec<EncoderInput<'_>> = ids
            .iter()
            .map(|v| EncoderInput {
                ids: v,
                type_ids: &[],
            })
            .collect();
        let rows = |b: &[EncoderInput<'_>]| -> Result<Vec<f32>> {
            Ok(b.iter()
                .flat_map(|s| {
                    s.ids
                        .iter()
                        .map(|&i| (s.ids.len() * 1000) as f32 + i as f32)
                })
                .collect())
        };
        assert_eq!(
            forward_in_groups(&batch, 2, rows).unwrap(),
            rows(&batch).unwrap()
        );
        let failing = |b: &[EncoderInput<'_>]| -> Result<Vec<f32>> {
            match b.iter().position(|s| s.ids.len() >= 70) {
                Some(_) => Err(crate::error::Error::Request(format!("{}", b[0].ids.len()))),
                None => rows(b),
            }
        };
        let lens: Vec<usize> = ids.iter().map(Vec::len).collect();
        let first_bad = sequence_groups(&lens, 2)
            .unwrap()
            .into_iter()
            .find(|g| lens[g.clone()].iter().any(|&n| n >= 70))
            .unwrap();
        let err = forward_in_groups(&batch, 2, failing)
            .unwrap_err()
            .to_string();
        assert!(err.ends_with(&lens[first_bad.start].to_string()), "{err}");
    }
}
