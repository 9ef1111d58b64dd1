//! Bridge for function transforms (compile, vjp, jvp, vmap, checkpoint,
//! custom_vjp, export and import) over Rust closures.
//!
//! A closure crosses as a boxed opaque Rust type that C++ keeps inside a
//! `std::function`; MLX calls it back through `call_rust_fn`. Errors and
//! panics must not unwind through C++ frames, so the callbacks catch panics
//! and report both as `Err`, which cxx rethrows in C++ as `rust::Error`.
//!
//! Panics are not turned into errors, though: the payload is kept aside
//! while the C++ frames unwind as an exception, and the safe API resumes
//! the panic once the bridge call has returned ([`resume_panic`]), so a
//! closure that panics panics at its caller, as any Rust call would.

use crate::Error;
use std::any::Any;
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};

pub use bridge::*;

type ListFn = dyn FnMut(&ArrayList) -> crate::Result<cxx::UniquePtr<ArrayList>>;
type VjpListFn =
    dyn FnMut(&ArrayList, &ArrayList, &ArrayList) -> crate::Result<cxx::UniquePtr<ArrayList>>;

/// A Rust closure over array lists, owned by the C++ side once boxed.
/// `RefCell` because MLX may (through the closure itself) call it again while
/// it runs; that re-entrant call fails instead of aliasing `&mut`.
pub struct RustFn(RefCell<Box<ListFn>>);

/// A custom VJP closure: `(primals, cotangents, outputs) -> vjps`.
pub struct RustVjpFn(RefCell<Box<VjpListFn>>);

impl RustFn {
    pub fn new(
        f: impl FnMut(&ArrayList) -> crate::Result<cxx::UniquePtr<ArrayList>> + 'static,
    ) -> Box<Self> {
        Box::new(RustFn(RefCell::new(Box::new(f))))
    }
}

impl RustVjpFn {
    pub fn new(
        f: impl FnMut(&ArrayList, &ArrayList, &ArrayList) -> crate::Result<cxx::UniquePtr<ArrayList>>
            + 'static,
    ) -> Box<Self> {
        Box::new(RustVjpFn(RefCell::new(Box::new(f))))
    }
}

thread_local! {
    /// The payload of a closure's panic, on its way out through C++.
    static PANIC: RefCell<Option<Box<dyn Any + Send>>> = const { RefCell::new(None) };
}

/// Runs `f`; a panic becomes `Err` so that it never unwinds into C++, and
/// its payload is kept for [`resume_panic`].
fn no_unwind<T>(f: impl FnOnce() -> crate::Result<T>) -> crate::Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let error = Error::from_panic(&*payload);
        // An earlier panic not yet resumed (the exception was swallowed
        // inside MLX) is superseded: the newest one is what unwinds now.
        PANIC.with(|p| *p.borrow_mut() = Some(payload));
        Err(error)
    })
}

/// Resumes the panic of a Rust closure called inside the last bridge call,
/// if one panicked. The safe API calls this after every bridge call that
/// can run closures, whether the call returned `Ok` or `Err`.
pub fn resume_panic() {
    if let Some(payload) = PANIC.with(|p| p.borrow_mut().take()) {
        std::panic::resume_unwind(payload);
    }
}

fn reentrant() -> Error {
    Error::new("[mlx_bridge] a Rust closure was called again while it was already running")
}

fn call_rust_fn(f: &RustFn, inputs: &ArrayList) -> crate::Result<cxx::UniquePtr<ArrayList>> {
    let mut f = f.0.try_borrow_mut().map_err(|_| reentrant())?;
    no_unwind(|| f(inputs))
}

fn call_rust_vjp_fn(
    f: &RustVjpFn,
    primals: &ArrayList,
    cotangents: &ArrayList,
    outputs: &ArrayList,
) -> crate::Result<cxx::UniquePtr<ArrayList>> {
    let mut f = f.0.try_borrow_mut().map_err(|_| reentrant())?;
    no_unwind(|| f(primals, cotangents, outputs))
}

// The `# Safety` section is on `compile` below; the shim cxx generates for
// it does not carry the doc comment, which clippy then reports.
#[allow(clippy::missing_safety_doc)]
#[cxx::bridge(namespace = "mlx_bridge")]
mod bridge {
    // ---- Shared types ----
    // (none)

    // ---- Rust to C++ ----
    extern "Rust" {
        /// Boxed Rust closure `&[array] -> Result<[array]>`.
        type RustFn;
        /// Boxed Rust closure `(primals, cotangents, outputs) -> Result<vjps>`.
        type RustVjpFn;

        // `Err` becomes a thrown `rust::Error` carrying the message.
        fn call_rust_fn(f: &RustFn, inputs: &ArrayList) -> Result<UniquePtr<ArrayList>>;
        fn call_rust_vjp_fn(
            f: &RustVjpFn,
            primals: &ArrayList,
            cotangents: &ArrayList,
            outputs: &ArrayList,
        ) -> Result<UniquePtr<ArrayList>>;
    }

    // ---- C++ to Rust ----
    unsafe extern "C++" {
        include!("bridge.h");

        type ArrayList = crate::ffi::array::ArrayList;
        /// A `std::function<vector<array>(const vector<array>&)>`.
        type Function;

        // Takes ownership of the closure; it is dropped with the last copy of
        // the std::function (which MLX graph nodes may also hold).
        fn function_from_rust(f: Box<RustFn>) -> UniquePtr<Function>;
        // Runs the function: MLX op errors and closure errors both throw.
        fn function_call(f: &Function, inputs: &ArrayList) -> Result<UniquePtr<ArrayList>>;

        /// `mlx::core::detail::compile`, keyed by the returned object's address.
        ///
        /// # Safety
        ///
        /// The caller must call `compile_erase` on the returned function
        /// before dropping it (or never free it). Otherwise the cache entry,
        /// with every array the function captured, outlives it under a key
        /// that a later function allocated at the same address would hit,
        /// replaying the wrong graph.
        unsafe fn compile(f: &Function, shapeless: bool) -> Result<UniquePtr<Function>>;
        // Erases the compile-cache entries of a function `compile` returned.
        fn compile_erase(f: &Function);

        fn vmap(f: &Function, in_axes: &[i32], out_axes: &[i32]) -> Result<UniquePtr<Function>>;
        fn checkpoint(f: &Function) -> Result<UniquePtr<Function>>;
        fn custom_vjp(f: &Function, vjp_fn: Box<RustVjpFn>) -> Result<UniquePtr<Function>>;
        // Values, then the gradients of the first value (a scalar) with
        // respect to the inputs `argnums`.
        fn value_and_grad(f: &Function, argnums: &[i32]) -> Result<UniquePtr<Function>>;
        // The gradients of the function's first output (a scalar).
        fn grad(f: &Function, argnums: &[i32]) -> Result<UniquePtr<Function>>;
        // Outputs followed by one vjp per primal.
        fn vjp(
            f: &Function,
            primals: &ArrayList,
            cotangents: &ArrayList,
        ) -> Result<UniquePtr<ArrayList>>;
        // Outputs followed by one jvp per output.
        fn jvp(
            f: &Function,
            primals: &ArrayList,
            tangents: &ArrayList,
        ) -> Result<UniquePtr<ArrayList>>;
        // `mlx::core::export_function`: `f` traced on `example`'s shapes and
        // dtypes, written to `path`.
        fn export_function(
            path: &str,
            f: &Function,
            example: &ArrayList,
            shapeless: bool,
        ) -> Result<()>;
        // `mlx::core::import_function`, as a function.
        fn import_function(path: &str) -> Result<UniquePtr<Function>>;
    }
}
