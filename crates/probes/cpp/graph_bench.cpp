// Times the paths the patch touches: building, compiling, running and
// dropping graphs full of multi-output groups, where every array handle is
// destroyed or assigned over. Prints the elapsed nanoseconds of N cycles,
// timed inside the process so that start-up is not measured.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "mlx/mlx.h"

namespace mx = mlx::core;

int main(int argc, char** argv) {
  long iters = argc > 1 ? std::atol(argv[1]) : 100;
  std::vector<mx::array> weights;
  for (int i = 0; i < 8; ++i) {
    weights.push_back(
        mx::random::normal({64, 64}, mx::float32, mx::random::key(1 + i)));
  }
  auto x = mx::random::normal({8, 64}, mx::float32, mx::random::key(0));
  mx::eval(weights);
  mx::eval(x);
  auto forward = [weights](const std::vector<mx::array>& in) {
    auto y = in[0];
    for (auto& w : weights) {
      auto parts = mx::split(mx::matmul(y, w), 4, -1);
      y = mx::concatenate({parts[3], parts[1], parts[2], parts[0]}, -1);
    }
    return std::vector<mx::array>{y};
  };
  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < iters; ++i) {
    auto fn = mx::compile(forward);
    mx::eval(fn({x}));
    mx::eval(forward({x}));
  }
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::steady_clock::now() - start)
                .count();
  std::printf("%lld\n", static_cast<long long>(ns));
  return 0;
}
