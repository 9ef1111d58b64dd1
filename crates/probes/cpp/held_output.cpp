// Keeps one output of an unevaluated multi-output op while the other outputs
// and their consumers are dropped, then evaluates the kept one. A fix that
// breaks a sibling group while one of its outputs is still held fails here
// (wrong values, an exception, or an abort). Exit status 0 means all held
// outputs evaluated to the right values.

#include <cstdio>
#include <functional>
#include <vector>

#include "mlx/mlx.h"
#include "probe_output.h"

namespace mx = mlx::core;

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok" : "FAILED", what);
  failures += ok ? 0 : 1;
}

// Output `keep` of `make()`, after the others got a consumer each and both
// the consumers and the other outputs were dropped.
mx::array held(const std::function<std::vector<mx::array>()>& make, int keep) {
  auto outs = make();
  auto kept = outs[keep];
  std::vector<mx::array> consumers;
  for (int i = 0; i < static_cast<int>(outs.size()); ++i) {
    if (i != keep) {
      consumers.push_back(outs[i] + outs[i]);
    }
  }
  consumers.clear();
  outs.clear();
  return kept;
}

} // namespace

int main() {
  auto x = mx::reshape(mx::arange(24, mx::float32), {4, 6});
  mx::eval(x);
  probe::Census census;
  try {
    for (int parts : {2, 3}) {
      auto make = [&] { return mx::split(x, parts, 1); };
      for (int keep = 0; keep < parts; ++keep) {
        auto expected = make()[keep];
        expect(
            mx::array_equal(held(make, keep), expected).item<bool>(),
            parts == 2 ? "split in 2" : "split in 3");
      }
    }
    auto b = mx::array({4.0f});
    auto make_divmod = [&] { return mx::divmod(x, b); };
    for (int keep = 0; keep < 2; ++keep) {
      auto expected = make_divmod()[keep];
      expect(
          mx::array_equal(held(make_divmod, keep), expected).item<bool>(),
          "divmod");
    }
  } catch (const std::exception& e) {
    std::printf("FAILED with exception: %s\n", e.what());
    return 1;
  }
  census.print(0);
  return failures == 0 ? 0 : 1;
}
