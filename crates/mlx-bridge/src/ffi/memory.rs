//! Bridge for mlx/memory.h: allocator statistics and the buffer cache.

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

        // Counter reads and cache trimming; they do not throw on the CPU
        // allocator, so no Result.
        fn get_active_memory() -> usize;
        fn get_peak_memory() -> usize;
        fn get_cache_memory() -> usize;
        fn reset_peak_memory();
        fn clear_cache();
        fn set_cache_limit(limit: usize) -> usize;
    }
}
