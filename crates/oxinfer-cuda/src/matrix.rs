//! [`DeviceMatrix`]: a weight matrix uploaded to the device, with its decodings kept beside it.

use crate::gpu::DevBuf;
use oxinfer_kernels::WeightFormat;
use std::sync::OnceLock;

/// A weight matrix in device memory, in its file's format, and (quantized formats on the
/// dequantize + cuBLAS path) its f16 decoding, made on first use and kept.
pub(crate) struct DeviceMatrix {
    /// Unique in this process ([`oxinfer::backend::next_upload_id`], never reused after a
    /// matrix is dropped): identifies the loaded model its pass descriptions come from
    /// (`stack_params::key`).
    pub id: u64,
    pub format: WeightFormat,
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    pub row_bytes: usize,
    pub buf: DevBuf,
    /// The f16 decoding `[rows, cols]`, kept when `gemm::keep_decoding` says so (batched
    /// decoding, or `OXINFER_CUDA_F16_CACHE=1`) and memory is to spare; otherwise empty, and
    /// decoded into scratch space for every product.
    pub f16: OnceLock<DevBuf>,
    /// The f32 decoding for the exact-product path, kept under the same rules.
    pub f32: OnceLock<DevBuf>,
}

impl DeviceMatrix {
    /// `rows × cols` weights in `format` (`row_bytes` per row) already uploaded into `buf`.
    pub fn new(
        format: WeightFormat,
        rows: usize,
        cols: usize,
        row_bytes: usize,
        buf: DevBuf,
    ) -> Self {
        DeviceMatrix {
            id: oxinfer::backend::next_upload_id(),
            format,
            rows,
            cols,
            row_bytes,
            buf,
            f16: OnceLock::new(),
            f32: OnceLock::new(),
        }
    }
}
