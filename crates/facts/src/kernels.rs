//! How MLX's CPU compile builds a kernel on Linux, as upstream 0.32.2 and
//! 0.32.4 do it (`mlx/backend/cpu/jit_compiler.cpp`): each fused kernel is
//! a C++ file whose first line includes the preamble from the headers
//! shipped beside libmlx, compiled by `g++` with these flags and
//! `-shared` (and `-mavx2 -mfma -mf16c` when MLX itself was built for
//! AVX2, which this project's builds are not).

/// The header every kernel includes, relative to the include folder.
pub const PREAMBLE_HEADER: &str = "mlx/backend/cpu/compiled_preamble.h";

/// The flags of every kernel's compile that a precompiled header must
/// share, in the order MLX writes them (the Python check fails when MLX's
/// own compile stops reading the header precompiled with them).
pub const COMPILE_FLAGS: &[&str] = &["-std=c++17", "-O3", "-Wall", "-fPIC"];
