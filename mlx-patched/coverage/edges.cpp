// The coverage variant's feedback: every basic block of libmlx's graph code
// (inject.cmake) calls __sanitizer_cov_trace_pc (GCC's and Clang's
// -fsanitize-coverage=trace-pc), and this counts the edge from the thread's
// previous block, AFL's way, into a map of MLX_FORK_COVERAGE_MAP_SIZE
// one-byte counters.
//
// With MLX_FORK_COVERAGE_MAP naming a file of that size, the map is that
// file, mapped shared, so that the process driving this one reads and
// clears it per program. Without it, a private map: the counters still run
// and cost the same, and nothing reads them.
//
// Blocks are named by their offset in the library, not their address, so
// that an edge has one index in every process whatever ASLR does.

#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

// The map's size comes from the build (mlx_facts::coverage::MAP_SIZE).
#ifndef MLX_FORK_COVERAGE_MAP_SIZE
#error "MLX_FORK_COVERAGE_MAP_SIZE: the build gives the coverage map's size"
#endif

// Nothing here may call back into instrumented code, nor be instrumented.
#define UNTRACED __attribute__((no_sanitize_coverage, no_profile_instrument_function))

namespace {

uint8_t private_map[MLX_FORK_COVERAGE_MAP_SIZE];
uint8_t* counters = private_map;
uintptr_t library_base = 0;
// initial-exec: a plain %fs load per block, not a __tls_get_addr call.
__attribute__((tls_model("initial-exec"))) thread_local uint32_t previous = 0;

UNTRACED void attach_shared_map() {
  const char* path = getenv("MLX_FORK_COVERAGE_MAP");
  if (path == nullptr || *path == '\0') {
    return;
  }
  int fd = open(path, O_RDWR);
  if (fd < 0) {
    return;
  }
  void* map = mmap(nullptr, MLX_FORK_COVERAGE_MAP_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map != MAP_FAILED) {
    counters = static_cast<uint8_t*>(map);
  }
}

// Before MLX's own static constructors: their blocks count too, but in the
// private map, since no program runs before main.
struct Attach {
  UNTRACED Attach() { attach_shared_map(); }
};
__attribute__((init_priority(101))) Attach attach;

} // namespace

extern "C" {

// Protected: exported (MLX's tests and anything built against the prefix
// with the same flags resolve to it), but libmlx's own calls bind locally.
__attribute__((visibility("protected"))) UNTRACED void __sanitizer_cov_trace_pc() {
  uintptr_t pc = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  if (__builtin_expect(library_base == 0, 0)) {
    Dl_info info;
    library_base = dladdr(reinterpret_cast<void*>(pc), &info) != 0
        ? reinterpret_cast<uintptr_t>(info.dli_fbase)
        : 1;
  }
  uint64_t offset = pc - library_base;
  uint32_t block = static_cast<uint32_t>((offset * 0x9E3779B97F4A7C15ull) >> 44);
  uint8_t* c = &counters[(block ^ previous) & (MLX_FORK_COVERAGE_MAP_SIZE - 1)];
  *c += (*c != 255);
  previous = block >> 1;
}

// The map's size, for a driver that checks it agrees.
__attribute__((visibility("default"))) UNTRACED uint32_t mlx_fork_coverage_map_size() {
  return MLX_FORK_COVERAGE_MAP_SIZE;
}

} // extern "C"
