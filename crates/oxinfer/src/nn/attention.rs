//! Causal multi-head attention over a KV cache (GQA, optional sliding window and logit
//! soft-capping). Offered to the installed [`crate::backend`] first; on the CPU the default
//! kernel set runs the fused, tiled kernel ([`oxinfer_kernels::attention`]: query blocks × key
//! tiles with an online softmax); `OXINFER_KERNELS=scalar` runs the plain reference here: one
//! softmax per query row, heads in parallel.

pub use crate::backend::cpu_ref::attention::attention_cpu;
use crate::backend::{self, AttentionGeom};
use oxinfer_kernels::attention::kv_rotation::rotated;
#[cfg(doc)]
use oxinfer_kernels::attention::KvType;
use oxinfer_kernels::attention::{kv_rotation, rotate_chunks, AttnShape, KvRole, KvView};
use oxinfer_kernels::packed::float::{float_packing_pays, matmul_float_packed, PackedFloatMatrix};
use oxinfer_kernels::{WeightFormat, WeightMatrix};

/// `q` is `[t, n_heads * head_dim]` for positions `pos0 .. pos0 + t`; `k`, `v` are
/// `[pos0 + t, n_kv_heads * head_dim]` (every cached position, the new ones included).
/// Returns `[t, n_heads * head_dim]`.
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    t: usize,
    pos0: usize,
    p: &AttnShape,
) -> Vec<f32> {
    let g = AttentionGeom { t, pos0, shape: *p };
    if let Some(b) = backend::active() {
        let mut out = vec![0f32; t * p.n_heads * p.head_dim];
        if b.attention(q, k, v, &g, &mut out) {
            return out;
        }
    }
    attention_cpu(q, k, v, &g)
}

/// [`attention`] over one layer's cached keys and values as [`crate::nn::KvCache`] stores them:
/// `k`/`v` rows (f32 or another [`KvType`]) in position order (`ring = 0`) or a sliding
/// layer's ring of `ring` rows (position `p` in row `p % ring`). The default CPU kernels read
/// the rows in place (decoding stored types tile by tile); the scalar reference and an
/// installed backend get the visible positions copied out in order, as f32. Rows of a block
/// type stored rotated ([`crate::nn::KvCache::store`]) are attended with rotated queries,
/// and the output is rotated back.
#[allow(clippy::too_many_arguments)]
pub fn attention_cached(
    q: &[f32],
    k: KvView<'_>,
    v: KvView<'_>,
    ring: usize,
    t: usize,
    pos0: usize,
    p: &AttnShape,
) -> Vec<f32> {
    let plain = ring == 0 || pos0 + t <= ring;
    if let (true, KvView::F32(k), KvView::F32(v)) = (plain, k, v) {
        return attention(q, k, v, t, pos0, p);
    }
    // Rows of a block type may be stored rotated (KvCache::store): the queries are rotated
    // alike, and the output rotated back.
    let q = rotated(q, kv_rotation(k.ty(), p.head_dim, KvRole::Key));
    let kv_row = p.n_kv_heads * p.head_dim;
    let mut out = if backend::active().is_none()
        && oxinfer_kernels::kernel_set() != oxinfer_kernels::KernelSet::Scalar
    {
        let keys = if plain { pos0 + t } else { ring };
        let stored = keys * (k.ty().row_bytes(kv_row) + v.ty().row_bytes(kv_row));
        let _prof = oxinfer_kernels::profile::scope(
            || "attention".to_string(),
            stored as u64,
            (4 * t * keys * p.n_heads * p.head_dim) as u64,
        );
        let mut out = vec![0f32; t * p.n_heads * p.head_dim];
        oxinfer_kernels::attention::attention_kv(&q, k, v, t, pos0, ring, p, &mut out);
        out
    } else {
        // The oldest position the first query sees, then every position up to the last new
        // one, copied out in order as f32; the mask only depends on position differences.
        let first = match p.window {
            Some(w) if !plain => (pos0 + 1).saturating_sub(w),
            _ => 0,
        };
        assert!(
            plain || pos0 + t - first <= ring,
            "a ring of {ring} rows cannot hold positions {first}..{}",
            pos0 + t
        );
        let rows = || (first..pos0 + t).map(|pos| if plain { pos } else { pos % ring });
        let (lk, lv) = (k.to_f32(rows(), kv_row), v.to_f32(rows(), kv_row));
        attention(&q, &lk, &lv, t, pos0 - first, p)
    };
    if let Some(n) = kv_rotation(v.ty(), p.head_dim, KvRole::Value) {
        rotate_chunks(&mut out, n);
    }
    out
}

