//! Attention without the causal mask (encoders, vision towers, diffusion, bidirectional
//! embedders): every query of a sequence sees every key of it (or those within a two-sided
//! window), over a batch of sequences concatenated without padding. On the CPU with the
//! packed f32 GEMM: each (sequence, kv head)'s keys and values are packed once, then one pool
//! task per (sequence, query head, block of [`FULL_Q_BLOCK`] queries) computes its
//! `[block, n_k]` scores, their softmax and its share of the output, both products on the GEMM;
//! under `OXINFER_KERNELS=scalar` / `OXINFER_PACKED=0` one head at a time on the row kernels.
//! Without a window or soft-cap, on AVX-512, one fused kernel runs instead
//! ([`full_f32::attention_full_f32`]; `OXINFER_FUSED_ATTENTION=0` turns it off). The backends'
//! attention op is causal only.

use oxinfer_kernels::attention::full_f32::{self, FullSeq, FullShape};
use oxinfer_kernels::attention::AttnShape;
use oxinfer_kernels::packed::float::{float_packing_pays, matmul_float_packed, PackedFloatMatrix};
use oxinfer_kernels::{WeightFormat, WeightMatrix};

/// Attention without the causal mask over one sequence: each of the `n_q` queries sees every
/// key. `q` is `[n_q, n_heads * head_dim]`; `k` and `v` are `[n_k, n_kv_heads * head_dim]` with
/// any `n_k` (cross-attention: image tokens over text tokens); returns `[n_q, n_heads *
/// head_dim]`, each head `softmax(q kᵀ · scale) v` with `p.softcap` applied to the scores.
/// `p.window`, when set (self-attention, `n_q == n_k`), keeps keys with `|i - j| < window` on
/// both sides.
///
/// # Panics
/// `q`, `k` or `v` not whole rows of their widths, `k` and `v` of other lengths, or a window with
/// `n_q != n_k`.
pub fn attention_full(q: &[f32], k: &[f32], v: &[f32], n_q: usize, p: &AttnShape) -> Vec<f32> {
    let kv_row = p.n_kv_heads * p.head_dim;
    assert!(
        kv_row > 0 && k.len().is_multiple_of(kv_row),
        "k is not [n_k, n_kv_heads * head_dim]"
    );
    attention_full_seqs(q, k, v, &[(n_q, k.len() / kv_row)], p)
}

/// [`attention_full`] over a batch of sequences: sequence `i` has `seqs[i] = (n_q, n_k)`
/// queries and keys, its rows of `q` (`[Σ n_q, n_heads * head_dim]`) and of `k`, `v`
/// (`[Σ n_k, n_kv_heads * head_dim]`) after those of the sequences before it, and attends only
/// to its own keys. Returns `[Σ n_q, n_heads * head_dim]`. All sequences' tasks share one pool
/// run (a batch of short sentences, or of images, keeps both cores busy).
///
/// # Panics
/// `q`, `k` or `v` not the rows `seqs` counts, `k` and `v` of other lengths, or a window over a
/// sequence with `n_q != n_k`.
pub fn attention_full_seqs(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    seqs: &[(usize, usize)],
    p: &AttnShape,
) -> Vec<f32> {
    let d = p.head_dim;
    let (q_row, kv_row) = (p.n_heads * d, p.n_kv_heads * d);
    let (total_q, total_k) = seqs
        .iter()
        .fold((0, 0), |(a, b), &(nq, nk)| (a + nq, b + nk));
    assert!(
        kv_row > 0 && q.len() == total_q * q_row && k.len() == total_k * kv_row,
        "q is not [{total_q}, n_heads * head_dim] or k not [{total_k}, n_kv_heads * head_dim]"
    );
    assert_eq!(k.len(), v.len(), "k and v have other lengths");
    assert!(
        p.window.is_none() || seqs.iter().all(|&(nq, nk)| nq == nk),
        "a window needs n_q == n_k"
    );
    let mut out = vec![0f32; total_q * q_row];
    let mut at = Vec::with_capacity(seqs.len());
    let (mut r_q, mut r_k) = (0, 0);
    for &(n_q, n_k) in seqs {
        at.push(SeqAt { r_q, r_k, n_q, n_k });
        r_q += n_q;
        r_k += n_k;
    }
    at.retain(|s| s.n_q > 0 && s.n_k > 0);
    if p.window.is_none() && p.softcap.is_none() && fused(q, k, v, &at, p, &mut out) {
        return out;
    }
    if float_packing_pays(WeightFormat::F32) {
        full_packed(q, k, v, &at, p, &mut out);
    } else {
        for s in &at {
            let (qs, ks) = (
                s.r_q * q_row..(s.r_q + s.n_q) * q_row,
                s.r_k * kv_row..(s.r_k + s.n_k) * kv_row,
            );
            full_rows(
                &q[qs.clone()],
                &k[ks.clone()],
                &v[ks],
                s.n_q,
                s.n_k,
                p,
                &mut out[qs],
            );
        }
    }
    out
}

