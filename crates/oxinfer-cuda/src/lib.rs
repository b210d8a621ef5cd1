//! CUDA backend for oxinfer.
//!
//! Everything CUDA-related is loaded at run time (the driver, NVRTC and cuBLAS through
//! `cudarc`'s dynamic loading): the crate builds anywhere, and on a machine without CUDA
//! [`CudaProvider::probe`] says so instead of failing. Kernels are CUDA C++ compiled by NVRTC
//! for the device's compute capability when a backend opens.
//!
//! What runs on the device ([`CudaBackend`]):
//! - matmul with bf16/f16 weights through cuBLAS (`cublasGemmEx`, f32 accumulation);
//! - matmul with GGUF block-quantized weights (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, Q8_K,
//!   and the IQ / TQ / MXFP4 types, whose kernels are programs of their own: `kernels/iq.cu`,
//!   `kernels/iq_i8.cu`), kept quantized on the device and decoded inside the tile of a
//!   tensor-core (mma) GEMM;
//! - fused flash-style attention with GQA, sliding window and soft-cap;
//! - `k × k` convolutions as an implicit GEMM (f32 FMA, or bf16 tensor cores with
//!   `OXINFER_CUDA_CONV=mma`) that gathers its input neighbourhoods itself and applies a
//!   GroupNorm / LayerNorm (+ SiLU) on the way in (`conv.rs`);
//! - whole model plans with the hidden state and each sequence's KV cache resident on the
//!   device, for the ops it implements (`stack.rs` lowers, `stack_run.rs` runs, `kv.rs` holds
//!   the caches; [`oxinfer::backend::plan_run`]), prefill and decode: decode steps multiply
//!   through quantized GEMV kernels that read the GGUF blocks directly (`kernels/gemv.cu`),
//!   attend with split-K flash-decoding, fuse the small ops around the products (norm + int8
//!   quantization, bias + QK-norm + RoPE + KV append, activation + quantization) and run as
//!   CUDA graphs (`graph`).
//!
//! Modules, each importing only those before it: `nvrtc` and `kernels` (the CUDA sources, their
//! compilation and function handles), `iq_grids` (the generated IQ lookup-table header's text), `graph` (decode steps recorded, compared and replayed as
//! CUDA graphs), `kernel_profile` (per-kernel device time, `OXINFER_CUDA_PROFILE=kernels`), `gpu` (context, stream, buffers, transfers), `matrix` (uploaded weights), `kv` (device KV caches), `ops` (one launcher per kernel: the only place
//! that builds kernel arguments), `timing`, `gemm` / `conv` / `stack` / `stack_run` (host-side
//! logic of each op), `backend`, `probe`.
//!
//! Quantized matmuls quantize their activations to int8 blocks exactly as the CPU kernels do and
//! multiply f16 values (dequantized weights, `d·q` activations) on the tensor cores, so device
//! and CPU results agree to f16 rounding. Weights are uploaded once, on a layer's first use;
//! activations travel per call.

mod backend;
mod conv;
mod decode_attention;
mod encoder;
mod gemm;
mod gemv;
mod gpu;
mod graph;
pub mod iq_grids;
mod kernel_profile;
mod kernels;
mod kv;
mod matrix;
mod nvrtc;
mod ops;
mod probe;
mod stack;
mod stack_params;
mod stack_run;
mod stack_switches;
mod timing;

pub use backend::CudaBackend;
pub use conv::ConvPath;
pub use gemm::QuantPath;
pub use kernels::{compile_ptx, compile_unit_ptx, IQ_UNITS, KERNEL_UNITS};
pub use probe::{probe, CudaProvider};
