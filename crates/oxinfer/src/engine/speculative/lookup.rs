//! Prompt-lookup (n-gram) drafting: the tokens that followed the latest earlier occurrence of
//! the sequence's last n tokens, longest n first. Editing or quoting text the prompt holds
//! repeats long runs of it, which this guesses for free.

/// Longest n-gram matched.
pub const NGRAM_MAX: usize = 4;

/// Up to `max` tokens predicted to follow `history` (prompt and output so far): for
/// n = [`NGRAM_MAX`] down to 1, the tokens after the latest earlier occurrence of the last n
/// tokens of `history`. Empty when no n-gram recurs.
pub fn lookup_draft(history: &[u32], max: usize) -> Vec<u32> {
    let len = history.len();
    if max == 0 {
        return Vec::new();
    }
    for n in (1..=NGRAM_MAX.min(len.saturating_sub(1))).rev() {
        let tail = &history[len - n..];
        // Latest start i < len − n whose n tokens equal the tail.
        let found = (0..len - n).rev().find(|&i| &history[i..i + n] == tail);
        if let Some(i) = found {
            let from = i + n;
            return history[from..(from + max).min(len)].to_vec();
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_what_followed_the_latest_match() {
        // "1 2 3 4 5 | 9 1 2 3 4 5 6 | 1 2 3" → after "1 2 3": latest match at 6, then 4 5 6.
        let h = [1, 2, 3, 4, 5, 9, 1, 2, 3, 4, 5, 6, 1, 2, 3];
        assert_eq!(lookup_draft(&h, 3), vec![4, 5, 6]);
        assert_eq!(lookup_draft(&h, 10), vec![4, 5, 6, 1, 2, 3]);
        assert_eq!(lookup_draft(&h, 0), Vec::<u32>::new());
    }

    #[test]
    fn longest_ngram_wins_and_misses_are_empty() {
        // Last 2-gram "7 8" occurs once (at 0), the 1-gram "8" also later (at 4).
        let h = [7, 8, 1, 2, 8, 3, 7, 8];
        assert_eq!(lookup_draft(&h, 2), vec![1, 2]);
        assert_eq!(lookup_draft(&[1, 2, 3], 4), Vec::<u32>::new());
        assert_eq!(lookup_draft(&[5], 4), Vec::<u32>::new());
        assert_eq!(lookup_draft(&[], 4), Vec::<u32>::new());
    }
}
