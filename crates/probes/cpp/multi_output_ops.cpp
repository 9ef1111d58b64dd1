// Every multi-output operation MLX's CPU backend can run (every public caller
// of array::make_arrays), inside a compiled function that captures weights
// evaluated outside it: the report's scenario with `split` replaced by the op.
// Per cycle: make the weights, evaluate them, compile, run once, drop, and
// print what active memory the cycle left behind.
//
//   multi_output_ops --op <name> [--cycles N] [--blocks N] [--dim N]
//   multi_output_ops --list
//
// Output, one line per cycle:
//   cycle <i> retained_bytes <n> digest <hex>
//
// Each block computes h = x @ w, runs the op on h, and folds all of the op's
// outputs back into a dim x dim matrix, so every output is used. The digest
// covers the final output's bits; weights come from fixed PRNG keys.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "mlx/mlx.h"
#include "probe_output.h"

namespace mx = mlx::core;

namespace {

using Op = std::function<mx::array(const mx::array&)>;

mx::array mean_abs(const mx::array& a) {
  return mx::mean(mx::abs(a));
}

// name -> the op, with all of its outputs folded back into an array of h's
// shape (dim divisible by 96). The folding uses ops compile does not fuse
// (matmul, concatenate, slice, take) wherever it can, so the graph keeps the
// op's group as traced.
const std::map<std::string, Op>& ops() {
  static const std::map<std::string, Op> table = {
      {"split2",
       [](const mx::array& h) {
         auto p = mx::split(h, 2, -1);
         return mx::concatenate({p[1], p[0]}, -1);
       }},
      {"split3",
       [](const mx::array& h) {
         auto p = mx::split(h, 3, -1);
         return mx::concatenate({p[2], p[0], p[1]}, -1);
       }},
      {"split_at_indices",
       [](const mx::array& h) {
         auto p = mx::split(h, mx::Shape{10, 40}, -1);
         return mx::concatenate({p[2], p[1], p[0]}, -1);
       }},
      {"divmod",
       [](const mx::array& h) {
         auto qr = mx::divmod(h, mx::array(0.25f));
         auto both = mx::concatenate({qr[1], qr[0]}, -1);
         auto n = h.shape(-1);
         return mx::slice(both, {0, n / 2}, {h.shape(0), n / 2 + n});
       }},
      {"qr",
       [](const mx::array& h) {
         auto [q, r] = mx::linalg::qr(h);
         return mx::matmul(q, r);
       }},
      {"svd",
       [](const mx::array& h) {
         auto usv = mx::linalg::svd(h);
         return mx::matmul(mx::matmul(usv[0], usv[2]), h);
       }},
      {"eigh",
       [](const mx::array& h) {
         // Reads the lower triangle of h only.
         auto [w, v] = mx::linalg::eigh(h);
         return mx::matmul(v, h);
       }},
      {"eig",
       [](const mx::array& h) {
         auto [w, v] = mx::linalg::eig(h);
         return mx::matmul(mx::real(v), h);
       }},
      {"lu",
       [](const mx::array& h) {
         auto plu = mx::linalg::lu(h);
         return mx::take(mx::matmul(plu[1], plu[2]), plu[0], 0);
       }},
      {"lu_factor",
       [](const mx::array& h) {
         // The pivots only join the graph: gathering rows by them would make
         // the next block's input singular.
         auto [lu, pivots] = mx::linalg::lu_factor(h);
         auto d = mx::depends({lu}, {pivots});
         return mx::matmul(d[0], h);
       }},
      {"quantize",
       [](const mx::array& h) {
         auto q = mx::quantize(h, 32, 4);
         return mx::dequantize(q[0], q[1], q[2], 32, 4);
       }},
      {"depends",
       [](const mx::array& h) {
         auto d = mx::depends({h, h * 2.0f}, {mx::sum(h)});
         return d[0] + d[1];
       }},
      {"custom_vjp",
       [](const mx::array& h) {
         auto f = mx::custom_vjp(
             [](const std::vector<mx::array>& in) {
               return std::vector<mx::array>{in[0] * 2.0f, in[0] + 1.0f};
             },
             [](const std::vector<mx::array>&,
                const std::vector<mx::array>& cotangents,
                const std::vector<mx::array>&) {
               return std::vector<mx::array>{cotangents[0]};
             });
         auto out = f({h});
         return out[0] - out[1];
       }},
      // Compile fuses the element-wise ops into one primitive with two
      // outputs (a and b), each consumed by a matmul outside the fusion.
      {"fused_elementwise",
       [](const mx::array& h) {
         auto a = mx::exp(h * 0.01f);
         auto b = mx::sin(h);
         return mx::matmul(a, mx::transpose(b));
       }},
  };
  return table;
}

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(
      stderr,
      "usage: %s --op <name> [--cycles N] [--blocks N] [--dim N]\n"
      "       %s --list\n",
      argv0,
      argv0);
  std::exit(2);
}

} // namespace

int main(int argc, char** argv) {
  std::string name;
  int cycles = 3, blocks = 8, dim = 96;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--list") {
      for (auto& [n, _] : ops()) {
        std::printf("%s\n", n.c_str());
      }
      return 0;
    }
    if (i + 1 >= argc) {
      usage(argv[0]);
    }
    std::string v = argv[++i];
    if (a == "--op") {
      name = v;
    } else if (a == "--cycles") {
      cycles = std::atoi(v.c_str());
    } else if (a == "--blocks") {
      blocks = std::atoi(v.c_str());
    } else if (a == "--dim") {
      dim = std::atoi(v.c_str());
    } else {
      usage(argv[0]);
    }
  }
  auto found = ops().find(name);
  if (found == ops().end() || cycles <= 0 || blocks <= 0 || dim <= 0 ||
      dim % 96 != 0) {
    std::fprintf(
        stderr, "unknown op `%s` (see --list), or bad sizes\n", name.c_str());
    usage(argv[0]);
  }
  auto op = found->second;

  auto input = mx::random::normal({dim, dim}, mx::float32, mx::random::key(0));
  mx::eval(input);
  for (int cycle = 0; cycle < cycles; ++cycle) {
    mx::synchronize();
    auto base = mx::get_active_memory();
    probe::Census census;
    uint64_t d = 0;
    {
      std::vector<mx::array> weights;
      for (int i = 0; i < blocks; ++i) {
        // Scaled by 1/sqrt(dim), so x keeps its magnitude block to block.
        weights.push_back(mx::random::normal(
            {dim, dim},
            mx::float32,
            0.0f,
            1.0f / std::sqrt(static_cast<float>(dim)),
            mx::random::key(1 + i)));
      }
      mx::eval(weights);
      auto fn = mx::compile([weights, op](const std::vector<mx::array>& in) {
        auto x = in[0];
        for (auto& w : weights) {
          x = op(mx::matmul(x, w));
        }
        return std::vector<mx::array>{x};
      });
      auto out = fn({input})[0];
      mx::eval(out);
      d = probe::digest(out);
    }
    probe::print_cycle(cycle, probe::active_since(base), d);
    census.print(cycle);
  }
  return 0;
}
