//! Fused causal attention on the CPU: tiled over query blocks and key tiles with an online
//! softmax (the flash-attention scheme), so scores never exist as a whole `[t, n_keys]` matrix
//! and each key/value tile is read once per block of queries instead of once per query.
//!
//! Work is split into (head, query block) tasks, the longest (last) query blocks first, so the
//! thread pool stays balanced under the causal mask. Dot products and the `p · V` updates use
//! AVX2+FMA where the CPU has it ([`crate::dispatch::detected_isa`]), portable code elsewhere.
//! The reference (one full softmax per query row) lives in the `oxinfer` crate's nn layer and
//! is what `OXINFER_KERNELS=scalar` runs; tests compare the two.
//!
//! Keys and values may be stored in a [`KvType`] other than f32 (a quantized KV cache,
//! [`attention_kv`]): each task then decodes the tile of rows it is about to read, one kv
//! head's slice at a time ([`kv_tile`]), with the SIMD decoders of [`kv_dequant`].

use crate::dispatch::{detected_isa, Isa};
use crate::pool::parallel_for;
use kv_tile::HeadTile;

pub mod kv_dequant;
pub mod kv_tile;
pub mod kv_type;

pub use kv_tile::KvView;
pub use kv_type::KvType;

/// Shape and options of one attention call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnShape {
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads; query head `h` reads kv head `h / (n_heads / n_kv_heads)`.
    pub n_kv_heads: usize,
    /// Width of one head (elements).
    pub head_dim: usize,
    /// Factor on q·k (usually `1 / sqrt(head_dim)`).
    pub scale: f32,
    /// A query at position `p` sees keys `k` with `p - k < window`.
    pub window: Option<usize>,
    /// Scores become `cap · tanh(score / cap)` before the softmax.
    pub softcap: Option<f32>,
}

/// Queries per task.
const Q_BLOCK: usize = 16;
/// Keys per tile.
const K_TILE: usize = 64;

/// Raw output pointer shared by tasks that write disjoint rows.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint (query row, head) slices while the buffer is alive.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}
impl OutPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// Causal attention of `t` new queries at positions `pos0 .. pos0 + t`.
///
/// `q` is `[t, n_heads * head_dim]`; `k` and `v` are `[pos0 + t, n_kv_heads * head_dim]` (all
/// visible positions, the new ones included); `out` (`[t, n_heads * head_dim]`) is overwritten.
///
/// # Panics
/// When a buffer is shorter than its shape says or the heads do not divide.
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    t: usize,
    pos0: usize,
    s: &AttnShape,
    out: &mut [f32],
) {
    attention_isa(q, k, v, t, pos0, 0, s, out, detected_isa());
}

/// [`attention_ring`] over keys and values in any [`KvType`] (`k` and `v` may differ): rows
/// of a stored type are decoded tile by tile as the tasks read them. `ring = 0` is the plain
/// layout (row `p` is position `p`).
///
/// # Panics
/// As [`attention_ring`], and when a view holds fewer rows than the call reads.
#[allow(clippy::too_many_arguments)]
pub fn attention_kv(
    q: &[f32],
    k: KvView<'_>,
    v: KvView<'_>,
    t: usize,
    pos0: usize,
    ring: usize,
    s: &AttnShape,
    out: &mut [f32],
) {
    attention_kv_isa(q, (k, v), t, pos0, ring, s, out, detected_isa());
}

/// [`attention`] over keys and values kept in a ring buffer of `ring` rows: position `p` lives
/// in row `p % ring` of `k` and `v` (each `[min(pos0 + t, ring), n_kv_heads * head_dim]`), so
/// a sliding-window layer stores only its window. Every position a query sees must still be in
/// the ring: `ring ≥ window − 1 + t` (checked). `ring = 0` is the plain layout of [`attention`].
///
/// # Panics
/// As [`attention`], and when the ring is too small for the window and the `t` new queries.
#[allow(clippy::too_many_arguments)]
pub fn attention_ring(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    t: usize,
    pos0: usize,
    ring: usize,
    s: &AttnShape,
    out: &mut [f32],
) {
    attention_isa(q, k, v, t, pos0, ring, s, out, detected_isa());
}

/// Row of position `j` in a cache whose key/value rows are a ring of `ring` rows (0: none).
#[inline]
fn ring_row(j: usize, ring: usize) -> usize {
    if ring == 0 {
        j
    } else {
        j % ring
    }
}

