//! Random numbers (mlx/random.h), always from an explicit key: the same key
//! gives bit-identical results, independent of MLX's global key sequence.

use crate::array::from_list_n;
use crate::ffi::random as raw;
use crate::{Array, Dtype, Result};

/// A PRNG key (a `u32` array of shape `[2]`) from a seed. Panics only if
/// MLX cannot allocate it.
pub fn key(seed: u64) -> Array {
    Array::from_raw(raw::random_key(seed).expect("MLX failed to allocate a PRNG key"))
}

/// Two new independent keys from `key`.
pub fn split(key: &Array) -> Result<(Array, Array)> {
    let [a, b] = from_list_n("random::split", &*raw::random_split(key.as_raw())?)?;
    Ok((a, b))
}

/// `num` new keys stacked in one array of shape `[num, 2]`.
pub fn split_n(key: &Array, num: i32) -> Result<Array> {
    Ok(Array::from_raw(raw::random_split_n(key.as_raw(), num)?))
}

/// Standard normal samples.
pub fn normal(shape: &[i32], dtype: Dtype, key: &Array) -> Result<Array> {
    normal_with(shape, dtype, 0.0, 1.0, key)
}

/// Normal samples with mean `loc` and standard deviation `scale`.
pub fn normal_with(
    shape: &[i32],
    dtype: Dtype,
    loc: f32,
    scale: f32,
    key: &Array,
) -> Result<Array> {
    Ok(Array::from_raw(raw::random_normal(
        shape,
        dtype.to_raw(),
        loc,
        scale,
        key.as_raw(),
    )?))
}

/// Uniform samples in `[low, high)`.
pub fn uniform(low: f32, high: f32, shape: &[i32], dtype: Dtype, key: &Array) -> Result<Array> {
    Ok(Array::from_raw(raw::random_uniform(
        low,
        high,
        shape,
        dtype.to_raw(),
        key.as_raw(),
    )?))
}

/// Random `u32` bits.
pub fn bits(shape: &[i32], key: &Array) -> Result<Array> {
    Ok(Array::from_raw(raw::random_bits(shape, key.as_raw())?))
}
