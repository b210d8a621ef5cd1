//! The AVX2 segment kernel of the fused attention: one task takes a block of queries and every
//! query head of one kv head (GQA heads share each key/value row they load) over one segment
//! of keys, and per key tile runs two register-blocked micro-kernels: scores `S = Q · Kᵀ` (two
//! rows × four keys per step, eight accumulators; one row when a task has a single row, as in
//! decode) and `O += P · V` (four rows × sixteen dims per step), with the online softmax
//! between them. Every product, exponential and sum of a row is computed in the same lanes
//! and order whatever rows share the task: tiles start at multiples of [`K_TILE`], the
//! exponentials run eight keys at a time over whole 8-key chunks of the tile (`exp8` in every
//! lane, masked lanes exactly 0), and a key masked for a row adds `0 · v` to its output. The
//! portable kernel (`super::portable`) does the same arithmetic one row and one key at a time.

#![allow(clippy::needless_range_loop)] // register tiles indexed by row and key

use super::kv_tile::HeadTile;
use super::partial::Partial;
use super::{first_key, ring_row, AttnShape, K_TILE};
use std::arch::x86_64::*;

/// Rows the score and update kernels take at most.
const MAX_R: usize = 4;

/// Queries `i0 .. i1` × query heads `h0 .. h0 + gs` (all reading the kv head of the tiles)
/// over keys `k_lo .. k_hi` (a segment) into `st` (cleared; row `r` = query `i0 + r / gs`,
/// head `h0 + r % gs`). Only the keys some row sees are read.
///
/// # Safety
/// The CPU must have AVX2 and FMA; `q` and the views behind the tiles must hold the rows the
/// shape says (checked by `attention_kv_isa`), and `st` `(i1 - i0) * gs` rows.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn segment(
    q: &[f32],
    (kt, vt): (&mut HeadTile<'_>, &mut HeadTile<'_>),
    ring: usize,
    (i0, i1): (usize, usize),
    pos0: usize,
    (h0, gs): (usize, usize),
    s: &AttnShape,
    (k_lo, k_hi): (usize, usize),
    st: &mut Partial,
) {
    let hd = s.head_dim;
    let q_row = s.n_heads * hd;
    let nr = (i1 - i0) * gs;
    assert!(st.o.len() >= nr * hd && st.m.len() >= nr);
    // The keys of the segment some row sees.
    let ua = first_key(pos0 + i0, s.window).max(k_lo);
    let ub = (pos0 + i1).min(k_hi);
    if ua >= ub {
        return;
    }
    let qp: Vec<*const f32> = (0..nr)
        .map(|r| {
            let at = (i0 + r / gs) * q_row + (h0 + r % gs) * hd;
            q[at..at + hd].as_ptr()
        })
        .collect();
    let mut p = vec![0f32; nr * K_TILE];
    let mut kp = [std::ptr::null::<f32>(); K_TILE];
    let mut vp = [std::ptr::null::<f32>(); K_TILE];
    let mut j0 = ua / K_TILE * K_TILE;
    while j0 < ub {
        // Keys ta .. tb of the tile (offsets from j0); chunks ca .. cb cover them in whole
        // 8-key chunks (cb <= K_TILE as j0 is a multiple of K_TILE).
        let (ta, tb) = (ua.max(j0) - j0, ub.min(j0 + K_TILE) - j0);
        let (ca, cb) = (ta / 8 * 8, tb.div_ceil(8) * 8);
        kt.load((j0 + ta..j0 + tb).map(|j| ring_row(j, ring)));
        vt.load((j0 + ta..j0 + tb).map(|j| ring_row(j, ring)));
        for u in ta..tb {
            kp[u] = kt.row(u - ta).as_ptr();
            vp[u] = vt.row(u - ta).as_ptr();
        }
        // Scores.
        let mut r0 = 0;
        while r0 < nr {
            let rn = (nr - r0).min(2);
            let mut u0 = ta;
            while u0 < tb {
                let un = (tb - u0).min(4);
                let ks = [0, 1, 2, 3].map(|u| kp[u0 + u.min(un - 1)]);
                // SAFETY: every pointer starts hd readable floats (built from checked slices).
                let sc = unsafe {
                    if rn == 2 {
                        qk::<2>([qp[r0], qp[r0 + 1]], ks, hd)
                    } else {
                        let [a] = qk::<1>([qp[r0]], ks, hd);
                        [a, a]
                    }
                };
                for (r, row) in sc.iter().enumerate().take(rn) {
                    p[(r0 + r) * K_TILE + u0..(r0 + r) * K_TILE + u0 + un]
                        .copy_from_slice(&row[..un]);
                }
                u0 += un;
            }
            r0 += rn;
        }
        // Online softmax: p becomes exp(score − running max), zero outside each row's keys.
        for r in 0..nr {
            let pos = pos0 + i0 + r / gs;
            let a = first_key(pos, s.window).max(j0 + ta);
            let b = (pos + 1).min(j0 + tb);
            let prow = &mut p[r * K_TILE..(r + 1) * K_TILE];
            if a >= b {
                prow[ta..tb].fill(0.0);
                continue;
            }
            let (a, b) = (a - j0, b - j0);
            let mut tmax = f32::NEG_INFINITY;
            for x in &mut prow[a..b] {
                let mut y = *x * s.scale;
                if let Some(cap) = s.softcap {
                    y = cap * (y / cap).tanh();
                }
                *x = y;
                tmax = tmax.max(y);
            }
            let m_new = st.m[r].max(tmax);
            if m_new == f32::NEG_INFINITY {
                prow[ta..tb].fill(0.0); // every score -inf (only with infinite inputs)
                continue;
            }
            if st.m[r] != m_new {
                let corr = if st.m[r] == f32::NEG_INFINITY {
                    0.0
                } else {
                    (st.m[r] - m_new).exp()
                };
                st.l[r] *= corr;
                for x in &mut st.o[r * hd..(r + 1) * hd] {
                    *x *= corr;
                }
                st.m[r] = m_new;
            }
            st.l[r] += exp_masked(&mut prow[ca..cb], m_new, (a - ca, b - ca));
        }
        // O += P · V over the tile's keys (a masked key's p is 0: it adds exactly 0).
        let mut r0 = 0;
        while r0 < nr {
            let rn = (nr - r0).min(MAX_R);
            let orow = st.o[r0 * hd..].as_mut_ptr();
            let prow = &p[r0 * K_TILE + ta..];
            let v = &vp[ta..tb];
            // SAFETY: rows r0 .. r0 + rn of st.o and p exist (p's rows from column ta on);
            // vp[ta..tb] start hd floats each.
            unsafe {
                match rn {
                    1 => pv::<1>(orow, prow, v, hd),
                    2 => pv::<2>(orow, prow, v, hd),
                    3 => pv::<3>(orow, prow, v, hd),
                    _ => pv::<4>(orow, prow, v, hd),
                }
            }
            r0 += rn;
        }
        j0 += K_TILE;
    }
}

