/* A read unlock must not write the rwlock once its hold is released: the next owner may take the
 * lock, destroy it and reuse its memory at once (glibc's rwlock allows it, as every mutex does).
 * Each round: a reader holds a read lock; a writer's timed write lock times out (leaving the
 * writers-waiting state behind in some implementations); the reader unlocks while the main thread
 * spins on trywrlock, then unlocks, destroys and overwrites the 56 bytes; once the reader's unlock
 * has returned, the bytes must be untouched. A thread interrupts the reader with a signal all the
 * while to widen the windows. About 2 s. */
#include "check.h"
#include <signal.h>
#include <stdatomic.h>

static union {
  pthread_rwlock_t l;
  unsigned char b[sizeof(pthread_rwlock_t)];
} u;
static atomic_int phase, reader_done;
static atomic_int stop;
static pthread_t reader_thread;

static void on_usr1(int sig) {
  (void)sig;
  for (volatile int i = 0; i < 3000; i++)
    ;
}

static void *reader(void *arg) {
  (void)arg;
  for (;;) {
    while (atomic_load(&phase) != 1)
      if (atomic_load(&stop))
        return NULL;
    if (atomic_load(&stop)) /* the last wake-up: `stop` is stored before `phase` */
      return NULL;
    pthread_rwlock_rdlock(&u.l);
    atomic_store(&phase, 2);
    while (atomic_load(&phase) != 3) /* the writer has timed out */
      ;
    pthread_rwlock_unlock(&u.l);
    atomic_store(&reader_done, 1);
    while (atomic_load(&phase) == 3)
      ;
  }
}

static void *kicker(void *arg) {
  (void)arg;
  while (!atomic_load(&stop)) {
    pthread_kill(reader_thread, SIGUSR1);
    for (volatile int i = 0; i < 200; i++)
      ;
  }
  return NULL;
}

int main(void) {
  check_preload();
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
  pthread_create(&reader_thread, NULL, reader, NULL);
  pthread_t k;
  pthread_create(&k, NULL, kicker, NULL);
  long rounds = 0, written = 0;
  /* 2 s, and on a loaded machine (the rounds are busy-wait hand-offs between threads) on until 200
   * rounds, for at most 30 s. */
  double start = now_s();
  while (now_s() < start + 2 || (rounds < 200 && now_s() < start + 30)) {
    rounds++;
    EQ(pthread_rwlock_init(&u.l, NULL), 0);
    atomic_store(&reader_done, 0);
    atomic_store(&phase, 1);
    while (atomic_load(&phase) != 2)
      ;
    struct timespec d;
    clock_gettime(CLOCK_REALTIME, &d);
    d.tv_nsec += 20000;
    if (d.tv_nsec >= 1000000000L) {
      d.tv_sec++;
      d.tv_nsec -= 1000000000L;
    }
    int r = pthread_rwlock_timedwrlock(&u.l, &d);
    EQ(r, ETIMEDOUT);
    atomic_store(&phase, 3);
    while (pthread_rwlock_trywrlock(&u.l) != 0)
      ;
    pthread_rwlock_unlock(&u.l);
    pthread_rwlock_destroy(&u.l);
    memset(u.b, 0xff, sizeof u.b); /* the memory reused by something else */
    while (!atomic_load(&reader_done))
      ;
    atomic_store(&phase, 0);
    for (size_t i = 0; i < sizeof u.b; i++)
      if (u.b[i] != 0xff) {
        if (written < 5)
          printf("round %ld: byte %zu of the freed lock is %#x after the reader's unlock\n", rounds, i,
                 u.b[i]);
        written++;
        break;
      }
    if (r != ETIMEDOUT)
      break;
  }
  atomic_store(&stop, 1);
  atomic_store(&phase, 1);
  pthread_join(k, NULL);
  pthread_join(reader_thread, NULL);
  EQ(written, 0);
  CHECK(rounds > 100, "only %ld rounds", rounds);
  printf("%ld rounds, %ld with the freed memory written\n", rounds, written);
  return finish("rw_unlock_then_reuse");
}
