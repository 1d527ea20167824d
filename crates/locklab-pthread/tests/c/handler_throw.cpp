/* What crosses a signal handler's frames: a C++ exception thrown from a SIGSEGV handler (built with
 * -fnon-call-exceptions, the documented way) is caught by the code that faulted, and backtrace()
 * from a handler reaches main. The library runs the program's handlers behind a wrapper of its own,
 * which must not stop either. Prints the backtrace's depth (compared with glibc's by the test) and
 * "handler_throw: N failure(s)". */
#include "check.h"
#include <csignal>
#include <execinfo.h>
#include <stdexcept>

static void on_segv(int) { throw std::runtime_error("fault"); }

static void *frames[64];
static int depth;
static void on_usr2(int) { depth = backtrace(frames, 64); }

static volatile int *volatile nowhere = nullptr;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;

int main() {
  check_preload();
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_segv;
  sa.sa_flags = SA_NODEFER;
  EQ(sigaction(SIGSEGV, &sa, nullptr), 0);
  int caught = 0;
  for (int i = 0; i < 1000; i++) {
    try {
      pthread_mutex_lock(&m);
      pthread_mutex_unlock(&m);
      *nowhere = 1;
    } catch (const std::runtime_error &) {
      caught++;
    }
  }
  EQ(caught, 1000);
  CHECK(signal(SIGUSR2, on_usr2) != SIG_ERR, "signal");
  raise(SIGUSR2);
  bool main_seen = false;
  char **names = backtrace_symbols(frames, depth);
  for (int i = 0; names && i < depth; i++)
    if (strstr(names[i], "(main+"))
      main_seen = true;
  CHECK(main_seen, "backtrace() from a handler does not reach main (%d frames)", depth);
  printf("depth %d\n", depth);
  printf("handler_throw: %d failure(s)\n", failures);
  return failures;
}
