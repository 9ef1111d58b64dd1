//! The fork's facts, each in one place, as data: no dependencies, no I/O.
//! The build (`mlx-patched`), the suite and the workflows read them from
//! here; the pages that list them are rendered from here
//! (`cargo xtask docs`), and the tidy test keeps them from being written
//! elsewhere.

pub mod bases;
pub mod coverage;
pub mod kernels;
pub mod packages;
pub mod probes;
pub mod upstream_fixes;
pub mod variables;
pub mod variants;

/// A name that is none of the table's: which name, and the ones there are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown(pub String);

impl std::fmt::Display for Unknown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unknown {}
