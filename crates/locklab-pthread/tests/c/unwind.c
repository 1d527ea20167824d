/* Unwinding through the library's entry points: a SIGPROF handler calls backtrace() (as sampling
 * profilers do) while the program locks and unlocks in a loop; every sample's stack must reach the
 * loop's function. An entry point without unwind information cuts the stack there. Both fast paths
 * are sampled: with one thread, then with a second thread alive. Built with -rdynamic (dladdr
 * names the loop). */
#include "check.h"
#include <execinfo.h>
#include <signal.h>
#include <sys/time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static volatile long samples, cut;

static void on_prof(int sig) {
  (void)sig;
  int saved = errno;
  void *frames[64];
  int n = backtrace(frames, 64);
  int found = 0;
  for (int i = 0; i < n && !found; i++) {
    Dl_info d;
    if (dladdr(frames[i], &d) && d.dli_sname && strcmp(d.dli_sname, "unwind_hot_loop") == 0)
      found = 1;
  }
  samples++;
  if (!found)
    cut++;
  errno = saved;
}

/* Runs until `want` more samples were taken (or 20 s of wall time). */
__attribute__((noinline)) void unwind_hot_loop(long want) {
  long until = samples + want;
  double end = now_s() + 20;
  while (samples < until && now_s() < end) {
    for (int i = 0; i < 1000; i++) {
      pthread_mutex_lock(&m);
      pthread_mutex_unlock(&m);
      if (pthread_mutex_trylock(&m) == 0)
        pthread_mutex_unlock(&m);
      pthread_cond_signal(&c);
      pthread_rwlock_rdlock(&rw);
      pthread_rwlock_unlock(&rw);
    }
  }
}

static void *idle(void *arg) {
  (void)arg;
  pthread_mutex_lock(&m);
  pthread_cond_wait(&c, &m); /* until main broadcasts under the lock below */
  pthread_mutex_unlock(&m);
  return NULL;
}

int main(void) {
  check_preload();
  /* backtrace() loads libgcc_s on first use: not inside the handler. */
  void *warm[4];
  backtrace(warm, 4);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_prof;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGPROF, &sa, NULL);
  struct itimerval it = {{0, 200}, {0, 200}};
  setitimer(ITIMER_PROF, &it, NULL);

  unwind_hot_loop(300);
  long one_thread_samples = samples, one_thread_cut = cut;

  /* The process's SIGPROF may go to any thread that is running, and the idle thread runs while it
   * spins for the mutex (a spinning choice such as `tas`): its stack has no hot loop. It starts with
   * SIGPROF blocked (a new thread inherits the mask), so every sample is of the loop's thread. */
  sigset_t prof, old;
  sigemptyset(&prof);
  sigaddset(&prof, SIGPROF);
  pthread_sigmask(SIG_BLOCK, &prof, &old);
  pthread_t t;
  pthread_create(&t, NULL, idle, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  unwind_hot_loop(300);

  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_PROF, &off, NULL);
  pthread_mutex_lock(&m);
  pthread_cond_broadcast(&c);
  pthread_mutex_unlock(&m);
  /* The idle thread may not have reached its wait yet: wake it until it is gone. */
  while (pthread_tryjoin_np(t, NULL) != 0) {
    pthread_mutex_lock(&m);
    pthread_cond_broadcast(&c);
    pthread_mutex_unlock(&m);
    usleep(1000);
  }
  CHECK(one_thread_samples >= 300, "only %ld samples with one thread", one_thread_samples);
  CHECK(samples >= 600, "only %ld samples", samples);
  EQ(one_thread_cut, 0);
  EQ(cut, 0);
  return finish("unwind");
}
