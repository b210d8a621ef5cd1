//! The tokenizer's error type.

use std::path::PathBuf;

use crate::error::LoadError;

/// Errors raised while building a tokenizer or encoding text. Every message names the metadata key
/// or file at fault.
#[derive(thiserror::Error, Debug)]
pub enum TokenizerError {
    /// A GGUF metadata key could not be read (present with the wrong type, for example).
    #[error(transparent)]
    Gguf(#[from] LoadError),
    /// A required GGUF metadata key is absent.
    #[error("{path}: missing tokenizer metadata key '{key}'")]
    MissingKey {
        /// The GGUF file.
        path: PathBuf,
        /// The metadata key, e.g. `tokenizer.ggml.tokens`.
        key: String,
    },
    /// A GGUF metadata key holds a value of the wrong type or length.
    #[error("{path}: metadata key '{key}': {what}")]
    BadKey {
        /// The GGUF file.
        path: PathBuf,
        /// The metadata key.
        key: String,
        /// What is wrong with it.
        what: String,
    },
    /// `tokenizer.ggml.model` names a tokenizer family that is not implemented.
    #[error(
        "{path}: unsupported tokenizer.ggml.model '{model}' (supported: gpt2 (byte-level BPE), llama (SentencePiece))"
    )]
    UnsupportedModel {
        /// The GGUF file.
        path: PathBuf,
        /// The value of `tokenizer.ggml.model`.
        model: String,
    },
    /// A file of a HF tokenizer folder could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file of a HF tokenizer folder is not what was expected (bad JSON, unknown token, ...).
    #[error("{path}: {what}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// The `tokenizers` crate refused to build the model or to encode (message from the crate).
    #[error("{context}: {message}")]
    Backend {
        /// Which file or metadata the backend was built from.
        context: String,
        /// The backend's message.
        message: String,
    },
    /// A BOS token was requested but the vocabulary defines none.
    #[error("{context}: a BOS token was requested but the vocabulary has none (tokenizer.ggml.bos_token_id / bos_token)")]
    NoBos {
        /// Which file the vocabulary came from.
        context: String,
    },
}
