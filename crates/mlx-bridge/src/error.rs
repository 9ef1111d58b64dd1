//! The crate's error type: MLX's exception message, or a message of ours.

use std::any::Any;
use std::fmt;

/// An error from MLX (the `what()` of the C++ exception it threw) or from a
/// check this crate makes before calling MLX.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    message: String,
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error with the given message (e.g. from a closure passed to a
    /// transform; it reaches the caller of the transform unchanged).
    pub fn new(message: impl Into<String>) -> Self {
        Error {
            message: message.into(),
        }
    }

    /// The message, as MLX wrote it.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn from_panic(payload: &(dyn Any + Send)) -> Self {
        let what = if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "non-string panic payload".to_string()
        };
        Error::new(format!("[mlx_bridge] Rust closure panicked: {what}"))
    }
}

impl From<cxx::Exception> for Error {
    fn from(e: cxx::Exception) -> Self {
        Error::new(e.what())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({:?})", self.message)
    }
}

impl std::error::Error for Error {}
