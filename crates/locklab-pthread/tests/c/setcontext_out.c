/* A signal handler leaves a blocked pthread_mutex_lock with setcontext (to a context saved with
 * getcontext before the lock: the time-out idiom of siglongjmp, with ucontext; also how preemptive
 * user-level threads switch away from a handler), twice. The thread then takes the mutex normally
 * and ends by pthread_exit, by a siglongjmp out of a deeper frame, or by asynchronous cancellation.
 * A lock wait must leave nothing behind that outlives its frame: glibc's legacy cleanup list, which
 * pthread_exit, cancellation and longjmp walk, must not be left pointing into the abandoned wait
 * (such an entry made each of these endings crash). */
#include "check.h"
#include <setjmp.h>
#include <signal.h>
#include <ucontext.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static ucontext_t ctx;
static volatile int in_lock;
static volatile pid_t tid;
static sigjmp_buf jb;
static int mode;

static void leave(int s) {
  (void)s;
  if (in_lock) {
    in_lock = 0;
    setcontext(&ctx);
  }
}

static __attribute__((noinline)) void deep(int n) {
  volatile char pad[256];
  memset((char *)pad, 0x5a, sizeof pad);
  if (n > 0)
    deep(n - 1);
  else
    siglongjmp(jb, 1);
  pad[0]++;
}

static void *victim(void *a) {
  (void)a;
  volatile int rounds = 0;
  tid = gettid();
  getcontext(&ctx);
  if (rounds < 2) {
    rounds++;
    in_lock = 1;
    pthread_mutex_lock(&m); /* blocked: the main thread holds m */
    in_lock = 0;
    pthread_mutex_unlock(&m);
  }
  tid = 0;
  /* The main thread releases m after the second jump. */
  while (pthread_mutex_trylock(&m) != 0)
    usleep(1000);
  pthread_mutex_unlock(&m);
  if (mode == 0)
    pthread_exit((void *)3);
  if (mode == 1) {
    if (sigsetjmp(jb, 0) == 0)
      deep(20);
    return (void *)3;
  }
  pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
  for (;;)
    pause();
}

int main(void) {
  check_preload();
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = leave;
  sa.sa_flags = SA_NODEFER;
  sigaction(SIGUSR1, &sa, NULL);
  for (mode = 0; mode < 3; mode++) {
    in_lock = 0;
    tid = 0;
    pthread_mutex_lock(&m);
    pthread_t th;
    pthread_create(&th, NULL, victim, NULL);
    for (int i = 0; i < 2; i++) {
      while (tid == 0 || !in_lock)
        usleep(100);
      for (int k = 0; k < 5000 && !thread_asleep(tid); k++)
        usleep(100);
      usleep(1000);
      pthread_kill(th, SIGUSR1);
      usleep(20000);
    }
    pthread_mutex_unlock(&m);
    if (mode == 2) {
      usleep(50000);
      pthread_cancel(th);
    }
    void *r;
    EQ(pthread_join(th, &r), 0);
    CHECK(r == (mode == 2 ? PTHREAD_CANCELED : (void *)3), "mode %d: the thread returned %p", mode,
          r);
  }
  return finish("setcontext_out");
}
