//! Errors keep their cause chain: every workflow returns `anyhow` errors
//! with the path or command as context, and `{:#}` prints the chain.

pub use anyhow::{anyhow, bail, Context, Error, Result};
