//! [`KvRows`]: the keys (or the values) one layer caches, row by row in the cache's storage
//! type ([`KvType`]: f32, or f16 / bf16 / Q8_0 / Q4_0 written as each row arrives), and
//! [`KvTypes`], the pair of types a cache stores keys and values in.

pub use oxinfer_kernels::attention::KvType;
use oxinfer_kernels::attention::KvView;

/// Storage types of a cache's keys and of its values (`--cache-type-k` / `--cache-type-v`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvTypes {
    pub k: KvType,
    pub v: KvType,
}

impl KvTypes {
    /// Whether both are f32 (what every backend's device mirror holds).
    pub fn is_f32(&self) -> bool {
        self.k == KvType::F32 && self.v == KvType::F32
    }

    /// Bytes one position of a layer with rows of `width` values takes (keys and values).
    pub fn bytes_per_row(&self, width: usize) -> usize {
        self.k.row_bytes(width) + self.v.row_bytes(width)
    }
}

impl std::fmt::Display for KvTypes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "K {} / V {}", self.k, self.v)
    }
}

/// Rows of `width` values (one per cached position or ring slot), stored in one [`KvType`]:
/// as f32 values, or as `ty.row_bytes(width)` bytes each. Grows as rows are pushed.
#[derive(Clone, Debug, Default)]
pub struct KvRows {
    ty: KvType,
    /// Values per row (set by the first row written).
    width: usize,
    /// The rows of an f32 store.
    f32s: Vec<f32>,
    /// The rows of any other type.
    bytes: Vec<u8>,
}

impl KvRows {
    /// An empty store of type `ty`.
    pub fn new(ty: KvType) -> Self {
        KvRows {
            ty,
            ..KvRows::default()
        }
    }

    /// `rows` zero rows of `width` values.
    pub fn zeroed(ty: KvType, rows: usize, width: usize) -> Self {
        let mut r = KvRows::new(ty);
        r.width = width;
        match ty {
            KvType::F32 => r.f32s = vec![0.0; rows * width],
            _ => r.bytes = vec![0; rows * ty.row_bytes(width)],
        }
        r
    }

    /// The storage type.
    pub fn ty(&self) -> KvType {
        self.ty
    }

    /// Bytes of one row.
    fn row_bytes(&self) -> usize {
        self.ty.row_bytes(self.width)
    }

    /// Rows stored.
    pub fn rows(&self) -> usize {
        match self.ty {
            KvType::F32 => self.f32s.len() / self.width.max(1),
            _ => self.bytes.len() / self.row_bytes().max(1),
        }
    }

    /// Values stored (`rows × width`).
    pub fn len(&self) -> usize {
        self.rows() * self.width
    }

    /// Whether no row is stored.
    pub fn is_empty(&self) -> bool {
        self.f32s.is_empty() && self.bytes.is_empty()
    }

    /// Bytes the stored rows take.
    pub fn bytes(&self) -> usize {
        match self.ty {
            KvType::F32 => 4 * self.f32s.len(),
            _ => self.bytes.len(),
        }
    }

    /// Fixes the row width on the first write (every row of a store has the same width).
    fn set_width(&mut self, width: usize) {
        debug_assert!(self.is_empty() || self.width == width, "row width changed");
        self.width = width;
    }

    /// Appends `x` (whole rows of `width` values), converted to the storage type.
    pub fn push(&mut self, x: &[f32], width: usize) {
        self.set_width(width);
        match self.ty {
            KvType::F32 => self.f32s.extend_from_slice(x),
            ty => {
                for row in x.chunks_exact(width.max(1)) {
                    ty.quantize_row(row, &mut self.bytes);
                }
            }
        }
    }

    /// Overwrites row `r` (stored) with `x` (one row of `width` values).
    pub fn write(&mut self, r: usize, x: &[f32], width: usize) {
        self.set_width(width);
        match self.ty {
            KvType::F32 => self.f32s[r * width..(r + 1) * width].copy_from_slice(x),
            ty => {
                let rb = self.row_bytes();
                let mut row = Vec::with_capacity(rb);
                ty.quantize_row(x, &mut row);
                self.bytes[r * rb..(r + 1) * rb].copy_from_slice(&row);
            }
        }
    }

    /// Copies row `from` of `src` (same type and width) into row `to`, as stored.
    pub fn copy_row(&mut self, to: usize, src: &KvRows, from: usize) {
        debug_assert_eq!((self.ty, self.width), (src.ty, src.width));
        match self.ty {
            KvType::F32 => {
                let w = self.width;
                self.f32s[to * w..(to + 1) * w]
                    .copy_from_slice(&src.f32s[from * w..(from + 1) * w]);
            }
            _ => {
                let rb = self.row_bytes();
                self.bytes[to * rb..(to + 1) * rb]
                    .copy_from_slice(&src.bytes[from * rb..(from + 1) * rb]);
            }
        }
    }

    /// Keeps the first `rows` rows.
    pub fn truncate_rows(&mut self, rows: usize) {
        self.f32s.truncate(rows * self.width);
        self.bytes.truncate(rows * self.row_bytes());
    }

    /// Drops every row, keeping the allocation.
    pub fn clear(&mut self) {
        self.f32s.clear();
        self.bytes.clear();
    }

    /// The rows as the attention kernels read them.
    pub fn view(&self) -> KvView<'_> {
        match self.ty {
            KvType::F32 => KvView::F32(&self.f32s),
            ty => KvView::Packed {
                ty,
                data: &self.bytes,
            },
        }
    }

    /// The rows of an f32 store (`None` for the other types).
    pub fn as_f32(&self) -> Option<&[f32]> {
        (self.ty == KvType::F32).then_some(self.f32s.as_slice())
    }

    /// Every row decoded to f32, `[rows, width]`.
    pub fn to_f32(&self) -> Vec<f32> {
        self.view().to_f32(0..self.rows(), self.width)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pushed, overwritten, copied and truncated rows read back as their stored values in
    /// every type; byte counts are the type's.
    #[test]
    fn rows_keep_their_values_in_every_type() {
        let w = 40;
        let row = |s: f32| -> Vec<f32> { (0..w).map(|i| s * (i as f32 - 20.0) / 20.0).collect() };
        for ty in KvType::ALL {
            let mut r = KvRows::new(ty);
            r.push(&[row(1.0), row(2.0), row(3.0)].concat(), w);
            assert_eq!(
                (r.rows(), r.len(), r.bytes()),
                (3, 3 * w, 3 * ty.row_bytes(w))
            );
            r.write(1, &row(-1.0), w);
            let mut z = KvRows::zeroed(ty, 2, w);
            z.copy_row(0, &r, 1);
            r.truncate_rows(2);
            let got = r.to_f32();
            let tol = if ty == KvType::Q4_0 { 0.15 } else { 0.02 };
            for (g, want) in got.iter().zip([row(1.0), row(-1.0)].concat()) {
                assert!((g - want).abs() <= tol, "{ty}: {g} vs {want}");
            }
            assert_eq!(z.to_f32()[..w], got[w..], "{ty}: copied as stored");
            assert!(z.to_f32()[w..].iter().all(|&x| x == 0.0));
            r.clear();
            assert!(r.is_empty() && r.rows() == 0);
        }
    }
}
