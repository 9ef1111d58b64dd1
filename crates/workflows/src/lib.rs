//! The fork's workflows, one module each; `cargo xtask` parses a command
//! line and calls one of them, and the suite's tests call the checks.
//!
//! Listed alphabetically. What keeps them layered is the tidy test: no
//! module imports one that imports it back, at any depth.

pub mod base_record;
pub mod builds;
pub mod candidate;
pub mod checks;
pub mod demo;
pub mod deps;
pub mod docs;
pub mod fuzz;
pub mod install_paths;
pub mod mlx;
pub mod mlx_audio;
pub mod mlx_lm;
pub mod peer_suite;
pub mod mlx_rs;
pub mod mossformer2;
pub mod provenance;
pub mod python;
pub mod python_env;
pub mod race;
pub mod real_model;
pub mod rebase;
pub mod sanitize;
pub mod suite;
pub mod trees;
pub mod upstream;
pub mod wheel;
pub mod workspace;

pub use mlx_patched::pin::Base;
pub use mlx_patched::Variant;
