//! Portable GPU backend for oxinfer on wgpu: Vulkan (Linux, Windows, Android; Mesa's lavapipe
//! in CI), Metal (macOS), DX12 (Windows), with WGSL compute shaders.
//!
//! What runs on the device ([`WgpuBackend`]):
//! - matmuls reading the weights in their storage format: F32, F16, BF16, GGUF Q4_0, Q4_1,
//!   Q5_0, Q5_1, Q8_0, Q4_K, Q6_K and oxinfer's split Q8/Q4 (`shaders/decode.wgsl`), and for one
//!   activation row (decode) of the GGUF block formats a matvec that reads each weight byte once
//!   (`shaders/matvec.wgsl`, `shaders/vecdot.wgsl`), over f32
//!   inputs (the exact path's sums), or with `OXINFER_WGPU_INT8_INPUTS=1` over inputs rounded
//!   through int8 blocks as the CPU's integer kernels do (`shaders/quant.wgsl`,
//!   [`int8_inputs`]);
//! - flash-style attention with causal mask, GQA, sliding window and logit soft-cap (key tiles
//!   and their probabilities in workgroup memory, online softmax);
//! - the gated MLP, and whole model plans with the hidden state and each sequence's KV cache
//!   resident on the device (`stack.rs` reads the plan's layer description, `stack_run.rs`
//!   records one submission per pass, `kv.rs` holds the caches): RMSNorm (pre, post, per-head),
//!   biases, RoPE (interleaved or halves), residual adds, SiLU/tanh-GELU gates, final soft-cap;
//! - whole bidirectional encoder passes (`encoder.rs`: BERT, XLM-RoBERTa, NomicBERT, ModernBERT
//!   plans), with LayerNorm, GELU (erf and tanh), rotary tables and windowed attention within
//!   each sequence of a batch.
//!
//! Plain WGSL only (no `shader-f16`, no subgroups): every adapter runs the same kernels. The
//! matmul takes up to 8 activation rows per weight read; `OXINFER_WGPU_PROFILE=1` times each
//! kernel (`profile`).
//!
//! Modules, each importing only those before it: `kernels` (WGSL sources and one dispatch
//! builder per kernel), `profile` (timestamps and host times per submission), `gpu` (device,
//! buffers, submission), `matrix` (uploaded weights and the matmul), `kv`, `stack`,
//! `stack_run`, `encoder` (whole encoder passes), `backend`, `probe`.

mod backend;
mod encoder;
mod gpu;
mod kernels;
mod kv;
mod matrix;
mod probe;
mod profile;
mod single;
mod stack;
mod stack_run;

pub use backend::WgpuBackend;
pub use kernels::FORMATS;
pub use matrix::int8_inputs;
pub use probe::{probe, WgpuProvider};
pub use stack::unsupported_op;
