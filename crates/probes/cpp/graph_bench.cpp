// Times, inside the process, the paths the patch touches. Prints the elapsed
// nanoseconds of N iterations of one workload, so start-up is not measured:
//
//   graph_bench <workload> <iterations>
//
//   report_cycle   the report's cycle: 24 MiB of weights made and evaluated,
//                  a forward pass splitting every block compiled, run, dropped
//   teardown       a graph of 1.2 million nodes, a third of them outputs of
//                  split, built and dropped without evaluation
//   assign_siblings  copy and move assignment over outputs of split
//   assign_plain     the same over single-output arrays
//   contended_release  assign_siblings on 8 threads at once, each over the
//                  outputs of a split of its own: threads that share no
//                  group must not wait for each other
//   model_forward  a compiled forward pass of the 192 MiB transformer

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mlx/mlx.h"
#include "transformer_model.h"

namespace mx = mlx::core;

namespace {

using Clock = std::chrono::steady_clock;

// Elapsed nanoseconds of `iters` calls of `work`.
long long timed(long iters, const std::function<void()>& work) {
  auto start = Clock::now();
  for (long i = 0; i < iters; ++i) {
    work();
  }
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             Clock::now() - start)
      .count();
}

long long report_cycle(long iters) {
  auto x = mx::random::normal({8, 512}, mx::float32, mx::random::key(0));
  mx::eval(x);
  return timed(iters, [&] {
    std::vector<mx::array> weights;
    for (int i = 0; i < 24; ++i) {
      weights.push_back(mx::random::normal(
          {512, 512}, mx::float32, mx::random::key(1 + i)));
    }
    mx::eval(weights);
    auto fn = mx::compile([weights](const std::vector<mx::array>& in) {
      auto y = in[0];
      for (auto& w : weights) {
        auto parts = mx::split(mx::matmul(y, w), 2, -1);
        y = mx::concatenate({parts[1], parts[0]}, -1);
      }
      return std::vector<mx::array>{y};
    });
    mx::eval(fn({x}));
  });
}

long long teardown(long iters) {
  auto x0 = mx::array({1.0f, 2.0f});
  mx::eval(x0);
  return timed(iters, [&] {
    // Six nodes per step, two of them outputs of split: 200000 steps make
    // 1.2 million nodes, each handle assigned over as the chain grows.
    auto x = x0;
    for (int i = 0; i < 200000; ++i) {
      auto parts = mx::split((x + 1.0f) * 2.0f, 2, -1);
      x = mx::negative(mx::concatenate({parts[1], parts[0]}, -1));
    }
  });
}

// Two arrays to copy and assign over: the outputs of a split, or two
// single-output arrays.
std::vector<mx::array> assign_operands(bool siblings) {
  auto x = mx::array({1.0f, 2.0f, 3.0f, 4.0f});
  mx::eval(x);
  return siblings ? mx::split(x, 2, -1)
                  : std::vector<mx::array>{x + 1.0f, x + 2.0f};
}

void assign_loop(std::vector<mx::array>& arrays) {
  for (int i = 0; i < 1000; ++i) {
    mx::array t = arrays[0];
    t = arrays[1];
    mx::array u = std::move(t);
    t = u;
    u = std::move(t);
    arrays[i & 1] = u;
  }
}

long long assign(long iters, bool siblings) {
  auto arrays = assign_operands(siblings);
  return timed(iters, [&] { assign_loop(arrays); });
}

long long contended_release(long iters) {
  constexpr int threads = 8;
  std::vector<std::vector<mx::array>> groups;
  for (int t = 0; t < threads; ++t) {
    groups.push_back(assign_operands(true));
  }
  return timed(1, [&] {
    std::vector<std::thread> crew;
    for (int t = 0; t < threads; ++t) {
      crew.emplace_back([&, t] {
        for (long i = 0; i < iters; ++i) {
          assign_loop(groups[t]);
        }
      });
    }
    for (auto& c : crew) {
      c.join();
    }
  });
}

long long model_forward(long iters) {
  transformer::Config cfg;
  auto layers = transformer::make_model(cfg);
  for (auto& l : layers) {
    mx::eval({l.norm1, l.wqkv, l.wo, l.norm2, l.w_up, l.w_down});
  }
  auto x = mx::random::normal(
      {cfg.seq, cfg.d_model}, mx::float32, mx::random::key(0));
  mx::eval(x);
  auto fn = mx::compile(
      [layers, heads = cfg.heads](const std::vector<mx::array>& in) {
        return transformer::forward(layers, in[0], heads);
      });
  mx::eval(fn({x})); // trace once, outside the timing
  return timed(iters, [&] { mx::eval(fn({x})); });
}

} // namespace

int main(int argc, char** argv) {
  const std::map<std::string, std::function<long long(long)>> workloads = {
      {"report_cycle", report_cycle},
      {"teardown", teardown},
      {"assign_siblings", [](long n) { return assign(n, true); }},
      {"assign_plain", [](long n) { return assign(n, false); }},
      {"contended_release", contended_release},
      {"model_forward", model_forward},
  };
  auto found = argc == 3 ? workloads.find(argv[1]) : workloads.end();
  long iters = argc == 3 ? std::atol(argv[2]) : 0;
  if (found == workloads.end() || iters <= 0) {
    std::fprintf(stderr, "usage: %s <workload> <iterations>; workloads:", argv[0]);
    for (auto& [name, _] : workloads) {
      std::fprintf(stderr, " %s", name.c_str());
    }
    std::fprintf(stderr, "\n");
    return 2;
  }
  std::printf("%lld\n", found->second(iters));
  return 0;
}
