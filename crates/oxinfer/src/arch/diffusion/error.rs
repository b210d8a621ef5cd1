//! The one error type of the diffusion pipeline; every message names the file, tensor, field or
//! argument at fault.

use crate::error::LoadError;
use crate::nn::ConvError;
use std::path::PathBuf;

/// What can go wrong loading or running a diffusion pipeline.
#[derive(thiserror::Error, Debug)]
pub enum DiffusionError {
    /// A weight file could not be read, or a tensor is missing or misshapen.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A component folder or file is missing.
    #[error("{path}: missing ({what})")]
    Missing { path: PathBuf, what: String },
    /// A config file is malformed or a field is missing, has the wrong type or an unsupported value.
    #[error("{path}: {what}")]
    Config { path: PathBuf, what: String },
    /// The tokenizer files could not be turned into a tokenizer, or encoding failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A request argument (size, steps, noise shape, ...) is out of range; names the argument.
    #[error("{0}")]
    Argument(String),
    /// A LoRA file's key is of no known form, misshapen, or targets no weight of the model.
    #[error("{path}: LoRA key '{key}': {what}")]
    Lora {
        path: PathBuf,
        key: String,
        what: String,
    },
    /// A convolution's shapes do not fit together.
    #[error(transparent)]
    Conv(#[from] ConvError),
}

impl DiffusionError {
    pub(crate) fn config(path: impl Into<PathBuf>, what: impl Into<String>) -> Self {
        DiffusionError::Config {
            path: path.into(),
            what: what.into(),
        }
    }
}
