//! Error types of the engine. Every message names the file, tensor or field at fault.

use std::path::PathBuf;

/// Errors raised while reading model files (GGUF, safetensors, `config.json`).
#[derive(thiserror::Error, Debug)]
pub enum LoadError {
    /// The file could not be opened, mapped or read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file's bytes do not form a valid file of the expected kind.
    #[error("{path}: {what}")]
    Malformed { path: PathBuf, what: String },
    /// A metadata key or config field is missing or has the wrong type.
    #[error("{path}: {what}")]
    Field { path: PathBuf, what: String },
    /// A tensor is missing, has the wrong shape, or an unsupported type.
    #[error("{path}: tensor '{tensor}': {what}")]
    Tensor {
        path: PathBuf,
        tensor: String,
        what: String,
    },
    /// The model's architecture is not implemented.
    #[error("{path}: unsupported architecture '{arch}' (supported: {supported})")]
    UnsupportedArch {
        path: PathBuf,
        arch: String,
        supported: String,
    },
}

impl LoadError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        LoadError::Io {
            path: path.into(),
            source,
        }
    }
    pub(crate) fn malformed(path: impl Into<PathBuf>, what: impl Into<String>) -> Self {
        LoadError::Malformed {
            path: path.into(),
            what: what.into(),
        }
    }
    pub(crate) fn field(path: impl Into<PathBuf>, what: impl Into<String>) -> Self {
        LoadError::Field {
            path: path.into(),
            what: what.into(),
        }
    }
    pub(crate) fn tensor(
        path: impl Into<PathBuf>,
        tensor: impl Into<String>,
        what: impl Into<String>,
    ) -> Self {
        LoadError::Tensor {
            path: path.into(),
            tensor: tensor.into(),
            what: what.into(),
        }
    }
}

/// Errors of the generation engine and its front-end API.
#[derive(thiserror::Error, Debug)]
pub enum Error {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    /// A request that cannot be served as given (too long, bad ids, bad sampling values).
    #[error("{0}")]
    Request(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// An accelerator failed in the middle of a pass, after part of its results were stored
    /// (the affected KV caches are emptied).
    #[error("device: {0}")]
    Device(String),
}

/// Result alias of the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;
