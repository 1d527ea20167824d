/* A cancelled condvar waiter must not consume a signal meant for another waiter (POSIX: "shall not
 * consume any condition signal ... if there are other threads blocked"). Waiter A sleeps first, then
 * waiter B; the main thread adds one token, signals once (the wake goes to A, the older sleeper) and
 * cancels A at once: A's wake-up arrives with the cancellation, A unwinds, and B must still get the
 * token. B waits with a time-out, so a lost wake-up shows as a time-out with the token still there. */
#include "check.h"

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int tokens, sleeping;

static void unlock_it(void *arg) { pthread_mutex_unlock((pthread_mutex_t *)arg); }

static void *waiter_a(void *arg) {
  (void)arg;
  pthread_mutex_lock(&m);
  pthread_cleanup_push(unlock_it, &m);
  sleeping++;
  while (tokens == 0) pthread_cond_wait(&c, &m);
  tokens--;
  pthread_cleanup_pop(1);
  return (void *)1; /* took the token (not cancelled in time): allowed */
}

static void *waiter_b(void *arg) {
  (void)arg;
  long got = 0;
  pthread_mutex_lock(&m);
  sleeping++;
  struct timespec t = in_ms(CLOCK_REALTIME, 3000);
  int r = 0;
  while (tokens == 0 && r == 0) r = pthread_cond_timedwait(&c, &m, &t);
  if (tokens > 0) {
    tokens--;
    got = r == 0 ? 1 : 2; /* 2: only after its time-out, with the token there all along */
  }
  pthread_mutex_unlock(&m);
  return (void *)got;
}

int main(void) {
  check_preload();
  int rounds = 20, lost = 0, a_took = 0;
  for (int i = 0; i < rounds; i++) {
    pthread_t a, b;
    tokens = sleeping = 0;
    pthread_create(&a, NULL, waiter_a, NULL);
    while (__atomic_load_n(&sleeping, __ATOMIC_SEQ_CST) < 1) usleep(1000);
    usleep(20000); /* A is asleep in the kernel, first in line */
    pthread_create(&b, NULL, waiter_b, NULL);
    while (__atomic_load_n(&sleeping, __ATOMIC_SEQ_CST) < 2) usleep(1000);
    usleep(20000);
    pthread_mutex_lock(&m);
    tokens = 1;
    pthread_cond_signal(&c);
    pthread_cancel(a);
    pthread_mutex_unlock(&m);
    void *ra, *rb;
    pthread_join(a, &ra);
    if (ra == (void *)1) { /* A was not cancelled in time and took the token: B gets another */
      pthread_mutex_lock(&m);
      tokens++;
      pthread_cond_signal(&c);
      pthread_mutex_unlock(&m);
    }
    pthread_join(b, &rb);
    if (ra == (void *)1) a_took++;
    else if (rb != (void *)1) lost++;
    if (rb == (void *)2 && ra != (void *)1) printf("round %d: B found the token only after timing out\n", i);
  }
  printf("cond_cancel: %d rounds, A took the token %d times, lost wake-ups %d\n", rounds, a_took, lost);
  EQ(lost, 0);
  return finish("cond_cancel");
}
