//! oxinfer in the browser: a wasm-bindgen module for `wasm32-unknown-unknown` that loads a
//! GGUF model from bytes, tokenizes with the model's own tokenizer and chat template, and
//! generates a forward pass at a time so that its caller (a Web Worker, `web/worker.js`) can
//! stream tokens and cancel between passes.
//!
//! Layers: [`chunks`] assembles a file from pieces, [`options`] reads the JS generation
//! options, [`session`] drives the engine's one generation loop, and `bindings` is the JS
//! API over them. Everything but `bindings` is plain Rust, tested natively; the module is built
//! with `scripts/build-web.sh` and tested in headless Chromium (docs/wasm.md).
//!
//! Single-threaded: the kernels run on the calling thread (see docs/wasm.md for why).

mod bindings;
pub mod chunks;
pub mod error;
pub mod options;
pub mod session;

pub use error::{Result, WebError};
pub use options::GenerateSettings;
pub use session::{ChatEngine, StreamEvent, Summary};
