/* Small deviations from glibc that real loops depend on: a condvar deadline in the past (tv_sec < 0)
 * times out; a timed mutex or rwlock lock with no time waits as long as it takes (glibc's futex wait
 * without a time-out) or succeeds at once when free; a condvar wait with a normal mutex the caller
 * does not hold times out as under glibc (and the mutex is then held); the library takes none of the
 * process's PTHREAD_KEYS_MAX keys; invalid clocks and times are refused before the lock is tried
 * (also with lock statistics on, whose counted path tries first). */
#include "check.h"
#include <limits.h>
/* Passing no time where glibc declares the argument nonnull is the point of two checks. */
#pragma GCC diagnostic ignored "-Wnonnull"

static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rbusy = PTHREAD_RWLOCK_INITIALIZER;

static void *release_later(void *arg) {
  (void)arg;
  usleep(100000);
  pthread_mutex_unlock(&busy);
  return NULL;
}

static void *wrelease_later(void *arg) {
  (void)arg;
  pthread_rwlock_wrlock(&rbusy);
  usleep(100000);
  pthread_rwlock_unlock(&rbusy);
  return NULL;
}

int main(void) {
  check_preload();
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  struct timespec past = {-1, 0};

  pthread_mutex_lock(&m);
  EQ(pthread_cond_timedwait(&c, &m, &past), ETIMEDOUT);
  EQ(pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &past), ETIMEDOUT);
  pthread_mutex_unlock(&m);

  EQ(pthread_mutex_timedlock(&m, NULL), 0);
  EQ(pthread_mutex_unlock(&m), 0);
  pthread_mutex_lock(&busy);
  pthread_t t;
  pthread_create(&t, NULL, release_later, NULL); /* a normal mutex: any thread may unlock it */
  EQ(pthread_mutex_timedlock(&busy, NULL), 0);
  pthread_join(t, NULL);
  EQ(pthread_mutex_unlock(&busy), 0);
  pthread_mutex_lock(&busy);
  EQ(pthread_mutex_timedlock(&busy, &past), ETIMEDOUT);
  pthread_mutex_unlock(&busy);

  EQ(pthread_rwlock_timedrdlock(&rbusy, NULL), 0);
  EQ(pthread_rwlock_unlock(&rbusy), 0);
  pthread_create(&t, NULL, wrelease_later, NULL);
  usleep(20000);
  EQ(pthread_rwlock_timedrdlock(&rbusy, NULL), 0);
  EQ(pthread_rwlock_unlock(&rbusy), 0);
  pthread_join(t, NULL);

  struct timespec badns = {0, 2000000000};
  EQ(pthread_mutex_clocklock(&m, 12345, &badns), EINVAL);
  EQ(pthread_mutex_trylock(&m), 0); /* the refused call took nothing */
  EQ(pthread_mutex_unlock(&m), 0);
  EQ(pthread_rwlock_timedrdlock(&rbusy, &badns), EINVAL);
  EQ(pthread_rwlock_timedwrlock(&rbusy, &badns), EINVAL);
  EQ(pthread_rwlock_clockrdlock(&rbusy, 12345, &badns), EINVAL);
  EQ(pthread_rwlock_clockwrlock(&rbusy, 12345, &badns), EINVAL);
  EQ(pthread_rwlock_trywrlock(&rbusy), 0); /* nothing was taken */
  EQ(pthread_rwlock_unlock(&rbusy), 0);

  pthread_mutex_t n = PTHREAD_MUTEX_INITIALIZER;
  struct timespec soon = in_ms(CLOCK_REALTIME, 20);
  EQ(pthread_cond_timedwait(&c, &n, &soon), ETIMEDOUT);
  EQ(pthread_mutex_trylock(&n), EBUSY); /* the wait returned with the mutex held */
  EQ(pthread_mutex_unlock(&n), 0);

  int keys = 0;
  pthread_key_t k;
  while (keys < PTHREAD_KEYS_MAX + 10 && pthread_key_create(&k, NULL) == 0) keys++;
  EQ(keys, PTHREAD_KEYS_MAX);
  /* Locks still work once every key is the program's. */
  pthread_mutex_lock(&m);
  pthread_mutex_unlock(&m);
  return finish("deviations");
}
