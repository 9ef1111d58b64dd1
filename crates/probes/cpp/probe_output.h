// What every probe measures and prints, in the one format the suite parses
// (`cycle <i> retained_bytes <n> digest <hex>`, see src/lib.rs).

#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "mlx/mlx.h"

// The live-descriptor census of the fork's sanitizer builds (the fork-only
// patch behind MLX_FORK_DESC_CENSUS). Weak: null in every other build.
extern "C" __attribute__((weak)) long long mlx_fork_live_array_descs();

namespace probe {

// Live array descriptors since it was made: a leaked graph that was never
// evaluated holds no buffer, so only this count sees it. Prints
// `census <i> descriptors_retained <n>` when the library has the census,
// nothing otherwise.
struct Census {
  long long base = mlx_fork_live_array_descs ? mlx_fork_live_array_descs() : 0;

  void print(int cycle) const {
    if (mlx_fork_live_array_descs) {
      mlx::core::synchronize();
      std::printf(
          "census %d descriptors_retained %lld\n",
          cycle,
          mlx_fork_live_array_descs() - base);
      std::fflush(stdout);
    }
  }
};

// FNV-1a over an evaluated float32 array's bytes: equal digests mean
// bit-identical outputs.
inline uint64_t digest(const mlx::core::array& a) {
  auto bytes = reinterpret_cast<const unsigned char*>(a.data<float>());
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < a.nbytes(); ++i) {
    h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return h;
}

// Active memory once all work is done, relative to `base`.
inline long long active_since(size_t base) {
  mlx::core::synchronize();
  return static_cast<long long>(mlx::core::get_active_memory()) -
      static_cast<long long>(base);
}

inline void print_cycle(int cycle, long long retained, uint64_t digest) {
  std::printf(
      "cycle %d retained_bytes %lld digest %016llx\n",
      cycle,
      retained,
      static_cast<unsigned long long>(digest));
  std::fflush(stdout);
}

} // namespace probe
