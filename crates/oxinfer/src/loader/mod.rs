//! Model file loaders: memory-mapped files, safetensors (single and sharded), and one interface
//! over them and GGUF for the architectures to fetch tensors by name.

mod names;
pub mod safetensors;
mod store;

pub(crate) use crate::mapped::Span;
pub use crate::mapped::{MappedFile, TensorView};
pub use names::Naming;
pub use store::{TensorStore, WeightSource};
