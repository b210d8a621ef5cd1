//! How one attention call is cut into tasks and put back together.
//!
//! A *block* is one kv head with its query heads (all of them, or an equal share when that
//! gives idle threads work) over a block of up to [`Q_BLOCK`] queries. Its keys are reduced
//! in *segments* of [`SEG`] keys at fixed positions (segment `k` holds keys
//! `k·SEG .. (k+1)·SEG`), each into a [`Partial`], merged in key order. Two ways to run that,
//! with the same arithmetic and so the same bits:
//!
//! - one task per block, walking its segments (prefill: blocks are plenty);
//! - one task per (block, segment), the partial states kept, then one task per block merging
//!   them (decode and short verify passes, where blocks alone would leave threads idle: the
//!   keys are split over threads instead, flash-decoding style, so each kv head's tiles are
//!   decoded once per step for all of its query heads).
//!
//! A kv head's query heads are shared out over several blocks only when even the segments
//! leave threads idle (short contexts), since each such block reads the tiles again.

use super::kv_tile::HeadTile;
use super::partial::Partial;
use super::{first_key, AttnShape, Isa, KvView, OutPtr, K_TILE, Q_BLOCK};
use crate::pool::{parallel_for, pool_threads};
use std::sync::OnceLock;

/// Keys per segment; segments start at key positions that are multiples of it.
pub(super) const SEG: usize = 4 * K_TILE;

/// Most floats the partial states of a split call may take (16 MiB); a larger call walks its
/// segments in one task per block instead.
const SPLIT_MAX_FLOATS: usize = 4 << 20;

/// One attention call, checked by `attention_kv_isa`.
pub(super) struct Call<'a> {
    /// Queries, `[t, n_heads * head_dim]`.
    pub q: &'a [f32],
    /// Keys and values (rows of `n_kv_heads * head_dim`).
    pub kv: (KvView<'a>, KvView<'a>),
    /// New queries.
    pub t: usize,
    /// Position of the first new query.
    pub pos0: usize,
    /// Rows of the ring the keys and values live in (0: plain layout).
    pub ring: usize,
    /// Heads, width, scale, window and soft cap.
    pub s: &'a AttnShape,
    /// The kernels to run.
    pub isa: Isa,
    /// The output, `[t, n_heads * head_dim]` (checked long enough).
    pub out: OutPtr,
}

/// A kv head's query heads `h0 .. h0 + gs` over queries `i0 .. i1`.
#[derive(Clone, Copy, Debug)]
struct Block {
    kvh: usize,
    h0: usize,
    gs: usize,
    i0: usize,
    i1: usize,
}

impl Block {
    /// Rows of its state: one per (query, head).
    fn rows(&self) -> usize {
        (self.i1 - self.i0) * self.gs
    }
}

impl Call<'_> {
    /// Query heads per kv head.
    fn group(&self) -> usize {
        self.s.n_heads / self.s.n_kv_heads
    }

    /// Block `b` of the split with `shares` blocks per kv head and query block: blocks of the
    /// last (longest) queries first, so the pool stays balanced under the causal mask.
    fn block(&self, b: usize, shares: usize) -> Block {
        let n_qb = self.t.div_ceil(Q_BLOCK);
        let per_qb = self.s.n_kv_heads * shares;
        let (kvh, share) = (b % per_qb / shares, b % shares);
        let gs = self.group() / shares;
        let i0 = (n_qb - 1 - b / per_qb) * Q_BLOCK;
        Block {
            kvh,
            h0: kvh * self.group() + share * gs,
            gs,
            i0,
            i1: (i0 + Q_BLOCK).min(self.t),
        }
    }

    /// Segments holding keys some query `i0 .. i1` sees.
    fn segments(&self, i0: usize, i1: usize) -> std::ops::Range<usize> {
        let lo = first_key(self.pos0 + i0, self.s.window);
        lo / SEG..(self.pos0 + i1).div_ceil(SEG)
    }

    /// Tile readers of kv head `kvh`'s keys and values.
    fn tiles(&self, kvh: usize) -> (HeadTile<'_>, HeadTile<'_>) {
        let (hd, width) = (self.s.head_dim, self.s.n_kv_heads * self.s.head_dim);
        (
            HeadTile::new(self.kv.0, width, hd, kvh, self.isa),
            HeadTile::new(self.kv.1, width, hd, kvh, self.isa),
        )
    }

    /// Segment `k` of block `bl` into `st` (cleared first).
    fn segment(
        &self,
        tiles: (&mut HeadTile<'_>, &mut HeadTile<'_>),
        bl: Block,
        k: usize,
        st: &mut Partial,
    ) {
        st.clear();
        let (heads, i0, i1) = ((bl.h0, bl.gs), bl.i0, bl.i1);
        let keys = (k * SEG, (k + 1) * SEG);
        let (q, s, pos0, ring) = (self.q, self.s, self.pos0, self.ring);
        #[cfg(target_arch = "x86_64")]
        if self.isa.has_avx2() {
            // SAFETY: has_avx2 holds only when the CPU reports avx2, fma and f16c; the
            // buffers behind q and the tiles hold the rows the shape says (checked by
            // attention_kv_isa), and st holds (i1 - i0) * gs rows.
            unsafe {
                super::tiled::segment(q, tiles, ring, (i0, i1), pos0, heads, s, keys, st);
            }
            return;
        }
        super::portable::segment(q, tiles, ring, (i0, i1), pos0, heads, s, keys, st);
    }

    /// Writes block `bl`'s rows of `out` from its merged state.
    fn write(&self, st: &Partial, bl: Block) {
        let hd = self.s.head_dim;
        let q_row = self.s.n_heads * hd;
        for r in 0..bl.rows() {
            let (i, h) = (bl.i0 + r / bl.gs, bl.h0 + r % bl.gs);
            // SAFETY: row i, head h of `out` is written by this block only; i < t and
            // (h + 1) * hd <= q_row, so the slice lies inside `out` (checked by the caller).
            let dst = unsafe {
                std::slice::from_raw_parts_mut(self.out.get().add(i * q_row + h * hd), hd)
            };
            st.write_row(r, dst);
        }
    }
}

