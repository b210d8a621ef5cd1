//! How the attention kernels read cached keys and values: a [`KvView`] of the whole cache
//! (f32 rows, or rows stored in a [`KvType`]) and, per task, a [`HeadTile`]: one kv head's
//! slice of the rows of one key tile as f32. f32 rows are read in place; stored rows are
//! decoded tile by tile into a small scratch ([`super::kv_dequant`]), so a quantized cache is
//! never expanded as a whole and each tile is decoded once for every query of the task.

use super::kv_dequant::dequant;
use super::kv_type::KvType;
use super::K_TILE;
use crate::dispatch::Isa;

/// Keys or values of one attention call: `rows` rows of `width` (`n_kv_heads * head_dim`)
/// values each.
#[derive(Clone, Copy, Debug)]
pub enum KvView<'a> {
    /// `[rows, width]` f32 values, row-major.
    F32(&'a [f32]),
    /// Rows of `ty.row_bytes(width)` bytes each (a row of a block type padded to whole blocks).
    Packed {
        /// Storage type of every row.
        ty: KvType,
        /// The rows back to back.
        data: &'a [u8],
    },
}

impl<'a> KvView<'a> {
    /// Rows held, for rows of `width` values.
    pub fn rows(&self, width: usize) -> usize {
        match *self {
            KvView::F32(x) => x.len() / width.max(1),
            KvView::Packed { ty, data } => data.len() / ty.row_bytes(width).max(1),
        }
    }

    /// The storage type.
    pub fn ty(&self) -> KvType {
        match *self {
            KvView::F32(_) => KvType::F32,
            KvView::Packed { ty, .. } => ty,
        }
    }

    /// The rows before row `r` and the rows from it on, for rows of `width` values.
    ///
    /// # Panics
    /// When the view holds fewer than `r` rows.
    pub fn split_at_row(self, r: usize, width: usize) -> (KvView<'a>, KvView<'a>) {
        match self {
            KvView::F32(x) => {
                let (a, b) = x.split_at(r * width);
                (KvView::F32(a), KvView::F32(b))
            }
            KvView::Packed { ty, data } => {
                let (a, b) = data.split_at(r * ty.row_bytes(width));
                (
                    KvView::Packed { ty, data: a },
                    KvView::Packed { ty, data: b },
                )
            }
        }
    }

    /// The values of an f32 view (`None` for the other types).
    pub fn as_f32(self) -> Option<&'a [f32]> {
        match self {
            KvView::F32(x) => Some(x),
            KvView::Packed { .. } => None,
        }
    }

    /// Whether the view holds no row.
    pub fn is_empty(&self) -> bool {
        match *self {
            KvView::F32(x) => x.is_empty(),
            KvView::Packed { data, .. } => data.is_empty(),
        }
    }

    /// Rows `rows` (indices into the view), each cut to its first `width` values, as f32,
    /// back to back (the scalar reference and tests read a cache this way).
    pub fn to_f32(&self, rows: impl Iterator<Item = usize>, width: usize) -> Vec<f32> {
        let mut out = Vec::new();
        let ty = self.ty();
        let mut row = vec![0f32; ty.padded(width)];
        for r in rows {
            match *self {
                KvView::F32(x) => out.extend_from_slice(&x[r * width..(r + 1) * width]),
                KvView::Packed { ty, data } => {
                    let rb = ty.row_bytes(width);
                    super::kv_dequant::scalar(ty, &data[r * rb..(r + 1) * rb], &mut row);
                    out.extend_from_slice(&row[..width]);
                }
            }
        }
        out
    }
}

/// One kv head's slice of the rows of a key tile, as f32 (`head_dim` values per row).
pub(super) struct HeadTile<'a> {
    view: KvView<'a>,
    width: usize,
    hd: usize,
    kvh: usize,
    isa: Isa,
    /// Where row `u` of the tile starts: in the f32 view, or in `buf`.
    at: [usize; K_TILE],
    /// Decoded rows (`K_TILE * hd`) of a stored view.
    buf: Vec<f32>,
    /// The blocks covering a head that does not start or end on a block boundary.
    tmp: Vec<f32>,
}

impl<'a> HeadTile<'a> {
    /// A tile reader of kv head `kvh` (heads of `hd` values in rows of `width`).
    pub(super) fn new(view: KvView<'a>, width: usize, hd: usize, kvh: usize, isa: Isa) -> Self {
        let packed = matches!(view, KvView::Packed { .. });
        HeadTile {
            view,
            width,
            hd,
            kvh,
            isa,
            at: [0; K_TILE],
            buf: if packed {
                vec![0f32; K_TILE * hd]
            } else {
                Vec::new()
            },
            tmp: Vec::new(),
        }
    }

    /// Makes rows `rows` of the view (at most [`K_TILE`]) the tile's rows `0 ..`.
    pub(super) fn load(&mut self, rows: impl Iterator<Item = usize>) {
        let (hd, kvh) = (self.hd, self.kvh);
        match self.view {
            KvView::F32(_) => {
                for (u, r) in rows.enumerate() {
                    self.at[u] = r * self.width + kvh * hd;
                }
            }
            KvView::Packed { ty, data } => {
                let (blk, bb) = (ty.block(), ty.format().block_bytes());
                let rb = ty.row_bytes(self.width);
                let (b0, b1) = (kvh * hd / blk, ((kvh + 1) * hd).div_ceil(blk));
                let off = kvh * hd - b0 * blk;
                let aligned = off == 0 && (b1 - b0) * blk == hd;
                for (u, r) in rows.enumerate() {
                    let src = &data[r * rb + b0 * bb..r * rb + b1 * bb];
                    let dst = &mut self.buf[u * hd..(u + 1) * hd];
                    if aligned {
                        dequant(ty, src, dst, self.isa);
                    } else {
                        self.tmp.resize((b1 - b0) * blk, 0.0);
                        dequant(ty, src, &mut self.tmp, self.isa);
                        dst.copy_from_slice(&self.tmp[off..off + hd]);
                    }
                    self.at[u] = u * hd;
                }
            }
        }
    }

    /// Row `u` of the tile (`head_dim` values).
    #[inline]
    pub(super) fn row(&self, u: usize) -> &[f32] {
        let at = self.at[u];
        match self.view {
            KvView::F32(x) => &x[at..at + self.hd],
            KvView::Packed { .. } => &self.buf[at..at + self.hd],
        }
    }
}
