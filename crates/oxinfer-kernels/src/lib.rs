//! Weight formats and CPU kernels of oxinfer (no model knowledge).
//!
//! - [`mod@format`]: the one weight-format enum ([`WeightFormat`]): float formats and llama.cpp's
//!   block-quantized types, with their GGML type ids and block geometry.
//! - [`dequant`]: scalar reference dequantization of a row of weights ([`dequantize_row`]),
//!   bit-exact with llama.cpp / the `gguf` Python package.
//! - [`mod@matmul`]: `y = x · Wᵀ` with f32 activations and weights in any [`WeightFormat`]
//!   ([`matmul()`]), parallel over output rows.
//! - [`quantize`]: f32 weights → the split formats `Q8`/`Q4` or BF16 ([`quantize::quantize_matrix`],
//!   parallel).
//! - [`act`]: gated MLP activations (SiLU, tanh-GELU) times the up projection.
//! - [`attention`]: fused causal attention (query blocks × key tiles, online softmax).
//! - [`softmax`]: the scaled softmax of one row of attention scores (AVX2 `exp`).
//! - [`packed`]: weights repacked into groups of eight interleaved rows and the GEMM over
//!   them ([`packed::PackedMatrix`], [`packed::matmul_packed`]).
//! - [`matrix`]: the borrowed weight matrix every matmul takes ([`WeightMatrix`]).
//! - [`pool`]: the persistent thread pool and the thread count ([`set_num_threads`]).
//! - [`dispatch`]: what runs where: the kernel set ([`kernel_set`]), the CPU's instruction set
//!   ([`dispatch::detected_isa`]) and every `OXINFER_*` switch, documented in one table.
//! - [`huge`]: byte buffers on transparent huge pages for the weights a decode step streams.
//! - [`tuning`]: kernel variants timed on the running CPU to choose between them, on
//!   [`synthetic`] weights.
#![warn(missing_docs)]

pub mod act;
pub mod attention;
pub mod dequant;
pub mod dispatch;
pub mod error;
pub mod fast;
pub mod format;
pub mod huge;
pub mod matmul;
pub mod matrix;
pub mod membw;
pub mod packed;
pub mod pool;
pub mod profile;
pub mod q8;
pub mod quantize;
pub mod softmax;
pub mod synthetic;
pub mod tuning;
pub mod two_term;
pub mod vecdot;

#[cfg(test)]
mod test_util;

pub use dequant::{dequantize_row, dequantize_row_split};
pub use dispatch::{kernel_set, KernelSet};
pub use error::KernelError;
pub use format::WeightFormat;
pub use matmul::{matmul, matmul_reference};
pub use matrix::WeightMatrix;
pub use pool::{num_threads, set_num_threads};
