//! Safe Rust API over the MLX C++ core, through cxx bridges.
//!
//! * [`Array`] is a handle to an MLX array (a lazy graph node); cloning it
//!   shares the node, exactly like copying an `mlx::core::array`.
//! * Every operation returns [`Result`]: MLX reports bad shapes, axes and
//!   dtypes by throwing C++ exceptions, which arrive here as [`Error`] with
//!   MLX's message. Some errors only surface when the graph is evaluated
//!   ([`eval`], [`Array::eval`], the `to_vec_*` readers).
//! * Transforms take Rust closures ([`compile`], [`vjp`], [`vmap`], ...).
//!
//! Arrays are not `Send`: MLX keeps per-thread state (default streams, the
//! compile cache), so a graph is built, evaluated and dropped on one thread.
//!
//! The raw bridges are public in [`ffi`] for probes that need MLX one to one.

mod array;
mod error;
pub mod fast;
pub mod ffi;
#[cfg(feature = "fuzz")]
pub mod fuzz;
pub mod linalg;
pub mod memory;
mod ops;
pub mod random;
mod transforms;

pub use array::{eval, synchronize, Array, Dtype};
pub use error::{Error, Result};
pub use ops::*;
pub use transforms::{
    checkpoint, compile, compile_shapeless, custom_vjp, export_function, grad, import_function,
    jvp, value_and_grad, vjp, vmap, CompiledFn, TransformedFn,
};

/// The upstream MLX release the linked library was built from ("0.32.2").
pub const MLX_VERSION: &str = env!("MLX_BRIDGE_UPSTREAM_VERSION");

/// Which MLX build this crate links (the name of an `mlx_patched::Variant`).
pub const MLX_VARIANT: &str = env!("MLX_BRIDGE_VARIANT");
