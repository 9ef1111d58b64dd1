//! The raw cxx bridges, one module per area, each paired with
//! `cpp/<area>.cc`. Everything here mirrors MLX one to one; the safe API in
//! the crate root is built on top. The opaque `Array` and `ArrayList` types
//! live in [`mod@array`] and are shared with the other bridges by type alias.

pub mod array;
#[cfg(feature = "fuzz")]
pub mod fuzz;
pub mod linalg;
pub mod memory;
pub mod ops;
pub mod random;
pub mod transforms;
