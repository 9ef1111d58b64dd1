//! The harness's plumbing, which the checks (`mlx-checks`) and the commands
//! (`mlx-workflows`) are built from. Nothing here knows a client or a
//! command; the tidy test keeps every module free of import cycles.

pub mod builds;
pub mod check;
pub mod cli;
pub mod config;
pub mod cpp_probe;
pub mod deps;
pub mod error;
pub mod kernel_preamble;
pub mod paths;
pub mod peer_suite;
pub mod process;
pub mod python_env;
pub mod slow_check;
pub mod tally;
pub mod trees;
pub mod wheel;
