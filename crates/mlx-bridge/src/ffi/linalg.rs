//! Bridge for mlx/linalg.h. The C++ side always runs these on the CPU
//! device, the only one MLX implements them for.

pub use bridge::*;

#[cxx::bridge(namespace = "mlx_bridge")]
mod bridge {
    // ---- Shared types ----
    // (none)

    // ---- Rust to C++ ----
    // (nothing)

    // ---- C++ to Rust ----
    unsafe extern "C++" {
        include!("bridge.h");

        type Array = crate::ffi::array::Array;
        type ArrayList = crate::ffi::array::ArrayList;

        // All multi-output ones are built with `array::make_arrays`.
        fn linalg_qr(a: &Array) -> Result<UniquePtr<ArrayList>>;
        // [u, s, vt] or, without compute_uv, [s] (a single-output array).
        fn linalg_svd(a: &Array, compute_uv: bool) -> Result<UniquePtr<ArrayList>>;
        fn linalg_eigh(a: &Array, uplo: &str) -> Result<UniquePtr<ArrayList>>;
        fn linalg_eig(a: &Array) -> Result<UniquePtr<ArrayList>>;
        // [p, l, u]
        fn linalg_lu(a: &Array) -> Result<UniquePtr<ArrayList>>;
        // [lu, pivots]
        fn linalg_lu_factor(a: &Array) -> Result<UniquePtr<ArrayList>>;
        fn linalg_inv(a: &Array) -> Result<UniquePtr<Array>>;
        fn linalg_norm(a: &Array) -> Result<UniquePtr<Array>>;
    }
}