/// Where one sequence of [`attention_full_seqs`] lies: its first query row and first key row,
/// and its query and key counts (both > 0).
#[derive(Clone, Copy)]
struct SeqAt {
    r_q: usize,
    r_k: usize,
    n_q: usize,
    n_k: usize,
}

/// [`attention_full_seqs`] on the fused kernel ([`full_f32::attention_full_f32`]: scores, online
/// softmax and `P·V` per block of 32 queries, no score matrix written out; AVX-512 only);
/// `false`, `out` untouched, where it does not run.
fn fused(q: &[f32], k: &[f32], v: &[f32], seqs: &[SeqAt], p: &AttnShape, out: &mut [f32]) -> bool {
    let seqs: Vec<FullSeq> = seqs
        .iter()
        .map(|s| FullSeq {
            q_row: s.r_q,
            n_q: s.n_q,
            k_row: s.r_k,
            n_k: s.n_k,
        })
        .collect();
    let shape = FullShape {
        n_heads: p.n_heads,
        n_kv_heads: p.n_kv_heads,
        head_dim: p.head_dim,
        scale: p.scale,
    };
    full_f32::attention_full_f32(q, k, v, &seqs, &shape, out)
}

/// Queries per task of [`attention_full`] on the packed GEMM: enough rows for the GEMM's
/// register tiles, and a `[block, n_k]` score buffer that stays in L2 (256 KiB at 1,024 keys).
pub const FULL_Q_BLOCK: usize = 64;

