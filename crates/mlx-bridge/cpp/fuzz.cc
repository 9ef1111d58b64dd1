// Release paths for the fuzzer (feature `fuzz`). Indices are checked with
// `at`, so a bad index is an exception, never a stray write.
#include "mlx-bridge/src/ffi/fuzz.rs.h"

// Defined only by the fork's census builds; weak, so null elsewhere.
extern "C" __attribute__((weak)) long long mlx_fork_live_array_descs();

namespace mlx_bridge {

void list_assign_copy(ArrayList& list, std::size_t i, const Array& a) {
  list.v.at(i) = a.a;
}

std::unique_ptr<Array> list_take(ArrayList& list, std::size_t i) {
  return std::make_unique<Array>(Array{std::move(list.v.at(i))});
}

void list_assign_move(ArrayList& list, std::size_t i, Array& a) {
  list.v.at(i) = std::move(a.a);
}

void list_overwrite(ArrayList& list, std::size_t i, const Array& a) {
  list.v.at(i).overwrite_descriptor(a.a);
}

void list_erase(ArrayList& list, std::size_t i) {
  if (i >= list.v.size()) {
    throw std::out_of_range("list_erase: index past the end");
  }
  list.v.erase(list.v.begin() + static_cast<std::ptrdiff_t>(i));
}

void async_eval(const ArrayList& list) {
  mx::async_eval(list.v);
}

std::int64_t live_array_descs() {
  return mlx_fork_live_array_descs ? mlx_fork_live_array_descs() : -1;
}

} // namespace mlx_bridge
