// Release paths for the fuzzer (feature `fuzz`). Indices are checked with
// `at`, so a bad index is an exception, never a stray write.
#include <atomic>
#include <random>
#include <thread>

#include "mlx-bridge/src/ffi/fuzz.rs.h"
#include "mlx/compile.h"

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

void release_together(std::unique_ptr<Array> a, std::unique_ptr<Array> b) {
  thread_local std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> spins(0, 2048);
  int delay_a = spins(rng), delay_b = spins(rng);
  auto wait = [](int n) {
    for (int k = 0; k < n; ++k) {
      asm volatile("" ::: "memory");
    }
  };
  std::atomic<int> ready{0};
  auto arrive = [&ready] {
    ready.fetch_add(1);
    while (ready.load() < 2) {
    }
  };
  std::thread other([&, a = std::move(a)]() mutable {
    arrive();
    wait(delay_a);
    a.reset();
  });
  arrive();
  wait(delay_b);
  b.reset();
  other.join();
}

void async_eval(const ArrayList& list) {
  mx::async_eval(list.v);
}

std::int64_t live_array_descs() {
  return mlx_fork_live_array_descs ? mlx_fork_live_array_descs() : -1;
}

// Ops that take a contiguous input run over its data_size elements from
// its offset, so an array that claims more than its buffer holds sends
// them past the end: what AddressSanitizer would report, seen without it.
rust::String buffer_overrun(const Array& a) {
  const mx::array& x = a.a;
  if (x.status() == mx::array::Status::unscheduled || !x.data_shared_ptr() || !x.buffer().ptr()) {
    return {};
  }
  std::size_t extent = static_cast<std::size_t>(x.offset()) + x.data_size() * x.itemsize();
  std::size_t buffer = x.buffer_size();
  if (x.offset() >= 0 && extent <= buffer) {
    return {};
  }
  return "an array of " + std::to_string(x.size()) + " elements claims " + std::to_string(x.data_size()) +
         " (" + std::to_string(extent) + " bytes from offset " + std::to_string(x.offset()) + ") of a " +
         std::to_string(buffer) + "-byte buffer";
}

void set_compile_fusion(bool fuse) {
  mx::set_compile_mode(fuse ? mx::CompileMode::enabled : mx::CompileMode::no_fuse);
}

} // namespace mlx_bridge
