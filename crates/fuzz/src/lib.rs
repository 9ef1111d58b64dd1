//! A graph-lifetime fuzzer for MLX, engine-independent: this crate links no
//! MLX. It makes random valid programs over MLX's API ([`gen`]) in a typed
//! IR ([`ir`]), decides what a run's measurements mean ([`oracle`]), runs a
//! worker process that executes programs on one MLX variant and survives
//! its crashes ([`campaign`]), shrinks a failing program on the IR
//! ([`shrink`]) and prints it as a standalone C++ program ([`cpp`]) and,
//! where Python can express it, as a Python script ([`python`]).
//!
//! The worker (`mlx-fuzz-exec`) links MLX through the bridge; one worker
//! per variant, since two MLX builds cannot share a process.

pub mod campaign;
pub mod conditioning;
pub mod cpp;
pub mod edges;
pub mod findings;
pub mod gen;
pub mod guided;
pub mod ir;
pub mod mutate;
pub mod oracle;
pub mod primitives;
pub mod python;
pub mod shrink;

pub use gen::{generate, program_of_seed, program_of_seed_with, Releases};
pub use ir::{check, Program};
pub use oracle::{judge, Finding, Kind, Outcome};