/// `p[u] = exp(p[u] − m)` for `u` in `lo .. hi`, zero elsewhere; returns the sum. `p` is
/// whole 8-key chunks (`p.len()` a multiple of 8): every chunk goes through `exp8` and an
/// 8-lane sum, so a key's lane, and a row's sum, do not depend on the chunks around it (a
/// chunk with no key of the row adds exactly 0 to every lane).
#[inline(always)]
fn exp_masked(p: &mut [f32], m: f32, (lo, hi): (usize, usize)) -> f32 {
    let n = p.len();
    assert!(n.is_multiple_of(8) && hi <= n);
    // SAFETY: plain register arithmetic and loads/stores of p[u .. u + 8] with u + 8 <= n;
    // the enclosing kernel has avx2 + fma.
    unsafe {
        let mv = _mm256_set1_ps(m);
        let (lov, hiv) = (_mm256_set1_epi32(lo as i32), _mm256_set1_epi32(hi as i32));
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let mut sum = _mm256_setzero_ps();
        let mut u = 0;
        while u < n {
            let x = _mm256_loadu_ps(p.as_ptr().add(u));
            let e = crate::act::avx2::exp8(_mm256_sub_ps(x, mv));
            let idx = _mm256_add_epi32(_mm256_set1_epi32(u as i32), lane);
            // lo <= idx < hi
            let inside =
                _mm256_andnot_si256(_mm256_cmpgt_epi32(lov, idx), _mm256_cmpgt_epi32(hiv, idx));
            let e = _mm256_and_ps(e, _mm256_castsi256_ps(inside));
            _mm256_storeu_ps(p.as_mut_ptr().add(u), e);
            sum = _mm256_add_ps(sum, e);
            u += 8;
        }
        let s = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps::<1>(sum));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }
}