/// Runs `c` on the thread pool (module docs: which split, and why both give the same bits).
pub(super) fn run(c: &Call<'_>) {
    let (hd, group) = (c.s.head_dim, c.group());
    let want = 2 * pool_threads();
    let segments = |bl: Block| c.segments(bl.i0, bl.i1);
    // Share a kv head's query heads out only while even one task per segment leaves a thread
    // with nothing to do; the share must divide the group. (A shared-out head re-reads the
    // tiles and gives up the loads its rows shared: splitting a 3-head group in three to feed
    // 4 task slots on 2 threads cost 1.6x the time of 3 tasks, measured.)
    let blocks_of = |shares: usize| c.s.n_kv_heads * shares * c.t.div_ceil(Q_BLOCK);
    let tasks_of = |shares: usize| -> usize {
        (0..blocks_of(shares))
            .map(|b| segments(c.block(b, shares)).len())
            .sum()
    };
    let mut shares = 1;
    while shares < group && tasks_of(shares) < pool_threads() {
        shares += 1;
        while !group.is_multiple_of(shares) {
            shares += 1;
        }
    }
    let blocks = blocks_of(shares);
    let mut tasks = Vec::new(); // (block, segment)
    let mut first = Vec::with_capacity(blocks + 1);
    let mut floats = 0usize;
    for b in 0..blocks {
        let bl = c.block(b, shares);
        first.push(tasks.len());
        let segs = segments(bl);
        floats = floats.saturating_add(segs.len() * bl.rows() * (hd + 2));
        tasks.extend(segs.map(|k| (b, k)));
    }
    first.push(tasks.len());
    let split = blocks < want && tasks.len() > blocks && floats <= SPLIT_MAX_FLOATS;
    if !split {
        parallel_for(blocks, &|b| {
            let bl = c.block(b, shares);
            let (mut kt, mut vt) = c.tiles(bl.kvh);
            let (mut total, mut part) = (Partial::new(bl.rows(), hd), Partial::new(bl.rows(), hd));
            for k in segments(bl) {
                c.segment((&mut kt, &mut vt), bl, k, &mut part);
                total.merge(&part);
            }
            c.write(&total, bl);
        });
        return;
    }
    let parts: Vec<OnceLock<Partial>> = tasks.iter().map(|_| OnceLock::new()).collect();
    parallel_for(tasks.len(), &|n| {
        let (b, k) = tasks[n];
        let bl = c.block(b, shares);
        let (mut kt, mut vt) = c.tiles(bl.kvh);
        let mut part = Partial::new(bl.rows(), hd);
        c.segment((&mut kt, &mut vt), bl, k, &mut part);
        // Each task sets its own slot once.
        let _ = parts[n].set(part);
    });
    parallel_for(blocks, &|b| {
        let bl = c.block(b, shares);
        let mut total = Partial::new(bl.rows(), hd);
        for part in &parts[first[b]..first[b + 1]] {
            total.merge(part.get().expect("every segment task ran"));
        }
        c.write(&total, bl);
    });
}
