//! The fork's workflows, one module each; `cargo xtask` parses a command
//! line and calls one of them, and the suite's tests call the checks.
//!
//! Modules below import only modules listed before them (the tidy test
//! keeps the graph free of cycles): `workspace`, `deps`, `git` and the
//! probes first, the workflows that combine them last.

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
