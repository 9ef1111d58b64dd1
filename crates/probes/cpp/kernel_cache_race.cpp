// One of several processes that build the same CPU kernels at the same
// instant into one cache folder (MLX writes them under
// `$TMPDIR/mlx/<version>/cpu`). Waits until the file named by its argument
// exists, then compiles and runs twelve fused element-wise functions, each
// a kernel of its own. A process that loads a library another process is
// still writing fails here (`Could not load C++ shared library ...: file
// too short`, or invalid ELF header).
//
// usage: kernel_cache_race <start file>
// prints `kernels built 12` and exits 0, or prints the error and exits 1.

#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "mlx/mlx.h"

namespace mx = mlx::core;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kernel_cache_race <start file>\n");
    return 2;
  }
  auto x = mx::arange(64, mx::float32);
  mx::eval(x);
  while (!std::filesystem::exists(argv[1])) {
    std::this_thread::yield();
  }
  try {
    int built = 0;
    for (int i = 0; i < 12; ++i) {
      // A chain of element-wise ops picked by the bits of i: a kernel name
      // of its own for each function.
      auto fn = mx::compile([i](const std::vector<mx::array>& in) {
        auto y = in[0] * static_cast<float>(i + 1);
        y = (i & 1) ? mx::exp(y) : mx::sin(y);
        y = (i & 2) ? mx::abs(y) : mx::negative(y);
        y = (i & 4) ? mx::square(y) : mx::cos(y);
        y = (i & 8) ? mx::sqrt(mx::abs(y)) : mx::tanh(y);
        return std::vector<mx::array>{y + 1.0f};
      });
      mx::eval(fn({x}));
      ++built;
    }
    std::printf("kernels built %d\n", built);
  } catch (const std::exception& e) {
    std::printf("failed %s\n", e.what());
    return 1;
  }
  return 0;
}
