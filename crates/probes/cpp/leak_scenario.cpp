// The leak report's scenario written against the MLX C++ API: per cycle, make
// weights, evaluate them outside the compiled function, compile a forward pass
// that splits every block's output, run it once, drop everything, and print
// how much active memory the cycle left behind.
//
// --shapes N calls the compiled function with N batch sizes (batch, 2 batch,
// ...) per cycle, so the compile cache holds N traced entries; with N > 1
// every shape is called a second time, which must replay its entry, not
// trace again. `traces` counts how often the function body ran.
//
// --threads N runs the cycles in N threads at once, each with its own
// weights and compiled function, and reports what all of them left behind.
//
// Each ingredient can be switched off (--slices, --no-eval-outside,
// --no-compile) to show that all three are needed. Weights come from fixed
// PRNG keys, so the digest of the output is comparable across builds.
//
// Output, one line per cycle, then a summary:
//   cycle <i> retained_bytes <n> live_bytes <n> traces <n> digest <hex>
//   summary cycles <n> retained_mib_per_cycle <x> digest <hex>
// live_bytes is what the cycle held just before dropping its model. With
// --threads N there is no per-cycle line, but one for the whole run:
//   threaded <n> cycles_each <n> retained_bytes <n> digest <hex>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mlx/mlx.h"
#include "probe_output.h"

namespace mx = mlx::core;

namespace {

struct Config {
  int cycles = 10;
  int blocks = 24;
  int dim = 512;
  int batch = 8;
  int shapes = 1;
  int threads = 1;
  bool split = true;
  bool eval_outside = true;
  bool compile = true;
};

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::atoi(argv[++i]);
    };
    if (a == "--cycles") {
      c.cycles = value();
    } else if (a == "--blocks") {
      c.blocks = value();
    } else if (a == "--dim") {
      c.dim = value();
    } else if (a == "--batch") {
      c.batch = value();
    } else if (a == "--shapes") {
      c.shapes = value();
    } else if (a == "--threads") {
      c.threads = value();
    } else if (a == "--slices") {
      c.split = false;
    } else if (a == "--no-eval-outside") {
      c.eval_outside = false;
    } else if (a == "--no-compile") {
      c.compile = false;
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--cycles N] [--blocks N] [--dim N] [--batch N] "
          "[--shapes N] [--threads N] [--slices] [--no-eval-outside] [--no-compile]\n",
          argv[0]);
      std::exit(2);
    }
  }
  if (c.dim % 2 != 0 || c.dim <= 0 || c.blocks <= 0 || c.batch <= 0 ||
      c.shapes <= 0 || c.threads <= 0) {
    std::fprintf(
        stderr, "dim must be even and positive, the other sizes positive\n");
    std::exit(2);
  }
  return c;
}

