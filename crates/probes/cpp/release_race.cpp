// Lets go of the outputs of one unevaluated multi-output op from several
// threads at the same instant, then checks that the group, and the evaluated
// array it pins, were freed. Each thread holds one output and nothing else
// holds the group: whichever release comes last must break the group's
// sibling cycle, whatever the interleaving. A release that decides on a
// reference count another thread is about to drop leaves the group, and its
// input, allocated for the life of the process.
//
// usage: release_race <trials> [<scenario prefix>]
// prints `race <scenario> trials <n> leaked <k>` per scenario, the census
// line in census builds, and exits 0 when every trial ran (the verdict on
// the counts is the suite's: the control must leak, the fix must not).

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mlx/mlx.h"
#include "probe_output.h"

namespace mx = mlx::core;

namespace {

// How a thread lets go of the output it holds (in `slot[0]`; `slot[1]` is an
// unrelated evaluated array some paths assign from).
enum class Path {
  drop, // the destructor
  copy_assign,
  move_assign,
  overwrite, // array::overwrite_descriptor
  erase, // std::vector::erase of the element
  eval, // evaluates its output, then drops it
  async_eval, // starts evaluating its output, then drops it
  copy, // copies its output, then drops the copy and the output
  consume, // holds an unevaluated consumer of its output instead, and drops it
};

const char* name(Path p) {
  switch (p) {
    case Path::drop:
      return "drop";
    case Path::copy_assign:
      return "copy_assign";
    case Path::move_assign:
      return "move_assign";
    case Path::overwrite:
      return "overwrite";
    case Path::erase:
      return "erase";
    case Path::eval:
      return "eval";
    case Path::async_eval:
      return "async_eval";
    case Path::copy:
      return "copy";
    case Path::consume:
      return "consume";
  }
  return "?";
}

void let_go(Path p, std::vector<mx::array>& slot) {
  switch (p) {
    case Path::drop:
      slot.clear();
      break;
    case Path::copy_assign:
      slot[0] = slot[1];
      break;
    case Path::move_assign:
      slot[0] = std::move(slot[1]);
      break;
    case Path::overwrite:
      slot[0].overwrite_descriptor(slot[1]);
      break;
    case Path::erase:
      slot.erase(slot.begin());
      break;
    case Path::eval:
      mx::eval(slot[0]);
      slot.clear();
      break;
    case Path::async_eval:
      mx::async_eval(slot[0]);
      slot.clear();
      break;
    case Path::copy: {
      auto copy = slot[0];
      slot.clear();
      break;
    }
    case Path::consume:
      // The consumer's descriptor goes, and judges its inputs' group.
      slot.clear();
      break;
  }
}

// The multi-output ops: each returns every output of one group, built on an
// evaluated input of 16 KiB.
struct Group {
  const char* name;
  std::function<std::vector<mx::array>(const mx::array&)> make;
};

// Streams belong to the thread that made them, unless made this way: a
// group that another thread evaluates is built on it.
mx::Stream any_thread_stream() {
  static const mx::Stream s = mx::new_thread_unsafe_stream(mx::Device::cpu);
  return s;
}

const std::vector<Group>& groups() {
  static const std::vector<Group> all = {
      {"split2",
       [](const mx::array& x) {
         return mx::split(x, 2, 0, any_thread_stream());
       }},
      {"split3",
       [](const mx::array& x) {
         return mx::split(mx::reshape(x, {-1}), mx::Shape{1000, 2000}, 0);
       }},
      {"divmod",
       [](const mx::array& x) { return mx::divmod(x, mx::array(3.0f)); }},
      {"svd",
       [](const mx::array& x) {
         return mx::linalg::svd(x, true, mx::Device::cpu);
       }},
      {"lu",
       [](const mx::array& x) {
         return mx::linalg::lu_factor(x, mx::Device::cpu).first.outputs();
       }},
      // A group whose input is an output of another group: the inner
      // group's two outputs, then the outer group's other output.
      {"nested",
       [](const mx::array& x) {
         auto outer = mx::split(x, 2, 0, any_thread_stream());
         auto inner = mx::split(outer[0], 2, 1, any_thread_stream());
         return std::vector<mx::array>{inner[0], inner[1], outer[1]};
       }},
  };
  return all;
}

struct Scenario {
  std::string name;
  const Group* group;
  std::vector<Path> paths; // one thread each, holding output i
};

std::vector<Scenario> scenarios() {
  const auto& g = groups();
  std::vector<Scenario> all;
  // Every release path against every other, on a group of two.
  const Path release_paths[] = {
      Path::drop,
      Path::copy_assign,
      Path::move_assign,
      Path::overwrite,
      Path::erase};
  for (const Group* group : {&g[0], &g[2]}) {
    for (int a = 0; a < 5; ++a) {
      for (int b = a; b < 5; ++b) {
        auto pa = release_paths[a], pb = release_paths[b];
        all.push_back(
            {std::string(group->name) + ":" + name(pa) + "/" + name(pb),
             group,
             {pa, pb}});
      }
    }
  }
  // Groups of three: two threads (the other outputs are held by the
  // group alone), then one thread per output.
  for (const Group* group : {&g[1], &g[3], &g[4]}) {
    all.push_back(
        {std::string(group->name) + ":drop/drop", group, {Path::drop, Path::drop}});
    all.push_back(
        {std::string(group->name) + ":drop/drop/drop",
         group,
         {Path::drop, Path::drop, Path::drop}});
  }
  // A release racing with work on a sibling.
  for (Path other : {Path::eval, Path::async_eval, Path::copy}) {
    all.push_back(
        {std::string("split2:") + name(other) + "/drop",
         &g[0],
         {other, Path::drop}});
  }
  // An evaluation detaching the group while the other output is copied, or
  // while a consumer of it is torn down (which reads the group's lists).
  for (Path other : {Path::copy, Path::consume}) {
    for (Path eval : {Path::eval, Path::async_eval}) {
      all.push_back(
          {std::string("split2:") + name(eval) + "/" + name(other),
           &g[0],
           {eval, other}});
    }
  }
  // Two groups, one the input of the other, let go of on two threads (the
  // outer group's other output held by the group alone) and on three.
  all.push_back({"nested:drop/drop", &g[5], {Path::drop, Path::drop}});
  all.push_back(
      {"nested:drop/drop/drop", &g[5], {Path::drop, Path::drop, Path::drop}});
  all.push_back(
      {"nested:eval/consume/drop",
       &g[5],
       {Path::eval, Path::consume, Path::drop}});
  return all;
}

// Waits a little without giving up the core, so that two threads woken
// together act within nanoseconds of each other; after that, yields, so that
// more waiting threads than cores still make progress.
void pause(int spins) {
  if (spins < 4096) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  } else {
    std::this_thread::yield();
  }
}