/// [`attention_ring`] with the instruction set given (tests run every one the CPU has).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_isa(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    t: usize,
    pos0: usize,
    ring: usize,
    s: &AttnShape,
    out: &mut [f32],
    isa: Isa,
) {
    let kv = (KvView::F32(k), KvView::F32(v));
    attention_kv_isa(q, kv, t, pos0, ring, s, out, isa);
}

/// [`attention_kv`] with the instruction set given.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_kv_isa(
    q: &[f32],
    (k, v): (KvView<'_>, KvView<'_>),
    t: usize,
    pos0: usize,
    ring: usize,
    s: &AttnShape,
    out: &mut [f32],
    isa: Isa,
) {
    // Sizes are checked products: a wrapped one would let the tasks write past `out`.
    let size = |a: usize, b: usize| a.checked_mul(b).expect("attention shape overflows usize");
    let hd = s.head_dim;
    let q_row = size(s.n_heads, hd);
    let kv_row = size(s.n_kv_heads, hd);
    let end = pos0
        .checked_add(t)
        .expect("attention positions overflow usize");
    let n_keys = if ring == 0 { end } else { ring.min(end) };
    if ring > 0 && pos0 + t > ring {
        // The oldest key of the first query and the newest key must not share a row.
        let oldest = first_key(pos0, s.window);
        assert!(
            pos0 + t - oldest <= ring,
            "ring of {ring} rows cannot hold keys {oldest}..{} (window {:?})",
            pos0 + t,
            s.window
        );
    }
    assert!(
        s.n_kv_heads > 0 && s.n_heads.is_multiple_of(s.n_kv_heads),
        "heads must divide"
    );
    assert!(
        q.len() >= size(t, q_row) && out.len() >= size(t, q_row),
        "q/out too short"
    );
    assert!(
        k.rows(kv_row) >= n_keys && v.rows(kv_row) >= n_keys,
        "k/v too short"
    );
    if t == 0 {
        return;
    }
    let group = s.n_heads / s.n_kv_heads;
    let optr = OutPtr(out.as_mut_ptr());
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // Tasks: (kv head, sub-group of its query heads, query block); the sub-groups split a
        // kv head's heads only as far as needed for two tasks per thread (decode).
        let n_qb = t.div_ceil(Q_BLOCK);
        let want = 2 * crate::pool::pool_threads();
        let mut splits = 1;
        while splits < group && s.n_kv_heads * n_qb * splits < want {
            splits += 1;
        }
        while !group.is_multiple_of(splits) {
            splits += 1;
        }
        let gs = group / splits;
        let per_qb = s.n_kv_heads * splits;
        parallel_for(per_qb * n_qb, &|task| {
            let sub = task % per_qb;
            let qb = n_qb - 1 - task / per_qb;
            let (kvh, h0) = (sub / splits, sub / splits * group + sub % splits * gs);
            let i0 = qb * Q_BLOCK;
            let i1 = (i0 + Q_BLOCK).min(t);
            let mut o = vec![0f32; (i1 - i0) * gs * hd];
            // SAFETY: has_avx2 holds only when the CPU reports avx2, fma and f16c; buffer
            // lengths were checked above and `o` holds (i1 - i0) * gs rows.
            unsafe {
                let kv = (
                    HeadTile::new(k, kv_row, hd, kvh, isa),
                    HeadTile::new(v, kv_row, hd, kvh, isa),
                );
                tiled::block(q, kv, ring, (i0, i1), pos0, (h0, gs), s, &mut o);
            }
            for (r, row) in o.chunks_exact(hd).enumerate() {
                let (i, h) = (i0 + r / gs, h0 + r % gs);
                // SAFETY: row i, head h of `out` is written by this task only; i < t and
                // (h + 1) * hd <= q_row, so the slice lies inside `out` (checked above).
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(optr.get().add(i * q_row + h * hd), hd)
                };
                dst.copy_from_slice(row);
            }
        });
        return;
    }
    // Only x86-64 has a SIMD tile kernel so far; `isa` still picks the row decoders.
    let n_qb = t.div_ceil(Q_BLOCK);
    parallel_for(s.n_heads * n_qb, &|task| {
        let h = task % s.n_heads;
        let qb = n_qb - 1 - task / s.n_heads;
        let i0 = qb * Q_BLOCK;
        let i1 = (i0 + Q_BLOCK).min(t);
        let kvh = h / group;
        let mut o = vec![0f32; (i1 - i0) * hd];
        let kv = (
            HeadTile::new(k, kv_row, hd, kvh, isa),
            HeadTile::new(v, kv_row, hd, kvh, isa),
        );
        block(q, kv, ring, (i0, i1), pos0, h, s, &mut o);
        for (r, i) in (i0..i1).enumerate() {
            // SAFETY: row i, head h of `out` is written by this task only; i < t and
            // (h + 1) * hd <= q_row, so the slice lies inside `out` (checked above).
            let dst =
                unsafe { std::slice::from_raw_parts_mut(optr.get().add(i * q_row + h * hd), hd) };
            dst.copy_from_slice(&o[r * hd..(r + 1) * hd]);
        }
    });
}

