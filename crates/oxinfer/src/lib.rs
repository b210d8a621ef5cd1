//! oxinfer: a local inference engine in pure Rust.
//!
//! Layers, bottom to top: [`mapped`] files, [`loader`]/[`gguf`] and [`config`] read model files;
//! `oxinfer-kernels` holds the weight formats and CPU kernels; [`plan`] is the one description of
//! a model that the CPU and every [`backend`] execute; [`nn`] composes kernels into blocks;
//! [`arch`] describes each model family as a plan of blocks; [`engine`] (tokenizer, chat
//! templates, sampling, generation) is what front ends call.

pub mod arch;
pub mod backend;
pub mod chat_template;
pub mod clock;
pub mod config;
pub mod embed;
pub mod engine;
pub mod error;
pub mod gguf;
pub mod hub;
pub mod loader;
pub mod mapped;
pub mod media;
pub mod nn;
pub mod plan;
pub mod quant;
pub mod tokenizer;
pub mod tuning;

pub use chat_template::ChatMessage;
pub use config::ModelConfig;
pub use engine::{
    GenerateOptions, Generation, LoadOptions, Model, Projector, SamplingParams, Session,
};

pub use error::{Error, LoadError, Result};
pub use tokenizer::Tokenizer;
