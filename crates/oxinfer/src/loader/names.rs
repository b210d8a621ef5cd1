//! Which spelling of tensor names a weight file uses. The names themselves are model knowledge
//! and live in [`crate::arch::names`] (the engine's own GGUF spelling and transformers').

/// Which spelling a weight file uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    Gguf,
    Hf,
}
