//! A crate of the graph that depends on the published `mlx-sys` 0.7.0.

/// The MLX release mlx-sys said it links (`DEP_MLX_VERSION`).
pub const VERSION: &str = env!("DEP_MLX_VERSION_SEEN");
/// The variant the fork's mlx-sys said it links, `none` from another.
pub const VARIANT: &str = env!("DEP_MLX_VARIANT_SEEN");

/// `x + x` on the CPU through mlx-c; NaN on any error.
pub fn twice(x: f32) -> f32 {
    let mut result = f32::NAN;
    // SAFETY: each handle is created, used and freed here, in order.
    unsafe {
        let s = mlx_sys::mlx_default_cpu_stream_new();
        let a = mlx_sys::mlx_array_new_float(x);
        let mut sum = mlx_sys::mlx_array_new();
        if mlx_sys::mlx_add(&mut sum, a, a, s) == 0 && mlx_sys::mlx_array_eval(sum) == 0 {
            mlx_sys::mlx_array_item_float32(&mut result, sum);
        }
        mlx_sys::mlx_array_free(sum);
        mlx_sys::mlx_array_free(a);
        mlx_sys::mlx_stream_free(s);
    }
    result
}
