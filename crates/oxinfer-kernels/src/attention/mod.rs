//! Fused causal attention on the CPU: tiled over query blocks and key tiles with an online
//! softmax (the flash-attention scheme), so scores never exist as a whole `[t, n_keys]` matrix
//! and each key/value tile is read once per block of queries instead of once per query.
//!
//! **A row's result does not depend on the rows it runs with.** Keys are reduced in a fixed
//! grid of absolute positions: tiles of `K_TILE` keys start at multiples of `K_TILE`,
//! segments of `schedule::SEG` keys at multiples of `SEG`. Within a segment a row runs the
//! online softmax tile by tile, masked keys contributing exactly 0 to its max, its sum and its
//! `p · V`; the segments' partial results are then merged in key order
//! (`partial::Partial::merge`). So a query gives the same bits in a 1-row decode pass, a
//! many-row prefill or a speculative verify pass, in the plain and the ring layout, whichever
//! way the call is split over threads (speculative decoding and prefix reuse rely on it).
//!
//! Work is split by `schedule::run`: one task per (kv head, query block), longest blocks
//! first, each taking every query head of its kv head (GQA heads share each key/value row they
//! load); when that leaves threads idle (decode, short verify passes), one task per (kv head,
//! query block, segment) instead, flash-decoding style. The AVX2+FMA kernel (`tiled`) runs
//! where the CPU has it ([`crate::dispatch::detected_isa`]), the portable one (`portable`)
//! elsewhere. The reference (one full softmax per query row) lives in the `oxinfer` crate's nn
//! layer and is what `OXINFER_KERNELS=scalar` runs; tests compare the two.
//!
//! Keys and values may be stored in a [`KvType`] other than f32 (a quantized KV cache,
//! [`attention_kv`]): each task then decodes the tiles it reads, one kv head's slice at a time
//! ([`kv_tile`]), with the SIMD decoders of [`kv_dequant`], once for all the query heads and
//! queries of the task. Rows stored in a block type are rotated first ([`kv_rotation`], by
//! the caller that stores them and the one that attends over them).

use crate::dispatch::{detected_isa, Isa};

pub mod full_f32;
pub mod kv_dequant;
pub mod kv_rotation;
pub mod kv_tile;
pub mod kv_type;
mod partial;
mod portable;
mod schedule;

pub use kv_rotation::{kv_rotation, rotate_chunks, KvRole};
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
/// Keys per tile; tiles start at key positions that are multiples of it.
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
    let call = schedule::Call {
        q,
        kv: (k, v),
        t,
        pos0,
        ring,
        s,
        isa,
        out: OutPtr(out.as_mut_ptr()),
    };
    schedule::run(&call);
}

/// First key position a query at `pos` sees.
fn first_key(pos: usize, window: Option<usize>) -> usize {
    match window {
        Some(w) if w > 0 => (pos + 1).saturating_sub(w),
        _ => 0,
    }
}

#[cfg(test)]
mod kv_tests;
#[cfg(test)]
mod row_tests;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod tiled;
