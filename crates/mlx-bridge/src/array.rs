//! [`Array`], [`Dtype`], construction, inspection, read-back and evaluation.

use crate::ffi::array as raw;
use crate::{Error, Result};
use cxx::UniquePtr;
use std::fmt;

/// MLX element types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    Bool,
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
    F16,
    F32,
    F64,
    BF16,
    Complex64,
    /// A dtype code this crate does not know (a newer MLX); passing it back
    /// to MLX fails with an error.
    Unknown(u8),
}

impl Dtype {
    /// Bytes per element (0 for `Unknown`).
    pub fn size_of(self) -> usize {
        match self {
            Dtype::Bool | Dtype::U8 | Dtype::I8 => 1,
            Dtype::U16 | Dtype::I16 | Dtype::F16 | Dtype::BF16 => 2,
            Dtype::U32 | Dtype::I32 | Dtype::F32 => 4,
            Dtype::U64 | Dtype::I64 | Dtype::F64 | Dtype::Complex64 => 8,
            Dtype::Unknown(_) => 0,
        }
    }

    pub(crate) fn to_raw(self) -> raw::Dtype {
        match self {
            Dtype::Bool => raw::Dtype::Bool,
            Dtype::U8 => raw::Dtype::U8,
            Dtype::U16 => raw::Dtype::U16,
            Dtype::U32 => raw::Dtype::U32,
            Dtype::U64 => raw::Dtype::U64,
            Dtype::I8 => raw::Dtype::I8,
            Dtype::I16 => raw::Dtype::I16,
            Dtype::I32 => raw::Dtype::I32,
            Dtype::I64 => raw::Dtype::I64,
            Dtype::F16 => raw::Dtype::F16,
            Dtype::F32 => raw::Dtype::F32,
            Dtype::F64 => raw::Dtype::F64,
            Dtype::BF16 => raw::Dtype::BF16,
            Dtype::Complex64 => raw::Dtype::C64,
            Dtype::Unknown(code) => raw::Dtype { repr: code },
        }
    }

    fn from_raw(d: raw::Dtype) -> Self {
        match d {
            raw::Dtype::Bool => Dtype::Bool,
            raw::Dtype::U8 => Dtype::U8,
            raw::Dtype::U16 => Dtype::U16,
            raw::Dtype::U32 => Dtype::U32,
            raw::Dtype::U64 => Dtype::U64,
            raw::Dtype::I8 => Dtype::I8,
            raw::Dtype::I16 => Dtype::I16,
            raw::Dtype::I32 => Dtype::I32,
            raw::Dtype::I64 => Dtype::I64,
            raw::Dtype::F16 => Dtype::F16,
            raw::Dtype::F32 => Dtype::F32,
            raw::Dtype::F64 => Dtype::F64,
            raw::Dtype::BF16 => Dtype::BF16,
            raw::Dtype::C64 => Dtype::Complex64,
            other => Dtype::Unknown(other.repr),
        }
    }
}

/// A handle to an MLX array. Operations build a lazy graph; data is computed
/// on [`Array::eval`], [`eval`] or when read back. `Clone` shares the same
/// array (no copy), as MLX does.
pub struct Array {
    raw: UniquePtr<raw::Array>,
}

/// Checks that `shape` has no negative dimension and `len` elements.
fn check_shape(what: &str, len: usize, shape: &[i32]) -> Result<()> {
    let mut n: usize = 1;
    for &d in shape {
        if d < 0 {
            return Err(Error::new(format!(
                "[{what}] negative dimension {d} in shape {shape:?}"
            )));
        }
        n = n.saturating_mul(d as usize);
    }
    if n != len {
        return Err(Error::new(format!(
            "[{what}] data has {len} elements but shape {shape:?} needs {n}"
        )));
    }
    Ok(())
}

