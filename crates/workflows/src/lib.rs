//! The fork's commands, one module per `cargo xtask` subcommand, named
//! after it. They are built from the checks (`mlx-checks`) and the
//! plumbing (`mlx-harness`); xtask parses a command line and calls one.

pub mod built_once;
pub mod claims;
pub mod demo;
pub mod docs;
pub mod fuzz;
pub mod leak_curve;
pub mod mlx;
pub mod race;
pub mod rebase;
pub mod sanitize;
pub mod test;
pub mod try_fix;
pub mod upstream_pr;

pub use mlx_patched::pin::Base;
pub use mlx_patched::Variant;
