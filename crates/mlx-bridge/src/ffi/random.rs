//! Bridge for mlx/random.h. Every generator takes an explicit key.

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
        type Dtype = crate::ffi::array::Dtype;

        fn random_key(seed: u64) -> Result<UniquePtr<Array>>;
        // Key shape/dtype are validated by MLX and throw.
        fn random_split(key: &Array) -> Result<UniquePtr<ArrayList>>;
        fn random_split_n(key: &Array, num: i32) -> Result<UniquePtr<Array>>;
        fn random_normal(
            shape: &[i32],
            dtype: Dtype,
            loc: f32,
            scale: f32,
            key: &Array,
        ) -> Result<UniquePtr<Array>>;
        fn random_uniform(
            low: f32,
            high: f32,
            shape: &[i32],
            dtype: Dtype,
            key: &Array,
        ) -> Result<UniquePtr<Array>>;
        fn random_bits(shape: &[i32], key: &Array) -> Result<UniquePtr<Array>>;
    }
}
