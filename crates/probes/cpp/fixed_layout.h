// A fixed heap layout for the main thread's C++ objects (finding 013).
//
// compile_dfs walks a hash map keyed by array descriptors' addresses, and the
// order of that walk decides whether a traced multi-output group is orphaned
// on MLX 0.32.2. The order depends only on which keys share a bucket, so on
// the addresses relative to each other, and in an ordinary process those
// move with every free another thread makes. This file replaces the global
// operator new and delete: while the layout is on, every object the main
// thread allocates comes from a bump region at a fixed address, one after
// the other, and is never reused. The same program then gets the same
// addresses, the same walk and the same outcome in every run; `pad(n)`
// moves what follows by n bytes, the one thing a caller varies.
//
// Included once per program: by a probe, or by fixed_layout_preload.cpp,
// which builds it as an LD_PRELOAD library for Python.

#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <pthread.h>

namespace fixed_layout {

// Far from anything the loader or glibc places by default on x86_64 and
// aarch64 Linux; reserved, not committed, so untouched pages cost nothing.
constexpr std::uintptr_t kBase = 0x100000000000ull;
constexpr std::size_t kReserve = std::size_t{64} << 30;

struct State {
  char* next = nullptr;
  pthread_t owner{};
  std::atomic<bool> on{false};
};

inline State& state() {
  static State s;
  return s;
}

inline bool in_region(const void* p) {
  auto a = reinterpret_cast<std::uintptr_t>(p);
  return a >= kBase && a < kBase + kReserve;
}

// Maps the region and makes the calling thread its owner. Exits with a
// message if the address is taken: a layout elsewhere would not be fixed.
inline void start() {
  auto& s = state();
  if (s.next == nullptr) {
    void* r = mmap(
        reinterpret_cast<void*>(kBase),
        kReserve,
        PROT_READ | PROT_WRITE,
        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
        -1,
        0);
    if (r != reinterpret_cast<void*>(kBase)) {
      std::fprintf(
          stderr,
          "fixed_layout: cannot map %zu GiB at %#lx: %s\n",
          kReserve >> 30,
          static_cast<unsigned long>(kBase),
          std::strerror(errno));
      std::exit(3);
    }
    s.next = static_cast<char*>(r);
  }
  s.owner = pthread_self();
  s.on.store(true);
}

inline void stop() {
  state().on.store(false);
}

// The next object starts `bytes` later than it would have.
inline void pad(std::size_t bytes) {
  state().next += bytes;
}

inline void* allocate(std::size_t size, std::size_t align) {
  auto& s = state();
  if (s.on.load(std::memory_order_relaxed) && pthread_equal(pthread_self(), s.owner)) {
    if (align < 16) {
      align = 16;
    }
    auto at = (reinterpret_cast<std::uintptr_t>(s.next) + align - 1) & ~(align - 1);
    if (at + size > kBase + kReserve) {
      std::fprintf(stderr, "fixed_layout: region exhausted\n");
      std::abort();
    }
    s.next = reinterpret_cast<char*>(at + (size ? size : 1));
    return reinterpret_cast<void*>(at);
  }
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(size ? size : 1);
  } else if (posix_memalign(&p, align, size ? size : 1) != 0) {
    p = nullptr;
  }
  return p;
}

inline void release(void* p) {
  if (p != nullptr && !in_region(p)) {
    std::free(p);
  }
}

} // namespace fixed_layout

// The replaceable allocation functions, all routed through the two above.
void* operator new(std::size_t n) {
  if (void* p = fixed_layout::allocate(n, alignof(std::max_align_t))) {
    return p;
  }
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  return ::operator new(n);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return fixed_layout::allocate(n, alignof(std::max_align_t));
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return fixed_layout::allocate(n, alignof(std::max_align_t));
}
void* operator new(std::size_t n, std::align_val_t a) {
  if (void* p = fixed_layout::allocate(n, static_cast<std::size_t>(a))) {
    return p;
  }
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return ::operator new(n, a);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return fixed_layout::allocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return fixed_layout::allocate(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept {
  fixed_layout::release(p);
}
void operator delete[](void* p) noexcept {
  fixed_layout::release(p);
}
void operator delete(void* p, std::size_t) noexcept {
  fixed_layout::release(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  fixed_layout::release(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  fixed_layout::release(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  fixed_layout::release(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  fixed_layout::release(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  fixed_layout::release(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  fixed_layout::release(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  fixed_layout::release(p);
}