/// Attention without the causal mask (encoders, diffusion): each of the `n_q` queries sees
/// every key. `q` is `[n_q, n_heads * head_dim]`; `k` and `v` are `[n_k, n_kv_heads * head_dim]`
/// with any `n_k` (cross-attention: image tokens over text tokens); returns
/// `[n_q, n_heads * head_dim]`, each head `softmax(q kᵀ · scale) v` with `p.softcap` applied to
/// the scores. `p.window`, when set (self-attention, `n_q == n_k`), keeps keys with
/// `|i - j| < window` on both sides. Runs on the CPU: with the packed f32 GEMM, each kv head's
/// keys and values are packed once, then one pool task per (query head, block of
/// [`FULL_Q_BLOCK`] queries) computes its `[block, n_k]` scores, their softmax and its share of
/// the output, both products on the GEMM (inline in the task); under `OXINFER_KERNELS=scalar` /
/// `OXINFER_PACKED=0` one head at a time on the row kernels. The backends' attention op is
/// causal only.
///
/// # Panics
/// `q`, `k` or `v` not whole rows of their widths, `k` and `v` of other lengths, or a window with
/// `n_q != n_k`.
pub fn attention_full(q: &[f32], k: &[f32], v: &[f32], n_q: usize, p: &AttnShape) -> Vec<f32> {
    let d = p.head_dim;
    let (q_row, kv_row) = (p.n_heads * d, p.n_kv_heads * d);
    assert!(
        kv_row > 0 && q.len() == n_q * q_row && k.len().is_multiple_of(kv_row),
        "q is not [n_q, n_heads * head_dim] or k not [n_k, n_kv_heads * head_dim]"
    );
    assert_eq!(k.len(), v.len(), "k and v have other lengths");
    let n_k = k.len() / kv_row;
    assert!(
        p.window.is_none() || n_q == n_k,
        "a window needs n_q == n_k"
    );
    let mut out = vec![0f32; n_q * q_row];
    if n_q == 0 || n_k == 0 {
        return out;
    }
    if float_packing_pays(WeightFormat::F32) {
        full_packed(q, k, v, n_q, n_k, p, &mut out);
    } else {
        full_rows(q, k, v, n_q, n_k, p, &mut out);
    }
    out
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

/// [`attention_full`] on the packed f32 GEMM (checks done, `out` zeroed).
fn full_packed(
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
    // Each kv head's keys `[n_k, d]` and values as `Vᵀ` `[d, n_k]`, packed once for all of its
    // query heads and blocks.
    let mut kv: Vec<Option<(PackedFloatMatrix, PackedFloatMatrix)>> =
        (0..p.n_kv_heads).map(|_| None).collect();
    oxinfer_kernels::pool::for_each_mut(&mut kv, |h, slot| {
        let cols = h * d..(h + 1) * d;
        let key = |r: usize| &k[r * kv_row..][cols.clone()];
        let value = |r: usize| &v[r * kv_row..][cols.clone()];
        *slot = Some((
            PackedFloatMatrix::from_rows(n_k, d, key),
            PackedFloatMatrix::from_columns(d, n_k, value),
        ));
    });
    let blocks = n_q.div_ceil(FULL_Q_BLOCK);
    let mut parts: Vec<Vec<f32>> = vec![Vec::new(); p.n_heads * blocks];
    oxinfer_kernels::pool::for_each_mut(&mut parts, |task, o| {
        let (h, b) = (task / blocks, task % blocks);
        let rows = b * FULL_Q_BLOCK..((b + 1) * FULL_Q_BLOCK).min(n_q);
        let nb = rows.len();
        let Some((km, vm)) = &kv[h / group] else {
            unreachable!("every kv head was packed above")
        };
        let qh: Vec<f32> = rows
            .clone()
            .flat_map(|r| &q[r * q_row + h * d..r * q_row + (h + 1) * d])
            .copied()
            .collect();
        o.resize(nb * d, 0.0);
        SCORES.with_borrow_mut(|buf| {
            if buf.len() < nb * n_k {
                buf.resize(nb * n_k, 0.0);
            }
            let scores = &mut buf[..nb * n_k];
            matmul_float_packed(km, &qh, nb, scores);
            for (r, row) in scores.chunks_exact_mut(n_k).enumerate() {
                softmax_row(row, rows.start + r, p);
            }
            matmul_float_packed(vm, scores, nb, o);
        });
    });
    for (task, o) in parts.iter().enumerate() {
        let (h, b) = (task / blocks, task % blocks);
        for (r, src) in o.chunks_exact(d).enumerate() {
            let row = b * FULL_Q_BLOCK + r;
            out[row * q_row + h * d..row * q_row + (h + 1) * d].copy_from_slice(src);
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
    if p.window.is_none() && p.softcap.is_none() {
        oxinfer_kernels::softmax::softmax_scaled(row, p.scale);
        return;
    }
    let n_k = row.len();
    let (first, last) = match p.window {
        Some(w) => ((i + 1).saturating_sub(w), (i + w).min(n_k)),
        None => (0, n_k),
    };
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

    /// One query attending to one key returns that key's value.
    #[test]
    fn single_key_returns_value() {
        let p = AttnShape {
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: 2,
            scale: 1.0,
            window: None,
            softcap: None,
        };
        let out = attention(&[1.0, 0.0, 0.0, 1.0], &[0.5, 0.5], &[3.0, -2.0], 1, 0, &p);
        assert_eq!(out, vec![3.0, -2.0, 3.0, -2.0]);
    }

    /// Causal mask: the first query ignores the second key; the window hides old keys.
    #[test]
    fn causal_and_window() {
        let mut p = AttnShape {
            n_heads: 1,
            n_kv_heads: 1,
            head_dim: 1,
            scale: 1.0,
            window: None,
            softcap: None,
        };
        let q = [0.0, 0.0];
        let k = [0.0, 0.0];
        let v = [2.0, 4.0];
        assert_eq!(attention(&q, &k, &v, 2, 0, &p), vec![2.0, 3.0]);
        p.window = Some(1);
        assert_eq!(attention(&q, &k, &v, 2, 0, &p), vec![2.0, 4.0]);
    }

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

    /// A block-type cache stored through [`KvCache::store`] (rotated keys and values) gives
    /// the f32 cache's attention closely, and closer than the same rows stored unrotated: keys
    /// and values with one large channel, as real models' have, Q4_0 and Q8_0 rows.
    #[test]
    fn rotated_block_caches_attend_like_f32() {
        use crate::plan::{KvCache, KvType, KvTypes};
        let p = AttnShape {
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 64,
            scale: 0.125,
            window: None,
            softcap: None,
        };
        let (t, kv_row, q_row) = (40usize, 128usize, 256usize);
        let val = |i: usize, s: usize| {
            let mut x = (i as u64) << 8 | s as u64;
            x = (x ^ (x >> 31)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            x = (x ^ (x >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            ((x >> 40) % 2001) as f32 / 1000.0 - 1.0
        };
        let rows = |s: usize| -> Vec<f32> {
            (0..t * kv_row)
                .map(|i| {
                    if i % kv_row == 9 {
                        12.0 + val(i, s)
                    } else {
                        val(i, s)
                    }
                })
                .collect()
        };
        let (k, v) = (rows(1), rows(2));
        let q: Vec<f32> = (0..t * q_row).map(|i| val(i, 3)).collect();
        let mut f32_cache = KvCache::new(1, kv_row, t);
        f32_cache.store(0, &k, &v, p.head_dim);
        let lc = &f32_cache.layers[0];
        let want = attention_cached(&q, lc.k.view(), lc.v.view(), 0, t, 0, &p);
        for ty in [KvType::Q4_0, KvType::Q8_0] {
            let types = KvTypes { k: ty, v: ty };
            let mut rotated = KvCache::new(1, kv_row, t).with_types(types);
            rotated.store(0, &k, &v, p.head_dim);
            let lc = &rotated.layers[0];
            let got = attention_cached(&q, lc.k.view(), lc.v.view(), 0, t, 0, &p);
            // The same rows stored as they are, attended by the kernel directly.
            let mut plain = KvCache::new(1, kv_row, t).with_types(types);
            plain.append(0, &k, &v);
            let lc = &plain.layers[0];
            let mut unrotated = vec![0f32; t * q_row];
            oxinfer_kernels::attention::attention_kv(
                &q,
                lc.k.view(),
                lc.v.view(),
                t,
                0,
                0,
                &p,
                &mut unrotated,
            );
            let err = |x: &[f32]| {
                x.iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max)
            };
            let (e_rot, e_plain) = (err(&got), err(&unrotated));
            // (Outputs are of order 1; a Q4_0 step is 1/8 of a block's largest value.)
            let bound = if ty == KvType::Q4_0 { 0.5 } else { 0.05 };
            assert!(
                e_rot * 2.0 < e_plain && e_rot < bound,
                "{ty}: rotated {e_rot} vs unrotated {e_plain}"
            );
        }
    }
}
