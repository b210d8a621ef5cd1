//! Model file loaders: memory-mapped files, safetensors (single and sharded), and one interface
//! over them and GGUF for the architectures to fetch tensors by name.

mod mapped;
pub mod safetensors;
mod names;
mod store;

pub use mapped::{MappedFile, TensorView};
pub use names::Naming;
pub use store::{TensorStore, WeightSource};
