//! Linear algebra (mlx/linalg.h). MLX implements these on the CPU only;
//! the bridge always runs them on the CPU device, so they also work where
//! the default device is a GPU. Inputs must be floating point with
//! `ndim >= 2` (batched over leading axes).

use crate::array::{from_list, from_list_n};
use crate::ffi::linalg as raw;
use crate::{Array, Error, Result};

/// QR decomposition `a = q @ r`.
pub fn qr(a: &Array) -> Result<(Array, Array)> {
    let [q, r] = from_list_n("linalg::qr", &*raw::linalg_qr(a.as_raw())?)?;
    Ok((q, r))
}

/// Full SVD `a = u @ diag(s) @ vt`: `(u, s, vt)`.
pub fn svd(a: &Array) -> Result<(Array, Array, Array)> {
    let [u, s, vt] = from_list_n("linalg::svd", &*raw::linalg_svd(a.as_raw(), true)?)?;
    Ok((u, s, vt))
}

/// Singular values only (`compute_uv = false`).
pub fn svd_values(a: &Array) -> Result<Array> {
    let mut v = from_list(&*raw::linalg_svd(a.as_raw(), false)?)?;
    match v.len() {
        1 => Ok(v.remove(0)),
        n => Err(Error::new(format!(
            "[linalg::svd] MLX returned {n} arrays, expected 1"
        ))),
    }
}

/// Eigen-decomposition of a symmetric/Hermitian matrix using the `"L"` or
/// `"U"` triangle: `(eigenvalues ascending, eigenvectors as columns)`.
pub fn eigh(a: &Array, uplo: &str) -> Result<(Array, Array)> {
    let [w, v] = from_list_n("linalg::eigh", &*raw::linalg_eigh(a.as_raw(), uplo)?)?;
    Ok((w, v))
}

/// General eigen-decomposition; both outputs are `complex64` (use
/// [`crate::real`] / [`crate::imag`] or [`Array::to_vec_complex64`]).
pub fn eig(a: &Array) -> Result<(Array, Array)> {
    let [w, v] = from_list_n("linalg::eig", &*raw::linalg_eig(a.as_raw())?)?;
    Ok((w, v))
}

/// LU decomposition `(p, l, u)`. As in MLX, `p` holds row indices (`u32`),
/// not a permutation matrix: `a = l[p, :] @ u` for 2-D inputs.
pub fn lu(a: &Array) -> Result<(Array, Array, Array)> {
    let [p, l, u] = from_list_n("linalg::lu", &*raw::linalg_lu(a.as_raw())?)?;
    Ok((p, l, u))
}

/// Packed LU factorization (LAPACK style): `(lu, pivots)`, pivots `u32`.
pub fn lu_factor(a: &Array) -> Result<(Array, Array)> {
    let [lu, pivots] = from_list_n("linalg::lu_factor", &*raw::linalg_lu_factor(a.as_raw())?)?;
    Ok((lu, pivots))
}

/// Matrix inverse.
pub fn inv(a: &Array) -> Result<Array> {
    Ok(Array::from_raw(raw::linalg_inv(a.as_raw())?))
}

/// 2-norm of the flattened array.
pub fn norm(a: &Array) -> Result<Array> {
    Ok(Array::from_raw(raw::linalg_norm(a.as_raw())?))
}
