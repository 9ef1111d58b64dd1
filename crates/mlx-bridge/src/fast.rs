//! Fused ops from mlx/fast.h. Only the forward ops are exposed; their
//! (multi-output) VJPs are reached through [`crate::vjp`].

use crate::ffi::ops as raw;
use crate::{Array, Result};
use cxx::UniquePtr;

fn opt(a: Option<&Array>) -> UniquePtr<crate::ffi::array::Array> {
    a.map_or_else(UniquePtr::null, |a| {
        crate::ffi::array::array_clone(a.as_raw())
    })
}

/// RMS normalization over the last axis, optionally scaled by `weight`.
pub fn rms_norm(x: &Array, weight: Option<&Array>, eps: f32) -> Result<Array> {
    Ok(Array::from_raw(raw::rms_norm(
        x.as_raw(),
        opt(weight),
        eps,
    )?))
}

/// Layer normalization over the last axis with optional `weight` and `bias`.
pub fn layer_norm(
    x: &Array,
    weight: Option<&Array>,
    bias: Option<&Array>,
    eps: f32,
) -> Result<Array> {
    Ok(Array::from_raw(raw::layer_norm(
        x.as_raw(),
        opt(weight),
        opt(bias),
        eps,
    )?))
}
