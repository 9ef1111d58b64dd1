//! Array operations (mlx/ops.h). Each builds a graph node; MLX's shape,
//! axis and dtype checks run here and come back as `Err`.

use crate::array::{from_list, from_list_n, to_list};
use crate::ffi::ops as raw;
use crate::{Array, Dtype, Result};

fn wrap(
    r: std::result::Result<cxx::UniquePtr<crate::ffi::array::Array>, cxx::Exception>,
) -> Result<Array> {
    Ok(Array::from_raw(r?))
}

/// `[start, stop)` in steps of `step`, as `dtype`.
pub fn arange(start: f64, stop: f64, step: f64, dtype: Dtype) -> Result<Array> {
    wrap(raw::arange(start, stop, step, dtype.to_raw()))
}

pub fn zeros(shape: &[i32], dtype: Dtype) -> Result<Array> {
    wrap(raw::zeros(shape, dtype.to_raw()))
}

pub fn ones(shape: &[i32], dtype: Dtype) -> Result<Array> {
    wrap(raw::ones(shape, dtype.to_raw()))
}

/// An array of `shape` filled with `value` converted to `dtype`.
pub fn full(shape: &[i32], value: f64, dtype: Dtype) -> Result<Array> {
    wrap(raw::full_f64(shape, value, dtype.to_raw()))
}

pub fn astype(a: &Array, dtype: Dtype) -> Result<Array> {
    wrap(raw::astype(a.as_raw(), dtype.to_raw()))
}

/// Matrix product with broadcasting over leading dimensions.
pub fn matmul(a: &Array, b: &Array) -> Result<Array> {
    wrap(raw::matmul(a.as_raw(), b.as_raw()))
}

pub fn add(a: &Array, b: &Array) -> Result<Array> {
    wrap(raw::add(a.as_raw(), b.as_raw()))
}

pub fn subtract(a: &Array, b: &Array) -> Result<Array> {
    wrap(raw::subtract(a.as_raw(), b.as_raw()))
}

pub fn multiply(a: &Array, b: &Array) -> Result<Array> {
    wrap(raw::multiply(a.as_raw(), b.as_raw()))
}

pub fn divide(a: &Array, b: &Array) -> Result<Array> {
    wrap(raw::divide(a.as_raw(), b.as_raw()))
}

pub fn maximum(a: &Array, b: &Array) -> Result<Array> {
    wrap(raw::maximum(a.as_raw(), b.as_raw()))
}

/// Elementwise `a > b` (bool).
pub fn greater(a: &Array, b: &Array) -> Result<Array> {
    wrap(raw::greater(a.as_raw(), b.as_raw()))
}

/// Elementwise `a == b` (bool).
pub fn equal(a: &Array, b: &Array) -> Result<Array> {
    wrap(raw::equal(a.as_raw(), b.as_raw()))
}

/// Scalar bool: same shape and all elements equal (NaN != NaN).
pub fn array_equal(a: &Array, b: &Array) -> Result<Array> {
    wrap(raw::array_equal(a.as_raw(), b.as_raw(), false))
}

pub fn abs(a: &Array) -> Result<Array> {
    wrap(raw::abs(a.as_raw()))
}

pub fn negative(a: &Array) -> Result<Array> {
    wrap(raw::negative(a.as_raw()))
}

pub fn exp(a: &Array) -> Result<Array> {
    wrap(raw::exp(a.as_raw()))
}

pub fn sqrt(a: &Array) -> Result<Array> {
    wrap(raw::sqrt(a.as_raw()))
}

pub fn square(a: &Array) -> Result<Array> {
    wrap(raw::square(a.as_raw()))
}

/// Real part (of a complex array; identity for real ones).
pub fn real(a: &Array) -> Result<Array> {
    wrap(raw::real(a.as_raw()))
}

/// Imaginary part (of a complex array).
pub fn imag(a: &Array) -> Result<Array> {
    wrap(raw::imag(a.as_raw()))
}

/// Identity that blocks gradients.
pub fn stop_gradient(a: &Array) -> Result<Array> {
    wrap(raw::stop_gradient(a.as_raw()))
}