thread_local! {
    /// A thread's `[block, n_k]` score buffer for [`full_packed`], kept between tasks and calls
    /// (at most [`FULL_Q_BLOCK`] rows of the longest key count seen: 1 MiB at 4,096 keys). The
    /// GEMM writes every value before the softmax reads it, so it is never cleared.
    static SCORES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`attention_full_seqs`] on the packed f32 GEMM (checks done, `out` zeroed, empty sequences
/// left out).
fn full_packed(q: &[f32], k: &[f32], v: &[f32], seqs: &[SeqAt], p: &AttnShape, out: &mut [f32]) {
    let d = p.head_dim;
    let (q_row, kv_row) = (p.n_heads * d, p.n_kv_heads * d);
    let group = p.n_heads / p.n_kv_heads;
    // Each (sequence, kv head)'s keys `[n_k, d]` and values as `Vᵀ` `[d, n_k]`, packed once for
    // all of its query heads and blocks.
    let mut kv: Vec<Option<(PackedFloatMatrix, PackedFloatMatrix)>> =
        (0..seqs.len() * p.n_kv_heads).map(|_| None).collect();
    oxinfer_kernels::pool::for_each_mut(&mut kv, |task, slot| {
        let (s, h) = (&seqs[task / p.n_kv_heads], task % p.n_kv_heads);
        let cols = h * d..(h + 1) * d;
        let key = |r: usize| &k[(s.r_k + r) * kv_row..][cols.clone()];
        let value = |r: usize| &v[(s.r_k + r) * kv_row..][cols.clone()];
        *slot = Some((
            PackedFloatMatrix::from_rows(s.n_k, d, key),
            PackedFloatMatrix::from_columns(d, s.n_k, value),
        ));
    });
    // One task per (sequence, query head, block of queries).
    let tasks: Vec<(usize, usize, usize)> = seqs
        .iter()
        .enumerate()
        .flat_map(|(i, s)| {
            let blocks = s.n_q.div_ceil(FULL_Q_BLOCK);
            (0..p.n_heads).flat_map(move |h| (0..blocks).map(move |b| (i, h, b)))
        })
        .collect();
    let mut parts: Vec<Vec<f32>> = vec![Vec::new(); tasks.len()];
    oxinfer_kernels::pool::for_each_mut(&mut parts, |task, o| {
        let (i, h, b) = tasks[task];
        let s = &seqs[i];
        let rows = b * FULL_Q_BLOCK..((b + 1) * FULL_Q_BLOCK).min(s.n_q);
        let nb = rows.len();
        let Some((km, vm)) = &kv[i * p.n_kv_heads + h / group] else {
            unreachable!("every kv head was packed above")
        };
        let qh: Vec<f32> = rows
            .clone()
            .flat_map(|r| &q[(s.r_q + r) * q_row + h * d..][..d])
            .copied()
            .collect();
        o.resize(nb * d, 0.0);
        SCORES.with_borrow_mut(|buf| {
            if buf.len() < nb * s.n_k {
                buf.resize(nb * s.n_k, 0.0);
            }
            let scores = &mut buf[..nb * s.n_k];
            matmul_float_packed(km, &qh, nb, scores);
            for (r, row) in scores.chunks_exact_mut(s.n_k).enumerate() {
                softmax_row(row, rows.start + r, p);
            }
            matmul_float_packed(vm, scores, nb, o);
        });
    });
    for (&(i, h, b), o) in tasks.iter().zip(&parts) {
        for (r, src) in o.chunks_exact(d).enumerate() {
            let row = seqs[i].r_q + b * FULL_Q_BLOCK + r;
            out[row * q_row + h * d..][..d].copy_from_slice(src);
        }
    }
}

/// [`attention_full`] on the row kernels, one head at a time (checks done, `out` zeroed): the
/// head's keys as `[n_k, d]` f32 bytes, its values transposed to `[d, n_k]`, so both products
/// are the kernels' `x · Wᵀ`.
fn full_rows(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    n_q: usize,
    n_k: usize,
    p: &AttnShape,
    out: &mut [f32],
) {
    let d = p.head_dim;
    let (q_row, kv_row) = (p.n_heads * d, p.n_kv_heads * d);
    let group = p.n_heads / p.n_kv_heads;
    let (mut kh, mut vt) = (Vec::new(), Vec::new());
    let mut qh = vec![0f32; n_q * d];
    let mut scores = vec![0f32; n_q * n_k];
    let mut oh = vec![0f32; n_q * d];
    for h in 0..p.n_heads {
        let kvh = h / group;
        for (dst, row) in qh.chunks_exact_mut(d).zip(q.chunks_exact(q_row)) {
            dst.copy_from_slice(&row[h * d..(h + 1) * d]);
        }
        let key = |r: usize| &k[r * kv_row + kvh * d..r * kv_row + (kvh + 1) * d];
        let value = |r: usize| &v[r * kv_row + kvh * d..r * kv_row + (kvh + 1) * d];
        kh.clear();
        kh.extend((0..n_k).flat_map(|r| key(r).iter().flat_map(|x| x.to_le_bytes())));
        let km = WeightMatrix::new(WeightFormat::F32, &kh, n_k, d).expect("K matrix");
        oxinfer_kernels::matmul(&km, &qh, n_q, &mut scores);
        softmax_rows(&mut scores, n_k, p);
        vt.clear();
        vt.extend((0..d).flat_map(|e| (0..n_k).flat_map(move |r| value(r)[e].to_le_bytes())));
        let vm = WeightMatrix::new(WeightFormat::F32, &vt, d, n_k).expect("Vᵀ matrix");
        oxinfer_kernels::matmul(&vm, &scores, n_q, &mut oh);
        for (dst, src) in out.chunks_exact_mut(q_row).zip(oh.chunks_exact(d)) {
            dst[h * d..(h + 1) * d].copy_from_slice(src);
        }
    }
}

/// Scales the score rows (`[n_q, n_k]`, query `i` in row `i`) by `p.scale`, soft-caps them,
/// and turns each into softmax probabilities over the keys its window lets it see (the
/// others 0); parts of rows in parallel on the pool (a diffusion UNet's self-attention has
/// 4096 rows of 4096 scores per head).
fn softmax_rows(scores: &mut [f32], n_k: usize, p: &AttnShape) {
    const ROWS_PER_PART: usize = 16;
    let mut parts: Vec<&mut [f32]> = scores.chunks_mut(ROWS_PER_PART * n_k.max(1)).collect();
    oxinfer_kernels::pool::for_each_mut(&mut parts, |part_index, part| {
        for (r, row) in part.chunks_exact_mut(n_k).enumerate() {
            softmax_row(row, part_index * ROWS_PER_PART + r, p);
        }
    });
}

/// [`softmax_rows`] for query `i`'s row.
fn softmax_row(row: &mut [f32], i: usize, p: &AttnShape) {
    let n_k = row.len();
    let (first, last) = match p.window {
        Some(w) => ((i + 1).saturating_sub(w), (i + w).min(n_k)),
        None => (0, n_k),
    };
    if p.softcap.is_none() {
        // The shared SIMD softmax over the keys the window lets the query see.
        oxinfer_kernels::softmax::softmax_scaled(&mut row[first..last], p.scale);
        row[..first].fill(0.0);
        row[last..].fill(0.0);
        return;
    }
    for s in row.iter_mut() {
        *s *= p.scale;
        if let Some(cap) = p.softcap {
            *s = cap * (*s / cap).tanh();
        }
    }
    let max = row[first..last]
        .iter()
        .fold(f32::NEG_INFINITY, |m, &s| m.max(s));
    let mut sum = 0f64;
    for (j, s) in row.iter_mut().enumerate() {
        *s = if (first..last).contains(&j) {
            (*s - max).exp()
        } else {
            0.0
        };
        sum += f64::from(*s);
    }
    let inv = (1.0 / sum) as f32;
    row.iter_mut().for_each(|s| *s *= inv);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without the causal mask the first query averages both values too.
    #[test]
    fn bidirectional_sees_later_keys() {
        let p = AttnShape {
            n_heads: 1,
            n_kv_heads: 1,
            head_dim: 1,
            scale: 1.0,
            window: None,
            softcap: None,
        };
        let out = attention_full(&[0.0, 0.0], &[0.0, 0.0], &[2.0, 4.0], 2, &p);
        assert_eq!(out, vec![3.0, 3.0]);
    }

    /// Against the formula written out: two query heads sharing one key/value head, three
    /// queries over five keys, soft-capped scores.
    #[test]
    fn full_attention_matches_naive() {
        check_full_against_naive(3, 5, 2, 1, 4, Some(1.5));
    }

    /// The same over several query blocks of the packed path (a partial last one), two kv
    /// heads of two query heads each, without a soft cap (the SIMD softmax).
    #[test]
    fn full_attention_blocks_match_naive() {
        check_full_against_naive(2 * FULL_Q_BLOCK + 21, 70, 4, 2, 8, None);
        check_full_against_naive(FULL_Q_BLOCK, 1, 3, 3, 5, None);
    }

    /// [`attention_full`] against the formula in f64.
    fn check_full_against_naive(
        n_q: usize,
        n_k: usize,
        heads: usize,
        kv_heads: usize,
        d: usize,
        softcap: Option<f32>,
    ) {
        let p = AttnShape {
            n_heads: heads,
            n_kv_heads: kv_heads,
            head_dim: d,
            scale: 0.5,
            window: None,
            softcap,
        };
        let f = |i: usize| ((i * 37 % 11) as f32 - 5.0) / 7.0;
        let kv_w = kv_heads * d;
        let q: Vec<f32> = (0..n_q * heads * d).map(f).collect();
        let k: Vec<f32> = (0..n_k * kv_w).map(|i| f(i + 3)).collect();
        let v: Vec<f32> = (0..n_k * kv_w).map(|i| f(i * 3 + 7)).collect();
        let got = attention_full(&q, &k, &v, n_q, &p);
        let w = heads * d;
        for i in 0..n_q {
            for h in 0..heads {
                let kvh = h / (heads / kv_heads);
                let s: Vec<f64> = (0..n_k)
                    .map(|j| {
                        let dot = (0..d)
                            .map(|e| {
                                f64::from(q[i * w + h * d + e])
                                    * f64::from(k[j * kv_w + kvh * d + e])
                            })
                            .sum::<f64>();
                        match softcap {
                            Some(c) => f64::from(c) * (dot * 0.5 / f64::from(c)).tanh(),
                            None => dot * 0.5,
                        }
                    })
                    .collect();
                let z: f64 = s.iter().map(|v| v.exp()).sum();
                for e in 0..d {
                    let want: f64 = (0..n_k)
                        .map(|j| s[j].exp() / z * f64::from(v[j * kv_w + kvh * d + e]))
                        .sum();
                    let got = f64::from(got[i * w + h * d + e]);
                    assert!((got - want).abs() < 1e-5, "query {i} head {h} feature {e}");
                }
            }
        }
    }

    /// A window keeps each query to its neighbours on both sides.
    #[test]
    fn full_attention_window_is_two_sided() {
        let p = AttnShape {
            n_heads: 1,
            n_kv_heads: 1,
            head_dim: 1,
            scale: 1.0,
            window: Some(2),
            softcap: None,
        };
        let v = [1.0, 2.0, 4.0, 8.0];
        let out = attention_full(&[0.0; 4], &[0.0; 4], &v, 4, &p);
        for (got, want) in out.iter().zip([1.5, 7.0 / 3.0, 14.0 / 3.0, 6.0]) {
            assert!((got - want).abs() < 1e-6, "{out:?}");
        }
    }

    /// A batch of sequences attends like each sequence alone (a window on every sequence, and
    /// sequences of other lengths, one empty).
    #[test]
    fn batched_sequences_match_one_at_a_time() {
        let f = |i: usize| ((i * 29 % 13) as f32 - 6.0) / 5.0;
        for window in [None, Some(3)] {
            let p = AttnShape {
                n_heads: 4,
                n_kv_heads: 2,
                head_dim: 8,
                scale: 0.35,
                window,
                softcap: None,
            };
            let lens = [5usize, 0, FULL_Q_BLOCK + 9, 1];
            let (q_row, kv_row) = (32, 16);
            let total: usize = lens.iter().sum();
            let q: Vec<f32> = (0..total * q_row).map(f).collect();
            let k: Vec<f32> = (0..total * kv_row).map(|i| f(i + 5)).collect();
            let v: Vec<f32> = (0..total * kv_row).map(|i| f(2 * i + 1)).collect();
            let seqs: Vec<(usize, usize)> = lens.iter().map(|&n| (n, n)).collect();
            let got = attention_full_seqs(&q, &k, &v, &seqs, &p);
            let mut r = 0;
            for &n in &lens {
                let one = attention_full(
                    &q[r * q_row..(r + n) * q_row],
                    &k[r * kv_row..(r + n) * kv_row],
                    &v[r * kv_row..(r + n) * kv_row],
                    n,
                    &p,
                );
                assert_eq!(
                    &got[r * q_row..(r + n) * q_row],
                    &one[..],
                    "window {window:?}"
                );
                r += n;
            }
        }
    }
}
