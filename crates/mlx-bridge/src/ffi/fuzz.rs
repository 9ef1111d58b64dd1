//! Bridge for the release paths a graph-lifetime fuzzer drives: a vector of
//! arrays whose elements are replaced by copy assignment, move assignment
//! or `overwrite_descriptor`, or erased, or let go of on two threads at
//! once, plus `async_eval`, the
//! live-descriptor census and a bounds check of an evaluated array's data.
//! Built only with the `fuzz` feature.

pub use bridge::*;

#[cxx::bridge(namespace = "mlx_bridge")]
mod bridge {
    // ---- Shared types ----
    // (none)

    // ---- Rust to C++ ----
    // (nothing)

    // ---- C++ to Rust ----
    unsafe extern "C++" {
        include!("bridge.h");

        type Array = crate::ffi::array::Array;
        type ArrayList = crate::ffi::array::ArrayList;

        // Each takes an index and throws std::out_of_range past the end.
        /// `list[i] = a` (copy assignment).
        fn list_assign_copy(list: Pin<&mut ArrayList>, i: usize, a: &Array) -> Result<()>;
        /// Moves `list[i]` out, leaving a moved-from array (no descriptor) behind.
        fn list_take(list: Pin<&mut ArrayList>, i: usize) -> Result<UniquePtr<Array>>;
        /// `list[i] = std::move(a)` (move assignment); `a` is left moved-from.
        fn list_assign_move(list: Pin<&mut ArrayList>, i: usize, a: Pin<&mut Array>) -> Result<()>;
        /// `list[i].overwrite_descriptor(a)`.
        fn list_overwrite(list: Pin<&mut ArrayList>, i: usize, a: &Array) -> Result<()>;
        /// `list.erase(list.begin() + i)`.
        fn list_erase(list: Pin<&mut ArrayList>, i: usize) -> Result<()>;
        /// Destroys `a` on a thread of its own and `b` on the calling thread
        /// at the same instant (a spin barrier, then a random spin of up to
        /// 2048 iterations on each side).
        fn release_together(a: UniquePtr<Array>, b: UniquePtr<Array>) -> Result<()>;

        fn async_eval(list: &ArrayList) -> Result<()>;
        /// Live `ArrayDesc` objects on a census build (the fork-only patch
        /// behind `MLX_FORK_DESC_CENSUS`), -1 elsewhere.
        fn live_array_descs() -> i64;
        /// Empty if the evaluated `a`'s data (its offset plus `data_size`
        /// elements) lies within its buffer; otherwise the figures.
        fn buffer_overrun(a: &Array) -> String;
        /// `set_compile_mode(enabled)`, or `no_fuse` when `fuse` is false.
        fn set_compile_fusion(fuse: bool);
    }
}
