/* Preloaded by the checks that must see a crash after the last test: the
 * process aborts as it unloads this library, after main returned and every
 * report was written, as a crash in a static destructor would. Only the
 * first process that loads it aborts; the processes it starts (MLX runs the
 * compiler for its CPU kernels) inherit the preload and exit normally. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define OWNER "MLX_FORK_ABORT_AT_EXIT_PID"

__attribute__((constructor)) static void claim(void) {
  if (getenv(OWNER) == NULL) {
    char pid[32];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    setenv(OWNER, pid, 1);
  }
}

__attribute__((destructor)) static void abort_at_exit(void) {
  const char *owner = getenv(OWNER);
  if (owner != NULL && atol(owner) == (long)getpid()) {
    abort();
  }
}
