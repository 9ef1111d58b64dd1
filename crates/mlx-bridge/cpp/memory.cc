// Allocator statistics (mlx/memory.h). None of these throw on the CPU backend.
#include "mlx-bridge/src/ffi/memory.rs.h"

namespace mlx_bridge {

std::size_t get_active_memory() {
  return mx::get_active_memory();
}
std::size_t get_peak_memory() {
  return mx::get_peak_memory();
}
std::size_t get_cache_memory() {
  return mx::get_cache_memory();
}
void reset_peak_memory() {
  mx::reset_peak_memory();
}
void clear_cache() {
  mx::clear_cache();
}
std::size_t set_cache_limit(std::size_t limit) {
  return mx::set_cache_limit(limit);
}

} // namespace mlx_bridge