/// First key position a query at `pos` sees.
fn first_key(pos: usize, window: Option<usize>) -> usize {
    match window {
        Some(w) if w > 0 => (pos + 1).saturating_sub(w),
        _ => 0,
    }
}

/// One query block `rows` of head `h` (the kv head its tiles read) → `o` (`[rows, head_dim]`): the portable
/// path (x86-64 with AVX2 takes `tiled::block`).
#[allow(clippy::too_many_arguments)]
fn block(
    q: &[f32],
    (mut kt, mut vt): (HeadTile<'_>, HeadTile<'_>),
    ring: usize,
    rows: (usize, usize),
    pos0: usize,
    h: usize,
    s: &AttnShape,
    o: &mut [f32],
) {
    let hd = s.head_dim;
    let q_row = s.n_heads * hd;
    let (i0, i1) = rows;
    let n = i1 - i0;
    let mut m = vec![f32::NEG_INFINITY; n];
    let mut l = vec![0f32; n];
    let mut sc = [0f32; K_TILE];
    let lo = first_key(pos0 + i0, s.window);
    let hi = pos0 + i1; // exclusive
    let mut j0 = lo;
    while j0 < hi {
        let j1 = (j0 + K_TILE).min(hi);
        kt.load((j0..j1).map(|j| ring_row(j, ring)));
        vt.load((j0..j1).map(|j| ring_row(j, ring)));
        for r in 0..n {
            let pos = pos0 + i0 + r;
            let a = first_key(pos, s.window).max(j0);
            let b = (pos + 1).min(j1);
            if a >= b {
                continue;
            }
            let qi = &q[(i0 + r) * q_row + h * hd..(i0 + r) * q_row + (h + 1) * hd];
            let key = |j: usize| kt.row(j - j0);
            let mut tmax = f32::NEG_INFINITY;
            let mut j = a;
            while j + 4 <= b {
                let d = dot4(qi, [key(j), key(j + 1), key(j + 2), key(j + 3)]);
                for (u, &x) in d.iter().enumerate() {
                    sc[j - j0 + u] = x;
                }
                j += 4;
            }
            while j < b {
                sc[j - j0] = dot(qi, key(j));
                j += 1;
            }
            for x in &mut sc[a - j0..b - j0] {
                let mut y = *x * s.scale;
                if let Some(cap) = s.softcap {
                    y = cap * (y / cap).tanh();
                }
                *x = y;
                tmax = tmax.max(y);
            }
            let orow = &mut o[r * hd..(r + 1) * hd];
            let m_new = m[r].max(tmax);
            if m_new == f32::NEG_INFINITY {
                continue; // every score -inf (only with infinite inputs): nothing to add
            }
            if m[r] != m_new {
                let corr = if m[r] == f32::NEG_INFINITY {
                    0.0
                } else {
                    (m[r] - m_new).exp()
                };
                l[r] *= corr;
                scale_in_place(orow, corr);
                m[r] = m_new;
            }
            let mut sum = 0f32;
            for j in a..b {
                let p = (sc[j - j0] - m_new).exp();
                sum += p;
                axpy(orow, p, vt.row(j - j0));
            }
            l[r] += sum;
        }
        j0 = j1;
    }
    for r in 0..n {
        let inv = if l[r] > 0.0 { 1.0 / l[r] } else { 0.0 };
        scale_in_place(&mut o[r * hd..(r + 1) * hd], inv);
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn dot4(a: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
    b.map(|b| dot(a, b))
}

/// `o += p · v`.
fn axpy(o: &mut [f32], p: f32, v: &[f32]) {
    o.iter_mut().zip(v).for_each(|(o, v)| *o += p * v);
}

fn scale_in_place(o: &mut [f32], c: f32) {
    o.iter_mut().for_each(|o| *o *= c);
}

#[cfg(test)]
mod kv_tests;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod tiled;
