//! Function transforms over Rust closures: [`compile`], [`vjp`], [`jvp`],
//! [`grad`], [`value_and_grad`], [`vmap`], [`checkpoint`], [`custom_vjp`],
//! and the round trip through a file, [`export_function`] then
//! [`import_function`].
//!
//! Closures take `&[Array]` and return `Result<Vec<Array>>`. An `Err` aborts
//! the MLX transform with a C++ exception, and the transform's caller gets
//! `Err` with the same message. A panic crosses the C++ frames the same way
//! and is then resumed: the transform's caller panics with the closure's
//! payload. A compiled closure that panicked is traced again on its next
//! call (the half-made cache entry is erased).

use crate::array::{from_list, to_list};
use crate::ffi::array::ArrayList;
use crate::ffi::transforms::{self as raw, RustFn, RustVjpFn};
use crate::{Array, Error, Result};
use cxx::UniquePtr;
use std::path::Path;

/// Boxes a closure over `&[Array]` as a closure over C++ array lists.
fn rust_fn<F>(mut f: F) -> Box<RustFn>
where
    F: FnMut(&[Array]) -> Result<Vec<Array>> + 'static,
{
    RustFn::new(move |inputs: &ArrayList| {
        let inputs = from_list(inputs)?;
        Ok(to_list(f(&inputs)?))
    })
}

fn function<F>(f: F) -> UniquePtr<raw::Function>
where
    F: FnMut(&[Array]) -> Result<Vec<Array>> + 'static,
{
    raw::function_from_rust(rust_fn(f))
}

/// The result of a bridge call that may have run Rust closures: resumes a
/// closure's panic first, else passes MLX's result on.
fn after_closures<T>(r: std::result::Result<T, cxx::Exception>) -> Result<T> {
    raw::resume_panic();
    Ok(r?)
}

fn call<I>(f: &raw::Function, inputs: I) -> Result<Vec<Array>>
where
    I: IntoIterator,
    I::Item: AsRef<Array>,
{
    from_list(&*after_closures(raw::function_call(f, &to_list(inputs)))?)
}

/// A compiled closure. Calls with new input shapes/dtypes trace the closure
/// once more; later calls replay MLX's cached, simplified and fused graph.
///
/// Dropping it erases its compile-cache entries (the traced tapes) and then
/// the closure with everything it captured: the lifetime MLX's Python
/// binding gives a compiled function. Not `Send`: MLX's compile cache is
/// per thread.
pub struct CompiledFn {
    func: UniquePtr<raw::Function>,
}

impl CompiledFn {
    /// Runs the function. `inputs`: `&[Array]`, `[&a, &b]`, `Vec<Array>`, ...
    pub fn call<I>(&self, inputs: I) -> Result<Vec<Array>>
    where
        I: IntoIterator,
        I::Item: AsRef<Array>,
    {
        call(&self.func, inputs)
    }
}

impl Drop for CompiledFn {
    fn drop(&mut self) {
        // Before `func` (and the closure) is freed, so the key cannot be
        // reused by a new CompiledFn while its entries still exist.
        raw::compile_erase(&self.func);
    }
}

fn compile_impl<F>(f: F, shapeless: bool) -> CompiledFn
where
    F: FnMut(&[Array]) -> Result<Vec<Array>> + 'static,
{
    // SAFETY: the returned `CompiledFn` owns `func` and erases its cache
    // entry in `Drop`, before `func` is freed.
    let func = unsafe { raw::compile(&function(f), shapeless) };
    // MLX only rejects an empty std::function, which `function` never makes.
    let func = func.expect("mlx::core::detail::compile rejected a non-empty function");
    CompiledFn { func }
}

/// Compiles `f` (`mlx::core::detail::compile` with a key owned by the
/// returned [`CompiledFn`]). `f` may capture arrays, e.g. model weights;
/// they are constants of the compiled graph.
pub fn compile<F>(f: F) -> CompiledFn
where
    F: FnMut(&[Array]) -> Result<Vec<Array>> + 'static,
{
    compile_impl(f, false)
}

/// Like [`compile`], but one trace serves all input shapes (same ranks and
/// dtypes); MLX errors at trace time for ops that cannot be shapeless.
pub fn compile_shapeless<F>(f: F) -> CompiledFn
where
    F: FnMut(&[Array]) -> Result<Vec<Array>> + 'static,
{
    compile_impl(f, true)
}

/// A transformed closure ([`vmap`], [`checkpoint`], [`custom_vjp`]).
pub struct TransformedFn {
    func: UniquePtr<raw::Function>,
}

impl TransformedFn {
    /// Runs the function. `inputs`: `&[Array]`, `[&a, &b]`, `Vec<Array>`, ...
    pub fn call<I>(&self, inputs: I) -> Result<Vec<Array>>
    where
        I: IntoIterator,
        I::Item: AsRef<Array>,
    {
        call(&self.func, inputs)
    }
}

/// Vectorizes `f` over axis `in_axes[i]` of input `i` (`-1`: not mapped),
/// stacking output `j` along `out_axes[j]`. Empty slices mean all 0.
pub fn vmap<F>(f: F, in_axes: &[i32], out_axes: &[i32]) -> Result<TransformedFn>
where
    F: FnMut(&[Array]) -> Result<Vec<Array>> + 'static,
{
    Ok(TransformedFn {
        func: raw::vmap(&function(f), in_axes, out_axes)?,
    })
}