/// Horizontal sums of four vectors: lane `u` = Σ of `a[u]`.
#[inline(always)]
fn hsum4(a: [__m256; 4]) -> __m128 {
    // SAFETY: plain register arithmetic; the enclosing kernel has AVX2.
    unsafe {
        let h01 = _mm256_hadd_ps(a[0], a[1]);
        let h23 = _mm256_hadd_ps(a[2], a[3]);
        let h = _mm256_hadd_ps(h01, h23);
        _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h))
    }
}

/// `q_r · k_u` for `R` (1 or 2) query rows and four key rows (each `hd` floats).
#[inline(always)]
unsafe fn qk<const R: usize>(q: [*const f32; R], k: [*const f32; 4], hd: usize) -> [[f32; 4]; R] {
    let main = hd / 8 * 8;
    // SAFETY: the caller guarantees hd readable floats at every pointer; d + 8 <= main <= hd.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 4]; R];
        let mut d = 0;
        while d < main {
            let kv = k.map(|p| _mm256_loadu_ps(p.add(d)));
            for r in 0..R {
                let qv = _mm256_loadu_ps(q[r].add(d));
                for u in 0..4 {
                    acc[r][u] = _mm256_fmadd_ps(qv, kv[u], acc[r][u]);
                }
            }
            d += 8;
        }
        let mut out = [[0f32; 4]; R];
        for r in 0..R {
            _mm_storeu_ps(out[r].as_mut_ptr(), hsum4(acc[r]));
            for u in 0..4 {
                for d in main..hd {
                    out[r][u] += *q[r].add(d) * *k[u].add(d);
                }
            }
        }
        out
    }
}

/// `o[r] += Σ_u p[r][u] · v_u` for `R` rows (`o` rows `hd` apart, `p` rows `K_TILE` apart).
#[inline(always)]
unsafe fn pv<const R: usize>(o: *mut f32, p: &[f32], v: &[*const f32], hd: usize) {
    // SAFETY: the caller guarantees R rows of hd floats at o, R rows of p, and hd floats at
    // every v pointer; column offsets stay below hd.
    unsafe {
        let mut c = 0;
        while c + 16 <= hd {
            let mut acc = [[_mm256_setzero_ps(); 2]; R];
            for r in 0..R {
                acc[r][0] = _mm256_loadu_ps(o.add(r * hd + c));
                acc[r][1] = _mm256_loadu_ps(o.add(r * hd + c + 8));
            }
            for (u, vu) in v.iter().enumerate() {
                let v0 = _mm256_loadu_ps(vu.add(c));
                let v1 = _mm256_loadu_ps(vu.add(c + 8));
                for r in 0..R {
                    let pr = _mm256_broadcast_ss(&p[r * K_TILE + u]);
                    acc[r][0] = _mm256_fmadd_ps(pr, v0, acc[r][0]);
                    acc[r][1] = _mm256_fmadd_ps(pr, v1, acc[r][1]);
                }
            }
            for r in 0..R {
                _mm256_storeu_ps(o.add(r * hd + c), acc[r][0]);
                _mm256_storeu_ps(o.add(r * hd + c + 8), acc[r][1]);
            }
            c += 16;
        }
        while c + 8 <= hd {
            let mut acc = [_mm256_setzero_ps(); R];
            for r in 0..R {
                acc[r] = _mm256_loadu_ps(o.add(r * hd + c));
            }
            for (u, vu) in v.iter().enumerate() {
                let v0 = _mm256_loadu_ps(vu.add(c));
                for r in 0..R {
                    let pr = _mm256_broadcast_ss(&p[r * K_TILE + u]);
                    acc[r] = _mm256_fmadd_ps(pr, v0, acc[r]);
                }
            }
            for r in 0..R {
                _mm256_storeu_ps(o.add(r * hd + c), acc[r]);
            }
            c += 8;
        }
        for d in c..hd {
            for r in 0..R {
                let mut x = *o.add(r * hd + d);
                for (u, vu) in v.iter().enumerate() {
                    x = p[r * K_TILE + u].mul_add(*vu.add(d), x);
                }
                *o.add(r * hd + d) = x;
            }
        }
    }
}
