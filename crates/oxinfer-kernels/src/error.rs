//! Errors of the kernel crate.

use crate::format::WeightFormat;

/// What went wrong in a kernel call: always a size or format mismatch, with the numbers.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum KernelError {
    /// A row length (in weights) that is not a whole number of blocks of its format.
    #[error("{format}: a row of {n} weights is not a multiple of the block size {block_size}")]
    NotBlockMultiple {
        /// The weight format.
        format: WeightFormat,
        /// Row length in weights.
        n: usize,
        /// Weights per block of `format`.
        block_size: usize,
    },
    /// A byte size that does not fit in `usize`.
    #[error("{format}: the byte size of {what} overflows usize")]
    Overflow {
        /// The weight format.
        format: WeightFormat,
        /// What was being sized, e.g. "a row of 12 weights".
        what: String,
    },
    /// Source bytes of the wrong length for the destination row.
    #[error(
        "{format}: a row of {n} weights takes {expected} bytes, but {actual} bytes were given"
    )]
    RowBytes {
        /// The weight format.
        format: WeightFormat,
        /// Row length in weights (the destination length).
        n: usize,
        /// Bytes the row takes in `format`.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A weight matrix whose data length does not match `rows × row_bytes(cols)`.
    #[error(
        "{format} matrix [{rows} x {cols}] takes {expected} bytes, but {actual} bytes were given"
    )]
    MatrixBytes {
        /// The weight format.
        format: WeightFormat,
        /// Rows (output features).
        rows: usize,
        /// Columns (input features).
        cols: usize,
        /// Bytes the matrix takes.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A split format (`Q8`, `Q4`) used where only one buffer was given, or its scales buffer
    /// has the wrong length.
    #[error("{format}: {what}")]
    Scales {
        /// The weight format.
        format: WeightFormat,
        /// What is wrong, with the numbers.
        what: String,
    },
    /// A weight that is NaN or infinite where a finite one is needed (quantization).
    #[error("{format}: weight {index} (row-major) is {value}, not finite: cannot quantize")]
    NonFinite {
        /// The target format.
        format: WeightFormat,
        /// Index of the value (row-major within its row or matrix).
        index: usize,
        /// The value, as text (`NaN`, `inf`, `-inf`).
        value: String,
    },
}