// One cycle: make the weights, compile a forward pass capturing them, run it
// on every input, drop it all. Returns the output digest; `live` gets the
// active memory (relative to `base`) just before the drop, `traces` how many
// times the forward pass itself ran.
uint64_t run_cycle(
    const Config& cfg,
    const std::vector<mx::array>& inputs,
    size_t base,
    long long& live,
    int& traces) {
  uint64_t d = 0;
  auto calls = std::make_shared<int>(0);
  std::vector<mx::array> weights;
  for (int i = 0; i < cfg.blocks; ++i) {
    weights.push_back(mx::random::normal(
        {cfg.dim, cfg.dim}, mx::float32, mx::random::key(1 + i)));
  }
  // Weights are captured by value, as a Python closure captures them.
  auto forward = [weights, split = cfg.split, calls](
                     const std::vector<mx::array>& in) {
    ++*calls;
    auto x = in[0];
    for (auto& w : weights) {
      auto h = mx::matmul(x, w);
      auto half = h.shape(-1) / 2;
      mx::array a = h, b = h;
      if (split) {
        auto parts = mx::split(h, 2, -1);
        a = parts[0];
        b = parts[1];
      } else {
        a = mx::slice(h, {0, 0}, {h.shape(0), half});
        b = mx::slice(h, {0, half}, {h.shape(0), h.shape(1)});
      }
      x = mx::concatenate({b, a}, -1);
    }
    return std::vector<mx::array>{x};
  };
  if (cfg.eval_outside) {
    mx::eval(weights);
  }
  std::function<std::vector<mx::array>(const std::vector<mx::array>&)> fn =
      forward;
  if (cfg.compile) {
    fn = mx::compile(forward);
  }
  std::vector<uint64_t> firsts;
  for (auto& x : inputs) {
    auto out = fn({x})[0];
    mx::eval(out);
    firsts.push_back(probe::digest(out));
    d = d * 31 + firsts.back();
  }
  // Each shape again: a compiled function replays the entry it traced.
  for (size_t i = 0; inputs.size() > 1 && i < inputs.size(); ++i) {
    auto out = fn({inputs[i]})[0];
    mx::eval(out);
    if (probe::digest(out) != firsts[i]) {
      std::fprintf(stderr, "shape %zu computed other bits the second time\n", i);
      std::exit(1);
    }
  }
  live = probe::active_since(base);
  traces = *calls;
  return d;
}

std::vector<mx::array> make_inputs(const Config& cfg) {
  std::vector<mx::array> inputs;
  for (int i = 0; i < cfg.shapes; ++i) {
    inputs.push_back(mx::random::normal(
        {cfg.batch * (i + 1), cfg.dim}, mx::float32, mx::random::key(0)));
  }
  mx::eval(inputs);
  return inputs;
}

} // namespace

int main(int argc, char** argv) {
  auto cfg = parse(argc, argv);

  if (cfg.threads > 1) {
    mx::synchronize();
    auto base = mx::get_active_memory();
    probe::Census census;
    std::vector<uint64_t> digests(cfg.threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < cfg.threads; ++t) {
      pool.emplace_back([&, t] {
        auto inputs = make_inputs(cfg);
        for (int cycle = 0; cycle < cfg.cycles; ++cycle) {
          long long live = 0;
          int traces = 0;
          auto d = run_cycle(cfg, inputs, 0, live, traces);
          if (cycle > 0 && d != digests[t]) {
            std::fprintf(stderr, "thread %d cycle %d: other output\n", t, cycle);
            std::exit(1);
          }
          digests[t] = d;
        }
      });
    }
    for (auto& t : pool) {
      t.join();
    }
    for (auto d : digests) {
      if (d != digests[0]) {
        std::fprintf(stderr, "threads computed different outputs\n");
        return 1;
      }
    }
    long long retained = probe::active_since(base);
    std::printf(
        "threaded %d cycles_each %d retained_bytes %lld digest %016llx\n",
        cfg.threads,
        cfg.cycles,
        retained,
        static_cast<unsigned long long>(digests[0]));
    census.print(0);
    return 0;
  }

  auto inputs = make_inputs(cfg);
  double total = 0;
  uint64_t first_digest = 0;
  for (int cycle = 0; cycle < cfg.cycles; ++cycle) {
    mx::synchronize();
    auto base = mx::get_active_memory();
    probe::Census census;
    long long live = 0;
    int traces = 0;
    auto d = run_cycle(cfg, inputs, base, live, traces);
    long long retained = probe::active_since(base);
    total += static_cast<double>(retained);
    if (cycle == 0) {
      first_digest = d;
    }
    std::printf(
        "cycle %d retained_bytes %lld live_bytes %lld traces %d digest %016llx\n",
        cycle,
        retained,
        live,
        traces,
        static_cast<unsigned long long>(d));
    std::fflush(stdout);
    census.print(cycle);
  }
  std::printf("summary cycles %d retained_mib_per_cycle %.2f digest %016llx\n",
              cfg.cycles, total / cfg.cycles / (1024.0 * 1024.0),
              static_cast<unsigned long long>(first_digest));
  return 0;
}
