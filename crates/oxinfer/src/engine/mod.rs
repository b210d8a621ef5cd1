//! The engine front ends call: a loaded [`Model`] (weights, tokenizer, chat template),
//! sampling, the batched generation loop, chat sessions and perplexity.

pub mod batch;
pub mod generate;
mod generation_types;
pub mod grammar;
pub mod kl;
pub mod media;
mod model;
pub mod perplexity;
pub mod sampler;
mod session;
pub mod speculative;
pub mod stop;
pub mod thinking;
pub mod tool_calls;

pub use batch::{BatchConfig, BatchGenerator, SeqEvent, SeqRequest};
pub use generate::{GenerateOptions, Generation, StopReason, Timings, TokenEvent};
pub use kl::KlStats;
pub use model::{LoadOptions, Model, ModelInfo, Projector};
pub use perplexity::Perplexity;
pub use sampler::{Sampler, SamplingParams};
pub use session::Session;
pub use speculative::Speculation;