/// New shape with the same number of elements (one `-1` is inferred).
pub fn reshape(a: &Array, shape: &[i32]) -> Result<Array> {
    wrap(raw::reshape(a.as_raw(), shape))
}

/// Reverses the axes.
pub fn transpose(a: &Array) -> Result<Array> {
    wrap(raw::transpose(a.as_raw()))
}

/// Permutes the axes: output axis `i` is input axis `axes[i]`.
pub fn transpose_axes(a: &Array, axes: &[i32]) -> Result<Array> {
    wrap(raw::transpose_axes(a.as_raw(), axes))
}

/// `a[start[i]:stop[i]:strides[i]]` on every axis.
pub fn slice(a: &Array, start: &[i32], stop: &[i32], strides: &[i32]) -> Result<Array> {
    wrap(raw::slice(a.as_raw(), start, stop, strides))
}

/// Splits into `num_splits` equal parts along `axis` (MLX errors if the
/// axis length is not divisible). The parts are siblings of one node.
pub fn split(a: &Array, num_splits: i32, axis: i32) -> Result<Vec<Array>> {
    from_list(&*raw::split(a.as_raw(), num_splits, axis)?)
}

/// Splits before each of `indices` along `axis` (`indices.len() + 1` parts).
pub fn split_at(a: &Array, indices: &[i32], axis: i32) -> Result<Vec<Array>> {
    from_list(&*raw::split_at(a.as_raw(), indices, axis)?)
}

/// Joins arrays along `axis`. `arrays`: `&[Array]`, `[&a, &b]`, ...
pub fn concatenate<I>(arrays: I, axis: i32) -> Result<Array>
where
    I: IntoIterator,
    I::Item: AsRef<Array>,
{
    wrap(raw::concatenate(&to_list(arrays), axis))
}

/// Sum of all elements (a 0-d array).
pub fn sum(a: &Array) -> Result<Array> {
    wrap(raw::sum_all(a.as_raw(), false))
}

/// Sum over `axes` (negative axes count from the end).
pub fn sum_axis(a: &Array, axes: &[i32], keepdims: bool) -> Result<Array> {
    wrap(raw::sum_axes(a.as_raw(), axes, keepdims))
}

/// Mean over `axes`.
pub fn mean_axis(a: &Array, axes: &[i32], keepdims: bool) -> Result<Array> {
    wrap(raw::mean_axes(a.as_raw(), axes, keepdims))
}

/// Elementwise quotient and remainder `(q, r)` with `q * b + r == a`, two
/// siblings of one node. Careful: MLX's CPU kernel truncates toward zero
/// (C semantics, `r` has the sign of `a`) while its Metal kernel floors
/// (Python semantics, like `floor_divide`/`remainder`).
pub fn divmod(a: &Array, b: &Array) -> Result<(Array, Array)> {
    let [q, r] = from_list_n("divmod", &*raw::divmod(a.as_raw(), b.as_raw())?)?;
    Ok((q, r))
}

/// Affine quantization of `w` along its last axis: `(wq, scales, biases)`;
/// `wq` is `u32` with `32 / bits` values packed per element.
pub fn quantize(w: &Array, group_size: i32, bits: i32) -> Result<(Array, Array, Array)> {
    let [wq, scales, biases] =
        from_list_n("quantize", &*raw::quantize(w.as_raw(), group_size, bits)?)?;
    Ok((wq, scales, biases))
}

/// Inverse of [`quantize`] (up to quantization error).
pub fn dequantize(
    wq: &Array,
    scales: &Array,
    biases: &Array,
    group_size: i32,
    bits: i32,
) -> Result<Array> {
    wrap(raw::dequantize(
        wq.as_raw(),
        scales.as_raw(),
        biases.as_raw(),
        group_size,
        bits,
    ))
}

/// Returns `inputs` unchanged, but evaluating any result also evaluates
/// `deps` first.
pub fn depends<I, D>(inputs: I, deps: D) -> Result<Vec<Array>>
where
    I: IntoIterator,
    I::Item: AsRef<Array>,
    D: IntoIterator,
    D::Item: AsRef<Array>,
{
    from_list(&*raw::depends(&to_list(inputs), &to_list(deps))?)
}
