//! MLX allocator statistics (mlx/memory.h), in bytes.

use crate::ffi::memory as raw;

/// Memory held by live arrays (not counting the buffer cache).
pub fn active() -> usize {
    raw::get_active_memory()
}

/// Highest `active()` since start or the last [`reset_peak`].
pub fn peak() -> usize {
    raw::get_peak_memory()
}

/// Freed buffers kept for reuse.
pub fn cache() -> usize {
    raw::get_cache_memory()
}

pub fn reset_peak() {
    raw::reset_peak_memory()
}

/// Returns cached buffers to the system.
pub fn clear_cache() {
    raw::clear_cache()
}

/// Sets the cache limit (0 disables the cache); returns the previous one.
pub fn set_cache_limit(limit: usize) -> usize {
    raw::set_cache_limit(limit)
}
