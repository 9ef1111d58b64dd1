//! Bridge for array operations (mlx/ops.h and the forward ops of mlx/fast.h).
//! MLX validates shapes, axes and dtypes while building the op and throws,
//! so every function here returns `Result`.

pub use bridge::*;

#[cxx::bridge(namespace = "mlx_bridge")]
mod bridge {
    // ---- Shared types ----
    // (none: `Dtype` comes from the array bridge)

    // ---- Rust to C++ ----
    // (nothing)

    // ---- C++ to Rust ----
    unsafe extern "C++" {
        include!("bridge.h");

        type Array = crate::ffi::array::Array;
        type ArrayList = crate::ffi::array::ArrayList;
        type Dtype = crate::ffi::array::Dtype;

        fn arange(start: f64, stop: f64, step: f64, dtype: Dtype) -> Result<UniquePtr<Array>>;
        fn zeros(shape: &[i32], dtype: Dtype) -> Result<UniquePtr<Array>>;
        fn ones(shape: &[i32], dtype: Dtype) -> Result<UniquePtr<Array>>;
        fn full_f64(shape: &[i32], value: f64, dtype: Dtype) -> Result<UniquePtr<Array>>;
        fn astype(a: &Array, dtype: Dtype) -> Result<UniquePtr<Array>>;

        fn matmul(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn add(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn subtract(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn multiply(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn divide(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn maximum(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn greater(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn equal(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn array_equal(a: &Array, b: &Array, equal_nan: bool) -> Result<UniquePtr<Array>>;

        fn abs(a: &Array) -> Result<UniquePtr<Array>>;
        fn negative(a: &Array) -> Result<UniquePtr<Array>>;
        fn exp(a: &Array) -> Result<UniquePtr<Array>>;
        fn sqrt(a: &Array) -> Result<UniquePtr<Array>>;
        fn square(a: &Array) -> Result<UniquePtr<Array>>;
        fn real(a: &Array) -> Result<UniquePtr<Array>>;
        fn imag(a: &Array) -> Result<UniquePtr<Array>>;
        fn stop_gradient(a: &Array) -> Result<UniquePtr<Array>>;

        fn reshape(a: &Array, shape: &[i32]) -> Result<UniquePtr<Array>>;
        fn transpose(a: &Array) -> Result<UniquePtr<Array>>;
        fn transpose_axes(a: &Array, axes: &[i32]) -> Result<UniquePtr<Array>>;
        fn slice(
            a: &Array,
            start: &[i32],
            stop: &[i32],
            strides: &[i32],
        ) -> Result<UniquePtr<Array>>;
        // Multi-output: built with `array::make_arrays` (siblings).
        fn split(a: &Array, num_splits: i32, axis: i32) -> Result<UniquePtr<ArrayList>>;
        fn split_at(a: &Array, indices: &[i32], axis: i32) -> Result<UniquePtr<ArrayList>>;
        fn concatenate(arrays: &ArrayList, axis: i32) -> Result<UniquePtr<Array>>;

        fn sum_all(a: &Array, keepdims: bool) -> Result<UniquePtr<Array>>;
        fn sum_axes(a: &Array, axes: &[i32], keepdims: bool) -> Result<UniquePtr<Array>>;
        fn mean_axes(a: &Array, axes: &[i32], keepdims: bool) -> Result<UniquePtr<Array>>;

        // Multi-output: [quotient, remainder].
        fn divmod(a: &Array, b: &Array) -> Result<UniquePtr<ArrayList>>;
        // Multi-output, affine mode: [wq, scales, biases].
        fn quantize(w: &Array, group_size: i32, bits: i32) -> Result<UniquePtr<ArrayList>>;
        fn dequantize(
            wq: &Array,
            scales: &Array,
            biases: &Array,
            group_size: i32,
            bits: i32,
        ) -> Result<UniquePtr<Array>>;
        // Multi-output: identity on `inputs` that also waits for `deps`.
        fn depends(inputs: &ArrayList, deps: &ArrayList) -> Result<UniquePtr<ArrayList>>;

        // mlx::core::fast; a null UniquePtr means "no weight / no bias".
        fn rms_norm(x: &Array, weight: UniquePtr<Array>, eps: f32) -> Result<UniquePtr<Array>>;
        fn layer_norm(
            x: &Array,
            weight: UniquePtr<Array>,
            bias: UniquePtr<Array>,
            eps: f32,
        ) -> Result<UniquePtr<Array>>;
    }
}
