// fixed_layout.h as an LD_PRELOAD library, so that a Python process gets the
// fixed heap layout too (finding 013). The layout is off until the process
// calls `fixed_layout_start()` (ctypes), which makes the calling thread its
// owner; `fixed_layout_pad(n)` and `fixed_layout_stop()` are the rest.

#include "../../crates/probes/cpp/fixed_layout.h"

extern "C" {
__attribute__((visibility("default"))) void fixed_layout_start() {
  fixed_layout::start();
}
__attribute__((visibility("default"))) void fixed_layout_stop() {
  fixed_layout::stop();
}
__attribute__((visibility("default"))) void fixed_layout_pad(unsigned long n) {
  fixed_layout::pad(n);
}
}
