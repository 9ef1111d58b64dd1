//! Bridge for the array type itself: construction from Rust slices,
//! inspection, read-back and evaluation.

pub use bridge::*;

#[cxx::bridge(namespace = "mlx_bridge")]
mod bridge {
    // ---- Shared types ----

    /// MLX element types. The C++ enum in `bridge.h` is the source of truth
    /// (declared again below as an extern C++ type), so cxx checks at compile
    /// time that both sides agree on every discriminant.
    #[repr(u8)]
    #[derive(Debug, Hash)]
    enum Dtype {
        Bool = 0,
        U8 = 1,
        U16 = 2,
        U32 = 3,
        U64 = 4,
        I8 = 5,
        I16 = 6,
        I32 = 7,
        I64 = 8,
        F16 = 9,
        F32 = 10,
        F64 = 11,
        BF16 = 12,
        C64 = 13,
    }

    // ---- Rust to C++ ----
    // (nothing: this area never calls back into Rust)

    // ---- C++ to Rust ----
    unsafe extern "C++" {
        include!("bridge.h");

        type Dtype;
        /// One `mlx::core::array` (a shared handle to a graph node).
        type Array;
        /// A `std::vector<mlx::core::array>`, for ops taking or returning many arrays.
        type ArrayList;

        // Construction copies the slice into an MLX buffer; it throws when the
        // shape does not match the data length (checked in Rust first too).
        fn array_from_f32(data: &[f32], shape: &[i32]) -> Result<UniquePtr<Array>>;
        fn array_from_i32(data: &[i32], shape: &[i32]) -> Result<UniquePtr<Array>>;
        fn array_from_u32(data: &[u32], shape: &[i32]) -> Result<UniquePtr<Array>>;
        fn array_from_i64(data: &[i64], shape: &[i32]) -> Result<UniquePtr<Array>>;
        fn array_from_f64(data: &[f64], shape: &[i32]) -> Result<UniquePtr<Array>>;
        fn array_from_u8(data: &[u8], shape: &[i32]) -> Result<UniquePtr<Array>>;
        fn array_from_bool(data: &[bool], shape: &[i32]) -> Result<UniquePtr<Array>>;
        // Allocation can fail (memory limit), hence Result even for scalars.
        fn array_scalar_f32(v: f32) -> Result<UniquePtr<Array>>;
        fn array_scalar_i32(v: i32) -> Result<UniquePtr<Array>>;

        // Shares the graph node, like copying an `mlx::core::array`.
        fn array_clone(a: &Array) -> UniquePtr<Array>;
        // Metadata is known without evaluating, and reading it cannot throw.
        fn array_shape(a: &Array) -> Vec<i32>;
        fn array_dtype(a: &Array) -> Dtype;
        fn array_size(a: &Array) -> usize;
        fn array_ndim(a: &Array) -> usize;
        fn array_nbytes(a: &Array) -> usize;
        fn array_id(a: &Array) -> usize;

        // Evaluation runs the kernels, which can throw (e.g. LAPACK failures).
        fn array_eval(a: &Array) -> Result<()>;
        // Evaluates, makes the data row-contiguous and copies it into `out`,
        // which must be exactly `nbytes` long.
        fn array_copy_bytes(a: &Array, out: &mut [u8]) -> Result<()>;

        fn array_list_new() -> UniquePtr<ArrayList>;
        fn array_list_push(list: Pin<&mut ArrayList>, a: &Array);
        fn array_list_len(list: &ArrayList) -> usize;
        // Throws `std::out_of_range` on a bad index.
        fn array_list_get(list: &ArrayList, i: usize) -> Result<UniquePtr<Array>>;

        fn eval(list: &ArrayList) -> Result<()>;
        fn synchronize() -> Result<()>;
    }
}
