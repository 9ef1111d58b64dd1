//! The one place configuration is read from the environment.
//!
//! In a build script every read also tells Cargo to rerun when the variable
//! changes, so no input is ever read without being tracked.

use std::ffi::OsString;

/// Every variable the build reads, with what it does (the README lists these).
pub const VARIABLES: &[(&str, &str)] = &[
    ("MLX_SOURCE_DIR", "build this upstream checkout instead of the pinned tree"),
    ("MLX_PATCHED_SERIES_DIR", "apply this patch series instead of the repository's patches/ (cargo xtask rebase)"),
    ("MLX_PATCHED_BUILD_DIR", "where variants are configured, built and installed (default: <target>/mlx)"),
    ("MLX_PATCHED_JOBS", "parallel compile jobs for the MLX build (default: all cores)"),
    ("MLX_PATCHED_CMAKE_ARGS", "extra CMake arguments, space separated (part of the cache key)"),
    ("MLX_FORK_UPSTREAM_FIXED", "the suite expects every variant, the control too, to be leak-free (set by cargo xtask rebase for an upstream that fixed the leak)"),
    ("CXX", "C++ compiler for the probe programs linked against a prefix (default: c++)"),
    ("CARGO", "the cargo that runs `cargo metadata` to fetch the carrier crate"),
];

#[derive(Clone, Copy, Debug)]
pub struct Env {
    in_build_script: bool,
}

impl Env {
    /// Reads for a build script: each read emits `cargo:rerun-if-env-changed`.
    pub fn build_script() -> Self {
        Env { in_build_script: true }
    }

    /// Reads for a plain program (xtask): no Cargo directives.
    pub fn process() -> Self {
        Env { in_build_script: false }
    }

    pub fn var_os(&self, name: &str) -> Option<OsString> {
        if self.in_build_script {
            println!("cargo:rerun-if-env-changed={name}");
        }
        std::env::var_os(name).filter(|v| !v.is_empty())
    }

    pub fn var(&self, name: &str) -> Option<String> {
        self.var_os(name).and_then(|v| v.into_string().ok())
    }

    pub fn is_build_script(&self) -> bool {
        self.in_build_script
    }
}
