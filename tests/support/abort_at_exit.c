/* Preloaded into a test binary by tests/mlx_suite.rs: the process aborts
 * as it unloads this library, after main returned and the test report was
 * written, as a crash in a static destructor would. */
#include <stdlib.h>

__attribute__((destructor)) static void abort_at_exit(void) { abort(); }
