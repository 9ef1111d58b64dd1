//! The system packages the build needs, by their Debian names.

/// Debian/Ubuntu packages the CPU build needs (`cargo xtask deps` installs them).
pub const DEBIAN_PACKAGES: &[&str] = &[
    "cmake",
    "ninja-build",
    "ccache",
    "git",
    "g++",
    "libopenblas-dev",
    "liblapacke-dev",
    "nlohmann-json3-dev",
    "doctest-dev",
    "libfmt-dev",
    // bindgen, for the mlx-c bindings of crates/mlx-sys.
    "libclang-dev",
];
