//! The one error type of the browser package: the engine's errors, and requests that cannot
//! be served as given (bad options, a call in the wrong state, a short or oversized file).

/// What went wrong, in one line that names the file, option or call at fault.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// Loading, tokenizing, templating or running the model failed.
    #[error(transparent)]
    Engine(#[from] oxinfer::Error),
    /// The caller's request is malformed or arrives in the wrong state.
    #[error("{0}")]
    Request(String),
}

impl WebError {
    /// A [`WebError::Request`] with this message.
    pub fn request(msg: impl Into<String>) -> Self {
        WebError::Request(msg.into())
    }
}

impl From<oxinfer::LoadError> for WebError {
    fn from(e: oxinfer::LoadError) -> Self {
        WebError::Engine(e.into())
    }
}

/// Result alias of the browser package.
pub type Result<T, E = WebError> = std::result::Result<T, E>;
