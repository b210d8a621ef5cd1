//! Attention without a mask over f32 queries, keys and values on AVX-512, fused: scores,
//! an online softmax and `P·V` for a block of [`Q_BLOCK`] queries, key block by key block, so
//! no `[n_q, n_k]` score matrix is ever written out (a diffusion UNet's self-attention at
//! 512 × 512 has 4,096 × 4,096 scores per head).
//!
//! The block's queries lie along the vector lanes (two 16-lane vectors): the queries are
//! transposed once per block to `[head_dim][32]`, a score tile is 12 keys × 32 queries
//! (each key's value broadcast against the two query vectors, as the packed GEMM's tile), and
//! the softmax's running max, sum and rescaling are lane-wise, with no horizontal reduction.
//! The output is accumulated transposed too, `[head_dim][32]`, by tiles of up to 12 value
//! features × 32 queries over the key block's probabilities. Short heads (SD's 40-wide ones)
//! so run both products at the tile's full width, where the packed GEMM's score product had a
//! 40-long k loop and its `P·V` 40 output rows (two and a half panels).
//!
//! Results agree with a plain softmax to f32 rounding: the sums run in another order (key
//! blocks of [`K_BLOCK`], the sum of the probabilities in f32 per lane).

use crate::pool::parallel_for;

/// Queries per block (two 16-lane vectors).
pub const Q_BLOCK: usize = 32;

/// Keys per block of the online softmax (its `[K_BLOCK][32]` probabilities stay in L1: 16 KiB).
pub const K_BLOCK: usize = 128;

/// One sequence of [`attention_full_f32`]: its first query row and query count, its first key
/// row and key count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FullSeq {
    /// First query row (of `q` and `out`).
    pub q_row: usize,
    /// Query rows.
    pub n_q: usize,
    /// First key row (of `k` and `v`).
    pub k_row: usize,
    /// Key rows.
    pub n_k: usize,
}

/// Heads of [`attention_full_f32`]: `n_heads` query heads over `n_kv_heads` key/value heads
/// (grouped), each `head_dim` wide, scores scaled by `scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FullShape {
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (dividing `n_heads`).
    pub n_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Factor on every score before the softmax (`1 / sqrt(head_dim)` as a rule).
    pub scale: f32,
}

/// The variable that turns [`attention_full_f32`] off (`0`; read once): callers then run
/// their unfused path (an A/B switch).
pub const FUSED_VAR: &str = "OXINFER_FUSED_ATTENTION";

/// Whether [`attention_full_f32`] runs on this CPU: AVX-512 detected (and not switched off
/// with `OXINFER_VNNI=0`), the kernel set `auto`, packing not switched off (`OXINFER_PACKED=0`),
/// nor the kernel itself ([`FUSED_VAR`]`=0`).
pub fn available() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *OFF.get_or_init(|| std::env::var(FUSED_VAR).is_ok_and(|v| v.trim() == "0")) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        crate::dispatch::detected_isa().has_vnni()
            && crate::dispatch::packing_enabled()
            && crate::dispatch::kernel_set() == crate::dispatch::KernelSet::Auto
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `out = softmax(q kᵀ · scale) v` per (sequence, query head), every query seeing every key of
/// its sequence. `q` and `out` are `[rows, n_heads * head_dim]`, `k` and `v` `[rows, n_kv_heads
/// * head_dim]`; sequence `s` uses query rows `s.q_row .. s.q_row + s.n_q` and key rows
/// `s.k_row .. s.k_row + s.n_k`, and writes only its query rows of `out`. One pool task per
/// (sequence, head, block of [`Q_BLOCK`] queries). Returns `false`, writing nothing, where
/// [`available`] is false.
///
/// # Panics
/// A sequence outside its buffers, `out` not as long as `q`, `n_heads` not a multiple of
/// `n_kv_heads`, or a head width of 0.
pub fn attention_full_f32(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    seqs: &[FullSeq],
    p: &FullShape,
    out: &mut [f32],
) -> bool {
    if !available() {
        return false;
    }
    let d = p.head_dim;
    assert!(d > 0 && p.n_kv_heads > 0, "empty heads");
    assert!(
        p.n_heads.is_multiple_of(p.n_kv_heads),
        "query heads not a multiple of kv heads"
    );
    let (q_w, kv_w) = (p.n_heads * d, p.n_kv_heads * d);
    assert_eq!(out.len(), q.len(), "out is not as long as q");
    assert_eq!(k.len(), v.len(), "k and v have other lengths");
    for s in seqs {
        assert!(
            (s.q_row + s.n_q) * q_w <= q.len() && (s.k_row + s.n_k) * kv_w <= k.len(),
            "a sequence outside q or k"
        );
    }
    let tasks: Vec<(usize, usize, usize)> = seqs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.n_q > 0 && s.n_k > 0)
        .flat_map(|(i, s)| {
            let blocks = s.n_q.div_ceil(Q_BLOCK);
            (0..p.n_heads).flat_map(move |h| (0..blocks).map(move |b| (i, h, b)))
        })
        .collect();
    let group = p.n_heads / p.n_kv_heads;
    let dst = crate::fast::SyncPtr(out.as_mut_ptr());
    parallel_for(tasks.len(), &|t| {
        let (i, h, b) = tasks[t];
        let s = seqs[i];
        let r0 = b * Q_BLOCK;
        let nq = Q_BLOCK.min(s.n_q - r0);
        let qh = &q[(s.q_row + r0) * q_w + h * d..];
        let kv_off = s.k_row * kv_w + (h / group) * d;
        let (kh, vh) = (&k[kv_off..], &v[kv_off..]);
        let mut o = vec![0f32; nq * d];
        run_block(qh, q_w, nq, (kh, vh), kv_w, s.n_k, d, p.scale, &mut o);
        for (r, src) in o.chunks_exact(d).enumerate() {
            // SAFETY: row s.q_row + r0 + r < q's rows = out's rows, columns h·d .. h·d + d of
            // it: inside out, and written by this task alone (one task per (row, head)); out
            // outlives parallel_for.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.as_ptr(),
                    dst.get().add((s.q_row + r0 + r) * q_w + h * d),
                    d,
                );
            }
        }
    });
    true
}