// Spins `n` times: a delay of a few nanoseconds each.
void delay(int n) {
  for (int k = 0; k < n; ++k) {
    asm volatile("" ::: "memory");
  }
}

// The calling thread and `n - 1` helpers let go of their outputs at once.
class Crew {
 public:
  explicit Crew(int n) : slots_(n), paths_(n), delays_(n) {
    for (int i = 1; i < n; ++i) {
      helpers_.emplace_back([this, i] { work(i); });
    }
  }

  ~Crew() {
    generation_.store(-1, std::memory_order_release);
    for (auto& t : helpers_) {
      t.join();
    }
  }

  int size() const {
    return static_cast<int>(slots_.size());
  }

  // One trial: thread i lets go of `slots[i]` along `paths[i]` after
  // spinning `delays[i]` times; thread 0 is the caller.
  void run(
      std::vector<std::vector<mx::array>> slots,
      const std::vector<Path>& paths,
      const std::vector<int>& delays) {
    slots_ = std::move(slots);
    paths_ = paths;
    delays_ = delays;
    done_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    act(0);
    for (int spins = 0; done_.load(std::memory_order_acquire) < size() - 1;
         ++spins) {
      pause(spins);
    }
  }

 private:
  void act(int i) {
    delay(delays_[i]);
    if (paths_[i] == Path::consume) {
      // Up to a millisecond later: in some trials the sibling's evaluation
      // has detached the group by then, in others not yet.
      std::this_thread::sleep_for(std::chrono::microseconds(delays_[i] / 2));
    }
    let_go(paths_[i], slots_[i]);
    slots_[i].clear();
  }

  void work(int i) {
    int seen = 0;
    for (;;) {
      int g;
      for (int spins = 0;
           (g = generation_.load(std::memory_order_acquire)) == seen;
           ++spins) {
        pause(spins);
      }
      if (g < 0) {
        return;
      }
      seen = g;
      act(i);
      done_.fetch_add(1, std::memory_order_release);
    }
  }

  std::vector<std::vector<mx::array>> slots_;
  std::vector<Path> paths_;
  std::vector<int> delays_;
  std::atomic<int> generation_{0};
  std::atomic<int> done_{0};
  std::vector<std::thread> helpers_;
};

// Trials of one scenario; returns how many left memory allocated.
int run(const Scenario& s, int trials, std::mt19937& rng) {
  Crew crew(static_cast<int>(s.paths.size()));
  const auto filler = mx::array({1.0f});
  std::vector<float> host(64 * 64);
  for (size_t i = 0; i < host.size(); ++i) {
    host[i] = static_cast<float>(i % 97) + 1.0f;
  }
  // A helper starts up to a microsecond or two after the caller; a random
  // delay of up to 2048 spins on each side slides one release across the
  // other (on the machine this was written on, the widest spread that still
  // raised the control's rate).
  std::uniform_int_distribution<int> delay_of(0, 2048);
  int leaked = 0;
  for (int t = 0; t < trials; ++t) {
    auto base = mx::get_active_memory();
    {
      std::vector<std::vector<mx::array>> slots;
      {
        // Evaluated (a buffer already), so only the group keeps it alive.
        auto x = mx::array(host.begin(), {64, 64}, mx::float32);
        auto outs = s.group->make(x);
        for (int i = 0; i < crew.size(); ++i) {
          auto held = s.paths[i] == Path::consume
              ? mx::multiply(outs[i], mx::array(2.0f), any_thread_stream())
              : outs[i];
          slots.push_back({held, filler});
        }
      }
      std::vector<int> delays;
      for (int i = 0; i < crew.size(); ++i) {
        delays.push_back(delay_of(rng));
      }
      crew.run(std::move(slots), s.paths, delays);
    }
    // A helper's async_eval may still be running on its stream.
    mx::synchronize(any_thread_stream());
    if (probe::active_since(base) > 0) {
      ++leaked;
    }
  }
  return leaked;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: release_race <trials> [<scenario prefix>]\n");
    return 2;
  }
  int trials = std::atoi(argv[1]);
  std::string prefix = argc > 2 ? argv[2] : "";
  std::mt19937 rng(std::random_device{}());
  probe::Census census;
  try {
    for (const auto& s : scenarios()) {
      if (s.name.rfind(prefix, 0) != 0) {
        continue;
      }
      int leaked = run(s, trials, rng);
      std::printf(
          "race %s trials %d leaked %d\n", s.name.c_str(), trials, leaked);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "release_race: %s\n", e.what());
    return 1;
  }
  census.print(0);
  return 0;
}
