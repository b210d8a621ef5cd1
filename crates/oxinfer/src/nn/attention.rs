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

/// The rows of a pass whose queries lie in a group of tokens that attend to each other both
/// ways (an image's soft tokens: [`crate::plan::media::MediaEmbeds::groups`]), attended again
/// over the keys that group adds to the causal mask: a query at position `p` of group `a..b`
/// sees every key the causal mask shows it and the later keys of its group, those older than
/// `p + 1 − window` still hidden when `p.window` is set — transformers' `AND(sliding_window,
/// OR(causal, blockwise))` — so it sees positions `max(0, p + 1 − window) .. b`, one contiguous
/// run. That is what a causal query at position `b − 1` with window `b − max(0, p + 1 − window)`
/// sees, so each such row is one [`attention_cached`] call of one query (the kernels, the KV
/// types and an installed backend's causal attention op all apply).
///
/// `q`, `k`, `v`, `ring`, `t`, `pos0` and `p` are those of the [`attention_cached`] call whose
/// output `out` (`[t, n_heads · head_dim]`) holds; rows `i` with `pos0 + i` in a group other than
/// its last position are overwritten. Every group that has rows in the pass must lie within
/// the keys stored (`..pos0 + t`) and, in a ring, after its oldest (the pass runs whole groups:
/// [`crate::plan::batch::layout`]).
///
/// # Panics
/// A group reaches past the stored keys.
#[allow(clippy::too_many_arguments)]
pub fn attend_groups(
    q: &[f32],
    k: KvView<'_>,
    v: KvView<'_>,
    ring: usize,
    t: usize,
    pos0: usize,
    groups: &[std::ops::Range<usize>],
    p: &AttnShape,
    out: &mut [f32],
) {
    let q_row = p.n_heads * p.head_dim;
    let kv_row = p.n_kv_heads * p.head_dim;
    for g in groups {
        let rows = g.start.max(pos0)..(g.end - 1).min(pos0 + t);
        if rows.is_empty() {
            continue;
        }
        assert!(
            g.end <= pos0 + t,
            "the group at positions {}..{} reaches past the {} keys stored",
            g.start,
            g.end,
            pos0 + t
        );
        // The keys of positions `..g.end` in position order (the plain layout's rows up to the
        // group's end); a ring as it is.
        let (kg, vg) = if ring == 0 {
            (
                k.split_at_row(g.end, kv_row).0,
                v.split_at_row(g.end, kv_row).0,
            )
        } else {
            (k, v)
        };
        for pos in rows {
            let i = pos - pos0;
            let shape = AttnShape {
                window: p.window.map(|w| g.end - (pos + 1).saturating_sub(w)),
                ..*p
            };
            let qi = &q[i * q_row..(i + 1) * q_row];
            let o = attention_cached(qi, kg, vg, ring, 1, g.end - 1, &shape);
            out[i * q_row..(i + 1) * q_row].copy_from_slice(&o);
        }
    }
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

    /// [`attend_groups`] against the mask written out: a query at `p` sees key `j` when
    /// `j > p − window` and (`j ≤ p` or both lie in one group), softmax over those only. Plain
    /// and ring (sliding) caches of f32, Q8_0 keys and values within the Q8_0 bound; rows
    /// outside the groups keep the causal output.
    #[test]
    fn groups_see_their_later_tokens_within_the_window() {
        use crate::plan::{KvCache, KvType, KvTypes};
        let (n_heads, hd) = (2usize, 8usize);
        let (pos0, t) = (6usize, 14usize);
        let groups = [8..12, 13..19];
        let val = |i: usize, s: usize| {
            let x = ((i * 7919 + s * 104_729) % 2003) as f32;
            x / 1001.0 - 1.0
        };
        let n = pos0 + t;
        let k: Vec<f32> = (0..n * hd).map(|i| val(i, 1)).collect();
        let v: Vec<f32> = (0..n * hd).map(|i| val(i, 2)).collect();
        let q: Vec<f32> = (0..t * n_heads * hd).map(|i| val(i, 3)).collect();
        let group_of = |j: usize| groups.iter().position(|g| g.contains(&j));
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(a, b)| a * b).sum::<f32>();
        for window in [Some(4), Some(30), None] {
            let p = AttnShape {
                n_heads,
                n_kv_heads: 1,
                head_dim: hd,
                scale: 0.35,
                window,
                softcap: None,
            };
            // The mask written out.
            let mut want = vec![0f32; t * n_heads * hd];
            for i in 0..t {
                let pos = pos0 + i;
                let same_group = |j: usize| group_of(j).is_some() && group_of(j) == group_of(pos);
                let seen: Vec<usize> = (0..n)
                    .filter(|&j| window.is_none_or(|w| j + w > pos))
                    .filter(|&j| j <= pos || same_group(j))
                    .collect();
                for h in 0..n_heads {
                    let qi = &q[(i * n_heads + h) * hd..][..hd];
                    let s: Vec<f32> = seen
                        .iter()
                        .map(|&j| dot(qi, &k[j * hd..][..hd]) * p.scale)
                        .collect();
                    let m = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let e: Vec<f32> = s.iter().map(|x| (x - m).exp()).collect();
                    let z: f32 = e.iter().sum();
                    let o = &mut want[(i * n_heads + h) * hd..][..hd];
                    for (w, &j) in e.iter().zip(&seen) {
                        for (o, x) in o.iter_mut().zip(&v[j * hd..][..hd]) {
                            *o += w / z * x;
                        }
                    }
                }
            }
            for (ty, bound) in [(KvType::F32, 1e-5), (KvType::Q8_0, 0.05)] {
                for ring in [false, true] {
                    let mut c = KvCache::new(1, hd, 64).with_types(KvTypes { k: ty, v: ty });
                    if ring {
                        c = c.with_windows(&[window]);
                    }
                    c.store(0, &k[..pos0 * hd], &v[..pos0 * hd], hd);
                    c.advance(pos0);
                    c.store(0, &k[pos0 * hd..], &v[pos0 * hd..], hd);
                    let l = &c.layers[0];
                    let (kv, vv) = (l.k.view(), l.v.view());
                    let mut got = attention_cached(&q, kv, vv, l.ring, t, pos0, &p);
                    attend_groups(&q, kv, vv, l.ring, t, pos0, &groups, &p, &mut got);
                    let d = got
                        .iter()
                        .zip(&want)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0f32, f32::max);
                    assert!(
                        d <= bound,
                        "{ty} window {window:?} ring {ring}: differs by {d}"
                    );
                }
            }
        }
    }
}
