//! The coverage build's edge map, shared by the counter compiled into
//! libmlx (`mlx-patched/coverage/edges.cpp`, which gets the size as
//! `MLX_FORK_COVERAGE_MAP_SIZE` from the build) and the fuzzer that reads it
//! (`mlx_fuzz::edges`). The worker reports its library's size at its start,
//! and the driver refuses another.

/// Counters in the map: a power of two, as the counter masks an edge's
/// index with `MAP_SIZE - 1`.
pub const MAP_SIZE: usize = 1 << 20;

const _: () = assert!(MAP_SIZE.is_power_of_two());
