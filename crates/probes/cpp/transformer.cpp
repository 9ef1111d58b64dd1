// A realistic model for the leak: a stack of pre-norm transformer blocks
// whose attention projects q, k and v with one fused matrix and `split`s the
// result in three, the most common use of `split` in real models. Per cycle:
// random weights (about 200 MiB with the defaults), evaluated, a compiled
// forward pass capturing them, one run, drop; then what the cycle left behind.
//
//   transformer [--cycles N] [--layers N] [--d-model N] [--heads N]
//               [--ffn N] [--seq N]
//
// Output, one line per cycle, after one line describing the model:
//   model <layers> weight_bytes <n>
//   cycle <i> retained_bytes <n> digest <hex>
// The digest covers the hidden state and the returned KV cache.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mlx/mlx.h"
#include "probe_output.h"
#include "transformer_model.h"

namespace mx = mlx::core;
using transformer::Config;
using transformer::forward;
using transformer::make_model;

namespace {

} // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return 2;
    }
    int v = std::atoi(argv[++i]);
    if (a == "--cycles") {
      c.cycles = v;
    } else if (a == "--layers") {
      c.layers = v;
    } else if (a == "--d-model") {
      c.d_model = v;
    } else if (a == "--heads") {
      c.heads = v;
    } else if (a == "--ffn") {
      c.ffn = v;
    } else if (a == "--seq") {
      c.seq = v;
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--cycles N] [--layers N] [--d-model N] [--heads N] "
          "[--ffn N] [--seq N]\n",
          argv[0]);
      return 2;
    }
  }
  if (c.cycles <= 0 || c.layers <= 0 || c.heads <= 0 || c.ffn <= 0 ||
      c.seq <= 0 || c.d_model <= 0 || c.d_model % c.heads != 0) {
    std::fprintf(stderr, "sizes must be positive, d-model a multiple of heads\n");
    return 2;
  }

  auto input =
      mx::random::normal({c.seq, c.d_model}, mx::float32, mx::random::key(0));
  mx::eval(input);
  for (int cycle = 0; cycle < c.cycles; ++cycle) {
    mx::synchronize();
    auto base = mx::get_active_memory();
    probe::Census census;
    uint64_t d = 0;
    {
      auto layers = make_model(c);
      std::vector<mx::array> all;
      for (auto& l : layers) {
        all.insert(all.end(), {l.norm1, l.wqkv, l.wo, l.norm2, l.w_up, l.w_down});
      }
      mx::eval(all);
      if (cycle == 0) {
        size_t bytes = 0;
        for (auto& w : all) {
          bytes += w.nbytes();
        }
        std::printf("model %d weight_bytes %zu\n", c.layers, bytes);
      }
      all.clear();
      auto fn = mx::compile([layers, heads = c.heads](
                                const std::vector<mx::array>& in) {
        return forward(layers, in[0], heads);
      });
      auto outs = fn({input});
      mx::eval(outs);
      for (auto& o : outs) {
        d = d * 31 + probe::digest(o);
      }
    }
    probe::print_cycle(cycle, probe::active_since(base), d);
    census.print(cycle);
  }
  return 0;
}