macro_rules! from_slice {
    ($(#[$doc:meta])* $name:ident, $t:ty, $raw:ident) => {
        $(#[$doc])*
        pub fn $name(data: &[$t], shape: &[i32]) -> Result<Array> {
            check_shape(stringify!($name), data.len(), shape)?;
            Ok(Array::from_raw(raw::$raw(data, shape)?))
        }
    };
}

macro_rules! to_vec {
    ($(#[$doc:meta])* $name:ident, $t:ty, $dtype:expr, $n:literal) => {
        $(#[$doc])*
        pub fn $name(&self) -> Result<Vec<$t>> {
            let bytes = self.read_bytes(stringify!($name), $dtype)?;
            Ok(bytes.chunks_exact($n).map(|c| <$t>::from_ne_bytes(c.try_into().unwrap())).collect())
        }
    };
}

impl Array {
    pub(crate) fn from_raw(raw: UniquePtr<raw::Array>) -> Self {
        debug_assert!(!raw.is_null());
        Array { raw }
    }

    /// The bridged C++ object, for calling [`crate::ffi`] functions directly.
    pub fn as_raw(&self) -> &raw::Array {
        &self.raw
    }

    from_slice!(
        /// A new `f32` array with a copy of `data`, laid out row-major in `shape`.
        /// Errors if the shape's element count differs from `data.len()`.
        from_f32, f32, array_from_f32
    );
    from_slice!(
        /// A new `i32` array; see [`Array::from_f32`].
        from_i32, i32, array_from_i32
    );
    from_slice!(
        /// A new `u32` array; see [`Array::from_f32`].
        from_u32, u32, array_from_u32
    );
    from_slice!(
        /// A new `i64` array; see [`Array::from_f32`].
        from_i64, i64, array_from_i64
    );
    from_slice!(
        /// A new `f64` array; see [`Array::from_f32`].
        from_f64, f64, array_from_f64
    );
    from_slice!(
        /// A new `u8` array; see [`Array::from_f32`].
        from_u8, u8, array_from_u8
    );
    from_slice!(
        /// A new `bool` array; see [`Array::from_f32`].
        from_bool, bool, array_from_bool
    );

    /// A 0-d `f32` array. Panics only if MLX cannot allocate 4 bytes.
    pub fn scalar_f32(v: f32) -> Array {
        Array::from_raw(raw::array_scalar_f32(v).expect("MLX failed to allocate a scalar"))
    }

    /// A 0-d `i32` array. Panics only if MLX cannot allocate 4 bytes.
    pub fn scalar_i32(v: i32) -> Array {
        Array::from_raw(raw::array_scalar_i32(v).expect("MLX failed to allocate a scalar"))
    }

    /// The shape (known without evaluating).
    pub fn shape(&self) -> Vec<i32> {
        raw::array_shape(&self.raw)
    }

    pub fn dtype(&self) -> Dtype {
        Dtype::from_raw(raw::array_dtype(&self.raw))
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        raw::array_size(&self.raw)
    }

    pub fn ndim(&self) -> usize {
        raw::array_ndim(&self.raw)
    }

    /// `size() * itemsize`.
    pub fn nbytes(&self) -> usize {
        raw::array_nbytes(&self.raw)
    }

    /// MLX's identity of the underlying node: equal for clones.
    pub fn id(&self) -> usize {
        raw::array_id(&self.raw)
    }

    /// Evaluates this array (and what it depends on).
    pub fn eval(&self) -> Result<()> {
        Ok(raw::array_eval(&self.raw)?)
    }

    /// Converts to `dtype` (same as [`crate::astype`]).
    pub fn astype(&self, dtype: Dtype) -> Result<Array> {
        crate::astype(self, dtype)
    }

    /// Evaluates and returns the elements' bytes row-major, in the array's
    /// own dtype (native byte order): the exact bits, for any dtype.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut bytes = vec![0u8; self.nbytes()];
        raw::array_copy_bytes(&self.raw, &mut bytes)?;
        Ok(bytes)
    }

    /// Evaluates and copies the data out row-major. The dtype must be
    /// `expected`: readers never convert implicitly (use [`Array::astype`]).
    fn read_bytes(&self, what: &str, expected: Dtype) -> Result<Vec<u8>> {
        let dtype = self.dtype();
        if dtype != expected {
            return Err(Error::new(format!(
                "[{what}] array has dtype {dtype:?}, expected {expected:?}; convert with astype first"
            )));
        }
        let mut bytes = vec![0u8; self.nbytes()];
        raw::array_copy_bytes(&self.raw, &mut bytes)?;
        Ok(bytes)
    }

    to_vec!(
        /// Evaluates and returns the elements row-major. Errors if the dtype
        /// is not `f32` (no implicit conversion) or evaluation fails.
        to_vec_f32, f32, Dtype::F32, 4
    );
    to_vec!(
        /// Like [`Array::to_vec_f32`] for `i32`.
        to_vec_i32, i32, Dtype::I32, 4
    );
    to_vec!(
        /// Like [`Array::to_vec_f32`] for `u32`.
        to_vec_u32, u32, Dtype::U32, 4
    );
    to_vec!(
        /// Like [`Array::to_vec_f32`] for `i64`.
        to_vec_i64, i64, Dtype::I64, 8
    );
    to_vec!(
        /// Like [`Array::to_vec_f32`] for `f64`.
        to_vec_f64, f64, Dtype::F64, 8
    );
    to_vec!(
        /// Like [`Array::to_vec_f32`] for `u8`.
        to_vec_u8, u8, Dtype::U8, 1
    );

    /// Like [`Array::to_vec_f32`] for `bool`.
    pub fn to_vec_bool(&self) -> Result<Vec<bool>> {
        Ok(self
            .read_bytes("to_vec_bool", Dtype::Bool)?
            .into_iter()
            .map(|b| b != 0)
            .collect())
    }

    /// Like [`Array::to_vec_f32`] for `complex64`, as `(re, im)` pairs.
    pub fn to_vec_complex64(&self) -> Result<Vec<(f32, f32)>> {
        let bytes = self.read_bytes("to_vec_complex64", Dtype::Complex64)?;
        Ok(bytes
            .chunks_exact(8)
            .map(|c| {
                let re = f32::from_ne_bytes(c[..4].try_into().unwrap());
                let im = f32::from_ne_bytes(c[4..].try_into().unwrap());
                (re, im)
            })
            .collect())
    }

    /// The single value of a one-element `bool` array (e.g. [`crate::array_equal`]).
    pub fn item_bool(&self) -> Result<bool> {
        self.single(self.to_vec_bool()?)
    }

    /// The single value of a one-element `f32` array.
    pub fn item_f32(&self) -> Result<f32> {
        self.single(self.to_vec_f32()?)
    }

    fn single<T: Copy>(&self, v: Vec<T>) -> Result<T> {
        match v.as_slice() {
            [x] => Ok(*x),
            _ => Err(Error::new(format!(
                "[item] array of shape {:?} has {} elements, expected 1",
                self.shape(),
                v.len()
            ))),
        }
    }
}

impl Clone for Array {
    fn clone(&self) -> Self {
        Array::from_raw(raw::array_clone(&self.raw))
    }
}

impl AsRef<Array> for Array {
    fn as_ref(&self) -> &Array {
        self
    }
}

impl fmt::Debug for Array {
    /// Shape and dtype only: printing values would force evaluation.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Array")
            .field("shape", &self.shape())
            .field("dtype", &self.dtype())
            .finish()
    }
}

/// Builds a C++ vector of arrays (sharing, not copying, the arrays).
pub(crate) fn to_list<I>(arrays: I) -> UniquePtr<raw::ArrayList>
where
    I: IntoIterator,
    I::Item: AsRef<Array>,
{
    let mut list = raw::array_list_new();
    for a in arrays {
        raw::array_list_push(list.pin_mut(), a.as_ref().as_raw());
    }
    list
}

/// The arrays of a C++ vector as Rust handles.
pub(crate) fn from_list(list: &raw::ArrayList) -> Result<Vec<Array>> {
    (0..raw::array_list_len(list))
        .map(|i| Ok(Array::from_raw(raw::array_list_get(list, i)?)))
        .collect()
}

/// Moves exactly `N` arrays out of a list returned by a multi-output op.
pub(crate) fn from_list_n<const N: usize>(what: &str, list: &raw::ArrayList) -> Result<[Array; N]> {
    let v = from_list(list)?;
    let n = v.len();
    v.try_into()
        .map_err(|_| Error::new(format!("[{what}] MLX returned {n} arrays, expected {N}")))
}

/// Evaluates all the given arrays together (one graph traversal).
/// Accepts `&[Array]`, `&[&Array]`, `[&a, &b]`, `Vec<Array>`, ...
pub fn eval<I>(arrays: I) -> Result<()>
where
    I: IntoIterator,
    I::Item: AsRef<Array>,
{
    Ok(raw::eval(&to_list(arrays))?)
}

/// Waits for all work queued on the default stream.
pub fn synchronize() -> Result<()> {
    Ok(raw::synchronize()?)
}
