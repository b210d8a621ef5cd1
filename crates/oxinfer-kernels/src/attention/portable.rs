//! The portable segment kernel (every CPU without the AVX2 one, and `Isa::Scalar`): one query
//! row and one key at a time, the same tile grid and online softmax as [`super::tiled`].

use super::kv_tile::HeadTile;
use super::partial::Partial;
use super::{first_key, ring_row, AttnShape, K_TILE};

/// Queries `i0 .. i1` × query heads `h0 .. h0 + gs` (all reading the kv head of the tiles)
/// over keys `k_lo .. k_hi` (a segment) into `st` (cleared, row `r` = query `i0 + r / gs`,
/// head `h0 + r % gs`). Tiles of [`K_TILE`] keys start at multiples of `K_TILE`; only the keys
/// some row sees are read.
#[allow(clippy::too_many_arguments)]
pub(super) fn segment(
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
    let ua = first_key(pos0 + i0, s.window).max(k_lo);
    let ub = (pos0 + i1).min(k_hi);
    let mut sc = [0f32; K_TILE];
    let mut j0 = ua / K_TILE * K_TILE;
    while j0 < ub {
        // Keys ta .. tb of the tile at j0 (absolute positions), read into tile rows 0 ..
        let (ta, tb) = (ua.max(j0), ub.min(j0 + K_TILE));
        kt.load((ta..tb).map(|j| ring_row(j, ring)));
        vt.load((ta..tb).map(|j| ring_row(j, ring)));
        for r in 0..(i1 - i0) * gs {
            let (i, h) = (i0 + r / gs, h0 + r % gs);
            let pos = pos0 + i;
            let a = first_key(pos, s.window).max(ta);
            let b = (pos + 1).min(tb);
            if a >= b {
                continue;
            }
            let qi = &q[i * q_row + h * hd..i * q_row + (h + 1) * hd];
            let mut tmax = f32::NEG_INFINITY;
            for j in a..b {
                let mut y = dot(qi, kt.row(j - ta)) * s.scale;
                if let Some(cap) = s.softcap {
                    y = cap * (y / cap).tanh();
                }
                sc[j - j0] = y;
                tmax = tmax.max(y);
            }
            let orow = &mut st.o[r * hd..(r + 1) * hd];
            let m_new = st.m[r].max(tmax);
            if m_new == f32::NEG_INFINITY {
                continue; // every score -inf (only with infinite inputs): nothing to add
            }
            if st.m[r] != m_new {
                let corr = if st.m[r] == f32::NEG_INFINITY {
                    0.0
                } else {
                    (st.m[r] - m_new).exp()
                };
                st.l[r] *= corr;
                orow.iter_mut().for_each(|o| *o *= corr);
                st.m[r] = m_new;
            }
            let mut sum = 0f32;
            for j in a..b {
                let p = (sc[j - j0] - m_new).exp();
                sum += p;
                orow.iter_mut()
                    .zip(vt.row(j - ta))
                    .for_each(|(o, v)| *o += p * v);
            }
            st.l[r] += sum;
        }
        j0 += K_TILE;
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