/// One task's block of `nq` queries on the CPU's kernel (the caller checked [`available`] and
/// that `q` holds `nq` rows of `d` floats `ldq` apart, `k` and `v` `n_k` rows `ldkv` apart, `o`
/// `nq · d` floats).
#[allow(clippy::too_many_arguments)]
fn run_block(
    q: &[f32],
    ldq: usize,
    nq: usize,
    kv: (&[f32], &[f32]),
    ldkv: usize,
    n_k: usize,
    d: usize,
    scale: f32,
    o: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `available` (checked by the only caller) means AVX-512 F; the bounds are this
    // function's contract, checked by the caller's sequence checks.
    unsafe {
        avx512::block(q, ldq, nq, kv, ldkv, n_k, d, scale, o);
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (q, ldq, nq, kv, ldkv, n_k, d, scale, o);
        unreachable!("attention_full_f32 runs on x86_64 only (available)");
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{K_BLOCK, Q_BLOCK};
    use crate::softmax::avx512::exp16;
    use std::arch::x86_64::*;

    /// Keys per score tile (12 keys × 2 query vectors: 24 accumulators).
    const TK: usize = 12;

    /// Calls `$kern::<N>` with `$args` for `$n` in 1 ..= 12.
    macro_rules! by_count {
        ($kern:ident, $n:expr, $args:tt) => {
            match $n {
                1 => $kern::<1> $args,
                2 => $kern::<2> $args,
                3 => $kern::<3> $args,
                4 => $kern::<4> $args,
                5 => $kern::<5> $args,
                6 => $kern::<6> $args,
                7 => $kern::<7> $args,
                8 => $kern::<8> $args,
                9 => $kern::<9> $args,
                10 => $kern::<10> $args,
                11 => $kern::<11> $args,
                12 => $kern::<12> $args,
                n => unreachable!("a tile of {n}"),
            }
        };
    }

    /// One block of `nq <= 32` queries of one head: `o[i][e]` for query `i` (`q[i * ldq ..][..d]`)
    /// over the `n_k` keys and values `k[j * ldkv ..][..d]`, `v[j * ldkv ..][..d]`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F; `q` holds `(nq - 1) * ldq + d` floats, `k` and `v` `(n_k - 1) *
    /// ldkv + d` each, `o` `nq * d`; `1 <= nq <= 32`, `n_k >= 1`, `d >= 1`.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn block(
        q: &[f32],
        ldq: usize,
        nq: usize,
        (k, v): (&[f32], &[f32]),
        ldkv: usize,
        n_k: usize,
        d: usize,
        scale: f32,
        o: &mut [f32],
    ) {
        debug_assert!((1..=Q_BLOCK).contains(&nq) && n_k >= 1 && d >= 1);
        debug_assert!(q.len() >= (nq - 1) * ldq + d && o.len() >= nq * d);
        debug_assert!(k.len() >= (n_k - 1) * ldkv + d && v.len() >= (n_k - 1) * ldkv + d);
        // The queries transposed, [d][32] (absent queries 0), the running output [d][32] and
        // the key block's scores / probabilities [K_BLOCK][32].
        let mut qt = vec![0f32; d * Q_BLOCK];
        for i in 0..nq {
            for (e, &x) in q[i * ldq..i * ldq + d].iter().enumerate() {
                qt[e * Q_BLOCK + i] = x;
            }
        }
        let mut acc = vec![0f32; d * Q_BLOCK];
        let mut s = vec![0f32; K_BLOCK * Q_BLOCK];
        // The value features in tiles of at most 12, as even as can be (40 = 4 × 10).
        let tiles = d.div_ceil(TK);
        let (base, extra) = (d / tiles, d % tiles);
        let vscale = _mm512_set1_ps(scale);
        let mut m = [_mm512_set1_ps(f32::MIN); 2];
        let mut l = [_mm512_setzero_ps(); 2];
        let mut jb = 0;
        while jb < n_k {
            let nb = K_BLOCK.min(n_k - jb);
            // Scores of the key block, and their max per query.
            let mut bm = [_mm512_set1_ps(f32::MIN); 2];
            let mut j0 = 0;
            while j0 < nb {
                let n = TK.min(nb - j0);
                // SAFETY: keys jb + j0 .. jb + j0 + n < n_k (rows of k), s has room for
                // K_BLOCK rows of 32, qt d rows of 32.
                unsafe {
                    let kp = k.as_ptr().add((jb + j0) * ldkv);
                    let sp = s.as_mut_ptr().add(j0 * Q_BLOCK);
                    by_count!(score_tile, n, (kp, ldkv, qt.as_ptr(), d, sp, &mut bm));
                }
                j0 += n;
            }
            // Online softmax: the new max, the factor for what was summed before, the
            // probabilities in place and their sum.
            let mn = [_mm512_max_ps(m[0], bm[0]), _mm512_max_ps(m[1], bm[1])];
            let alpha = [
                exp16(_mm512_mul_ps(_mm512_sub_ps(m[0], mn[0]), vscale)),
                exp16(_mm512_mul_ps(_mm512_sub_ps(m[1], mn[1]), vscale)),
            ];
            m = mn;
            let msc = [_mm512_mul_ps(mn[0], vscale), _mm512_mul_ps(mn[1], vscale)];
            let mut sum = [_mm512_setzero_ps(); 4];
            for j in 0..nb {
                for h in 0..2 {
                    // SAFETY: j < nb <= K_BLOCK, so the 16 floats at j·32 + 16h lie in s.
                    unsafe {
                        let sp = s.as_mut_ptr().add(j * Q_BLOCK + 16 * h);
                        let pv = exp16(_mm512_fmsub_ps(_mm512_loadu_ps(sp), vscale, msc[h]));
                        _mm512_storeu_ps(sp, pv);
                        let a = &mut sum[2 * (j & 1) + h];
                        *a = _mm512_add_ps(*a, pv);
                    }
                }
            }
            for h in 0..2 {
                let bs = _mm512_add_ps(sum[h], sum[2 + h]);
                l[h] = _mm512_fmadd_ps(l[h], alpha[h], bs);
            }
            // acc = acc · alpha + Vᵀ P over the block, value features in tiles.
            let mut e0 = 0;
            for t in 0..tiles {
                let n = base + usize::from(t < extra);
                // SAFETY: features e0 .. e0 + n <= d of keys jb .. jb + nb < n_k lie in v;
                // acc holds d rows of 32, s nb rows of 32.
                unsafe {
                    let vp = v.as_ptr().add(jb * ldkv + e0);
                    let ap = acc.as_mut_ptr().add(e0 * Q_BLOCK);
                    by_count!(pv_tile, n, (vp, ldkv, s.as_ptr(), nb, ap, alpha));
                }
                e0 += n;
            }
            jb += nb;
        }
        // o[i][e] = acc[e][i] / l[i].
        let mut inv = [0f32; Q_BLOCK];
        // SAFETY: inv holds 32 floats.
        unsafe {
            let one = _mm512_set1_ps(1.0);
            _mm512_storeu_ps(inv.as_mut_ptr(), _mm512_div_ps(one, l[0]));
            _mm512_storeu_ps(inv.as_mut_ptr().add(16), _mm512_div_ps(one, l[1]));
        }
        for (e, row) in acc.chunks_exact(Q_BLOCK).enumerate() {
            for i in 0..nq {
                o[i * d + e] = row[i] * inv[i];
            }
        }
    }

    /// `a[i] += Σ_{x < n} b[x · sx + i · si] · r[x][..32]` for `i < M`, `a0` / `a1` holding
    /// the low / high 16 of each `a[i]`, the rows of `r` 32 floats apart: the multiply-adds of
    /// both tiles (scores: `b` the keys, `r` the transposed queries; `P·V`: `b` the values, `r`
    /// the probabilities).
    ///
    /// # Safety
    /// The CPU has AVX-512 F; `b` is readable at every `x · sx + i · si`, `r` for `n * 32`
    /// floats.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn rank1_updates<const M: usize>(
        a0: &mut [__m512; M],
        a1: &mut [__m512; M],
        b: *const f32,
        sx: usize,
        si: usize,
        r: *const f32,
        n: usize,
    ) {
        // SAFETY: x < n and i < M stay inside the contract's reads.
        unsafe {
            for x in 0..n {
                let r0 = _mm512_loadu_ps(r.add(x * Q_BLOCK));
                let r1 = _mm512_loadu_ps(r.add(x * Q_BLOCK + 16));
                for i in 0..M {
                    let bv = _mm512_set1_ps(*b.add(x * sx + i * si));
                    a0[i] = _mm512_fmadd_ps(bv, r0, a0[i]);
                    a1[i] = _mm512_fmadd_ps(bv, r1, a1[i]);
                }
            }
        }
    }

    /// Scores of `MR` keys × 32 queries: `s[i][..32] = Σ_e k[i * ldk + e] · qt[e][..32]`, and
    /// `bm` raised to their max per query.
    ///
    /// # Safety
    /// The CPU has AVX-512 F; `k` holds `MR` rows of `d` floats `ldk` apart, `qt` `d * 32`
    /// floats, `s` `MR * 32`.
    #[target_feature(enable = "avx512f")]
    unsafe fn score_tile<const MR: usize>(
        k: *const f32,
        ldk: usize,
        qt: *const f32,
        d: usize,
        s: *mut f32,
        bm: &mut [__m512; 2],
    ) {
        // SAFETY: the contract's rows are those rank1_updates reads (e < d, i < MR).
        unsafe {
            let mut a0 = [_mm512_setzero_ps(); MR];
            let mut a1 = [_mm512_setzero_ps(); MR];
            rank1_updates(&mut a0, &mut a1, k, 1, ldk, qt, d);
            for i in 0..MR {
                _mm512_storeu_ps(s.add(i * Q_BLOCK), a0[i]);
                _mm512_storeu_ps(s.add(i * Q_BLOCK + 16), a1[i]);
                bm[0] = _mm512_max_ps(bm[0], a0[i]);
                bm[1] = _mm512_max_ps(bm[1], a1[i]);
            }
        }
    }

    /// `acc[i][..32] = acc[i][..32] · alpha + Σ_{j < nb} v[j * ldv + i] · p[j][..32]` for the
    /// `ME` value features `i`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F; `v` holds `nb` rows of `ME` floats `ldv` apart, `p` `nb * 32`
    /// floats, `acc` `ME * 32`.
    #[target_feature(enable = "avx512f")]
    unsafe fn pv_tile<const ME: usize>(
        v: *const f32,
        ldv: usize,
        p: *const f32,
        nb: usize,
        acc: *mut f32,
        alpha: [__m512; 2],
    ) {
        // SAFETY: i < ME and j < nb stay inside the contract's rows (rank1_updates reads the
        // same ones).
        unsafe {
            let mut a0 = [_mm512_setzero_ps(); ME];
            let mut a1 = [_mm512_setzero_ps(); ME];
            for i in 0..ME {
                a0[i] = _mm512_mul_ps(_mm512_loadu_ps(acc.add(i * Q_BLOCK)), alpha[0]);
                a1[i] = _mm512_mul_ps(_mm512_loadu_ps(acc.add(i * Q_BLOCK + 16)), alpha[1]);
            }
            rank1_updates(&mut a0, &mut a1, v, ldv, 1, p, nb);
            for i in 0..ME {
                _mm512_storeu_ps(acc.add(i * Q_BLOCK), a0[i]);
                _mm512_storeu_ps(acc.add(i * Q_BLOCK + 16), a1[i]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // `n` values in [−amp, amp]: the attention tests' xorshift generator.
    use crate::attention::tests::values as random;

    /// f64 reference: every (sequence, head, query) as a plain softmax over its keys.
    fn reference(q: &[f32], k: &[f32], v: &[f32], seqs: &[FullSeq], p: &FullShape) -> Vec<f32> {
        let d = p.head_dim;
        let (q_w, kv_w) = (p.n_heads * d, p.n_kv_heads * d);
        let group = p.n_heads / p.n_kv_heads;
        let mut out = vec![0f32; q.len()];
        for s in seqs {
            for h in 0..p.n_heads {
                let kvh = h / group;
                for i in s.q_row..s.q_row + s.n_q {
                    let qi = &q[i * q_w + h * d..][..d];
                    let scores: Vec<f64> = (s.k_row..s.k_row + s.n_k)
                        .map(|j| {
                            let kj = &k[j * kv_w + kvh * d..][..d];
                            qi.iter()
                                .zip(kj)
                                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                                .sum::<f64>()
                                * f64::from(p.scale)
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let total: f64 = w.iter().sum();
                    for e in 0..d {
                        let x: f64 = (s.k_row..s.k_row + s.n_k)
                            .zip(&w)
                            .map(|(j, &wj)| wj * f64::from(v[j * kv_w + kvh * d + e]))
                            .sum();
                        out[i * q_w + h * d + e] = (x / total) as f32;
                    }
                }
            }
        }
        out
    }

    fn check(seqs: &[FullSeq], p: &FullShape, amp: f32) {
        let d = p.head_dim;
        let rows_q = seqs.iter().map(|s| s.q_row + s.n_q).max().unwrap_or(0);
        let rows_k = seqs.iter().map(|s| s.k_row + s.n_k).max().unwrap_or(0);
        let q = random(rows_q * p.n_heads * d, 1 + d as u64, amp);
        let k = random(rows_k * p.n_kv_heads * d, 2 + d as u64, amp);
        let v = random(rows_k * p.n_kv_heads * d, 3 + d as u64, 1.0);
        let want = reference(&q, &k, &v, seqs, p);
        let mut got = vec![0f32; q.len()];
        if !attention_full_f32(&q, &k, &v, seqs, p, &mut got) {
            eprintln!("attention_full_f32 not available here: nothing checked");
            return;
        }
        let worst = want
            .iter()
            .zip(&got)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < 2e-6, "largest difference {worst}");
    }

    /// Odd shapes: query counts not a multiple of the block, key counts not of the tile or
    /// the key block, head widths that split unevenly into value tiles, grouped heads,
    /// several sequences (cross-attention: other key counts than query counts).
    #[test]
    fn matches_f64_reference_on_odd_shapes() {
        for (d, n_heads, n_kv_heads) in [(1, 1, 1), (5, 2, 1), (40, 3, 3), (13, 4, 2), (80, 1, 1)] {
            let p = FullShape {
                n_heads,
                n_kv_heads,
                head_dim: d,
                scale: 1.0 / (d as f32).sqrt(),
            };
            let seqs = [
                FullSeq {
                    q_row: 0,
                    n_q: 1,
                    k_row: 0,
                    n_k: 1,
                },
                FullSeq {
                    q_row: 1,
                    n_q: 33,
                    k_row: 1,
                    n_k: 77,
                },
                FullSeq {
                    q_row: 34,
                    n_q: 70,
                    k_row: 78,
                    n_k: 301,
                },
                FullSeq {
                    q_row: 104,
                    n_q: 0,
                    k_row: 379,
                    n_k: 5,
                },
            ];
            check(&seqs, &p, 1.0);
        }
    }

    /// Large, spread scores (a max that rises from one key block to the next): the online
    /// softmax's rescaling stays exact to rounding.
    #[test]
    fn large_scores_rescale_across_key_blocks() {
        let p = FullShape {
            n_heads: 2,
            n_kv_heads: 2,
            head_dim: 24,
            scale: 0.5,
        };
        let seqs = [FullSeq {
            q_row: 0,
            n_q: 40,
            k_row: 0,
            n_k: 3 * K_BLOCK + 7,
        }];
        check(&seqs, &p, 3.0);
    }
}
