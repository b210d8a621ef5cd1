//! [`WeightMatrix`]: a borrowed `[rows, cols]` matrix of weights in any [`WeightFormat`], the
//! input of every matmul.

use crate::dequant::dequantize_row_split;
use crate::error::KernelError;
use crate::format::WeightFormat;

/// A row-major weight matrix `[rows = n_out, cols = n_in]` stored in `format`, rows contiguous
/// (`format.row_bytes(cols)` bytes each, `rows * row_bytes(cols)` bytes in all). Borrowed, never
/// copied: `data` may point straight into a memory-mapped model file.
///
/// Split formats (`Q8`, `Q4`) also carry `scales`: `rows * format.row_scale_bytes(cols)` bytes,
/// each row's block scales back to back; for every other format `scales` is empty.
#[derive(Clone, Copy, Debug)]
pub struct WeightMatrix<'a> {
    /// Storage format of the weights.
    pub format: WeightFormat,
    /// The packed weights, rows back to back.
    pub data: &'a [u8],
    /// The per-block scales of a split format, rows back to back (empty otherwise).
    pub scales: &'a [u8],
    /// Number of rows (output features).
    pub rows: usize,
    /// Number of columns (input features, weights per row).
    pub cols: usize,
}

impl<'a> WeightMatrix<'a> {
    /// Wraps `data` as a `[rows, cols]` matrix in `format`.
    ///
    /// # Errors
    /// [`KernelError::NotBlockMultiple`] when `cols` is not a multiple of the block size,
    /// [`KernelError::Overflow`] when the size overflows, [`KernelError::MatrixBytes`] when
    /// `data.len() != rows * format.row_bytes(cols)`, [`KernelError::Scales`] for a split format
    /// (use [`WeightMatrix::new_split`]).
    pub fn new(
        format: WeightFormat,
        data: &'a [u8],
        rows: usize,
        cols: usize,
    ) -> Result<Self, KernelError> {
        Self::new_split(format, data, &[], rows, cols)
    }

    /// Wraps `data` (and, for a split format, its `scales`) as a `[rows, cols]` matrix.
    ///
    /// # Errors
    /// As [`WeightMatrix::new`], and [`KernelError::Scales`] when `scales` is not
    /// `rows * format.row_scale_bytes(cols)` bytes (empty for non-split formats).
    pub fn new_split(
        format: WeightFormat,
        data: &'a [u8],
        scales: &'a [u8],
        rows: usize,
        cols: usize,
    ) -> Result<Self, KernelError> {
        let row_bytes = format.row_bytes(cols).ok_or_else(|| {
            if !cols.is_multiple_of(format.block_size()) {
                KernelError::NotBlockMultiple {
                    format,
                    n: cols,
                    block_size: format.block_size(),
                }
            } else {
                KernelError::Overflow {
                    format,
                    what: format!("a row of {cols} weights"),
                }
            }
        })?;
        let expected = row_bytes
            .checked_mul(rows)
            .ok_or_else(|| KernelError::Overflow {
                format,
                what: format!("a [{rows} x {cols}] matrix"),
            })?;
        if data.len() != expected {
            return Err(KernelError::MatrixBytes {
                format,
                rows,
                cols,
                expected,
                actual: data.len(),
            });
        }
        let want_scales = format
            .row_scale_bytes(cols)
            .and_then(|s| s.checked_mul(rows))
            .unwrap_or(usize::MAX);
        if scales.len() != want_scales {
            return Err(KernelError::Scales {
                format,
                what: format!(
                    "a [{rows} x {cols}] matrix takes {want_scales} scale bytes, but {} were given",
                    scales.len()
                ),
            });
        }
        Ok(Self {
            format,
            data,
            scales,
            rows,
            cols,
        })
    }

    /// Bytes of one row's scales (`format.row_scale_bytes(cols)`; 0 for non-split formats).
    pub fn row_scale_bytes(&self) -> usize {
        self.format.row_scale_bytes(self.cols).unwrap_or(0)
    }

    /// The scales of row `r` (empty for non-split formats).
    ///
    /// # Panics
    /// If `r >= rows`.
    pub fn row_scales(&self, r: usize) -> &'a [u8] {
        assert!(r < self.rows, "row {r} out of range");
        let sb = self.row_scale_bytes();
        &self.scales[r * sb..(r + 1) * sb]
    }

    /// Bytes of one row (`format.row_bytes(cols)`).
    pub fn row_bytes(&self) -> usize {
        // new() checked that this exists; a hand-built struct with a bad `cols` gets 0 rows' worth.
        self.format.row_bytes(self.cols).unwrap_or(0)
    }

    /// The packed bytes of row `r`.
    ///
    /// # Panics
    /// If `r >= rows`.
    pub fn row(&self, r: usize) -> &'a [u8] {
        assert!(
            r < self.rows,
            "row {r} out of range for a matrix of {} rows",
            self.rows
        );
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }

    /// Dequantizes row `r` into `dst` (`cols` f32 values).
    ///
    /// # Panics
    /// If `r >= rows` or `dst.len() != cols`, or if the struct was built by hand with
    /// inconsistent sizes (use [`WeightMatrix::new`]).
    pub fn dequantize_row_into(&self, r: usize, dst: &mut [f32]) {
        assert_eq!(dst.len(), self.cols, "destination length must equal cols");
        if let Err(e) = dequantize_row_split(self.format, self.row(r), self.row_scales(r), dst) {
            panic!("inconsistent WeightMatrix: {e}");
        }
    }

    /// Every row dequantized, `[rows, cols]` row-major f32 (what a device that does not decode
    /// the format uploads instead).
    ///
    /// # Panics
    /// As [`WeightMatrix::dequantize_row_into`].
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        for (r, dst) in out.chunks_exact_mut(self.cols.max(1)).enumerate() {
            self.dequantize_row_into(r, dst);
        }
        out
    }
}

/// Panics unless `x` holds `[t, cols]` and `y` `[t, rows]` values, the shapes of every matmul
/// (with the products checked: a wrapped size would let a kernel write past `y`).
#[track_caller]
pub(crate) fn check_io(x: usize, y: usize, t: usize, rows: usize, cols: usize) {
    assert!(
        t.checked_mul(cols) == Some(x),
        "x must be [t = {t}, cols = {cols}], not {x} values"
    );
    assert!(
        t.checked_mul(rows) == Some(y),
        "y must be [t = {t}, rows = {rows}], not {y} values"
    );
}