/// `f` with gradient checkpointing: intermediates are recomputed in the
/// backward pass instead of being kept.
pub fn checkpoint<F>(f: F) -> Result<TransformedFn>
where
    F: FnMut(&[Array]) -> Result<Vec<Array>> + 'static,
{
    Ok(TransformedFn {
        func: raw::checkpoint(&function(f))?,
    })
}

/// `f` whose VJP is `vjp_fn(primals, cotangents, outputs)` (one result per
/// primal).
pub fn custom_vjp<F, G>(f: F, mut vjp_fn: G) -> Result<TransformedFn>
where
    F: FnMut(&[Array]) -> Result<Vec<Array>> + 'static,
    G: FnMut(&[Array], &[Array], &[Array]) -> Result<Vec<Array>> + 'static,
{
    let g = RustVjpFn::new(move |p: &ArrayList, c: &ArrayList, o: &ArrayList| {
        Ok(to_list(vjp_fn(
            &from_list(p)?,
            &from_list(c)?,
            &from_list(o)?,
        )?))
    });
    Ok(TransformedFn {
        func: raw::custom_vjp(&function(f), g)?,
    })
}

/// `f`'s values followed by the gradients of its first value with respect
/// to the inputs `argnums`. Calling it fails (`Err`) if the first value is
/// not a scalar or an argnum is not an input.
pub fn value_and_grad<F>(f: F, argnums: &[i32]) -> Result<TransformedFn>
where
    F: FnMut(&[Array]) -> Result<Vec<Array>> + 'static,
{
    Ok(TransformedFn {
        func: raw::value_and_grad(&function(f), argnums)?,
    })
}

/// The gradients of `f`'s first output with respect to the inputs
/// `argnums`: MLX's `grad`, as [`value_and_grad`] without the values.
pub fn grad<F>(f: F, argnums: &[i32]) -> Result<TransformedFn>
where
    F: FnMut(&[Array]) -> Result<Vec<Array>> + 'static,
{
    Ok(TransformedFn {
        func: raw::grad(&function(f), argnums)?,
    })
}

/// Splits `all` after its first `n` arrays.
fn split_off(mut all: Vec<Array>, n: usize, what: &str) -> Result<(Vec<Array>, Vec<Array>)> {
    if all.len() < n {
        return Err(Error::new(format!(
            "[{what}] MLX returned {} arrays, expected at least {n}",
            all.len()
        )));
    }
    let tail = all.split_off(n);
    Ok((all, tail))
}

/// Outputs of `f(primals)` and the vector-Jacobian products of
/// `cotangents` (one per output) with respect to each primal.
pub fn vjp<F, P, C>(f: F, primals: P, cotangents: C) -> Result<(Vec<Array>, Vec<Array>)>
where
    F: FnMut(&[Array]) -> Result<Vec<Array>> + 'static,
    P: IntoIterator,
    P::Item: AsRef<Array>,
    C: IntoIterator,
    C::Item: AsRef<Array>,
{
    let primals = to_list(primals);
    let n_primals = crate::ffi::array::array_list_len(&primals);
    let all = from_list(&*after_closures(raw::vjp(
        &function(f),
        &primals,
        &to_list(cotangents),
    ))?)?;
    let n_outputs = all.len().saturating_sub(n_primals);
    split_off(all, n_outputs, "vjp")
}

/// Outputs of `f(primals)` and the Jacobian-vector products with
/// `tangents` (one per primal), one per output.
pub fn jvp<F, P, T>(f: F, primals: P, tangents: T) -> Result<(Vec<Array>, Vec<Array>)>
where
    F: FnMut(&[Array]) -> Result<Vec<Array>> + 'static,
    P: IntoIterator,
    P::Item: AsRef<Array>,
    T: IntoIterator,
    T::Item: AsRef<Array>,
{
    let all = from_list(&*after_closures(raw::jvp(
        &function(f),
        &to_list(primals),
        &to_list(tangents),
    ))?)?;
    let n_outputs = all.len() / 2;
    split_off(all, n_outputs, "jvp")
}

fn path_str(path: &Path) -> Result<&str> {
    path.to_str().ok_or_else(|| {
        Error::new(format!(
            "[mlx_bridge] MLX takes a UTF-8 file name, not {}",
            path.display()
        ))
    })
}

/// Traces `f` on arrays of `example`'s shapes and dtypes (their values are
/// not read) and writes the trace, with the arrays it captured, to `path`
/// (MLX's `export_function`). `shapeless`: the imported function takes any
/// shapes of the same ranks, as [`compile_shapeless`] does.
pub fn export_function<F, I>(path: &Path, f: F, example: I, shapeless: bool) -> Result<()>
where
    F: FnMut(&[Array]) -> Result<Vec<Array>> + 'static,
    I: IntoIterator,
    I::Item: AsRef<Array>,
{
    let path = path_str(path)?;
    after_closures(raw::export_function(
        path,
        &function(f),
        &to_list(example),
        shapeless,
    ))
}

/// The function a file [`export_function`] wrote (MLX's `import_function`).
/// Calling it replays the trace; without `shapeless` it takes only the
/// exported shapes and dtypes, and other ones are an `Err`. The captured
/// arrays are read from the file when first evaluated: the file must stay
/// (on Unix it may be unlinked once this returns).
pub fn import_function(path: &Path) -> Result<TransformedFn> {
    Ok(TransformedFn {
        func: raw::import_function(path_str(path)?)?,
    })
}
