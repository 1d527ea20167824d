/* The read-hold limit: read locks taken without unlocking end in EAGAIN (glibc's answer once its
 * count would overflow), not in a wrapped count or a hang; a writer holding the lock still gets
 * EDEADLK from its own read lock and other readers are refused while it holds; once every hold is
 * given back the lock is free again. Runs each lock's fast path hundreds of millions of times. */
#include "check.h"

static pthread_rwlock_t l = PTHREAD_RWLOCK_INITIALIZER;

static void *tryrd(void *p) { return (void *)(long)pthread_rwlock_tryrdlock(p); }

int main(void) {
  check_preload();
  /* A second thread alive for the whole run (the fast paths' multi-threaded case). */
  EQ(pthread_rwlock_wrlock(&l), 0);
  EQ(pthread_rwlock_rdlock(&l), EDEADLK);
  pthread_t t;
  pthread_create(&t, NULL, tryrd, &l);
  void *r;
  pthread_join(t, &r);
  EQ((long)r, EBUSY);
  EQ(pthread_rwlock_unlock(&l), 0);

  const long cap = 1L << 30;
  long held = 0;
  int e = 0;
  while (held < cap && (e = pthread_rwlock_rdlock(&l)) == 0)
    held++;
  EQ(e, EAGAIN);
  CHECK(held > (1L << 20), "only %ld read holds before EAGAIN", held);
  EQ(pthread_rwlock_trywrlock(&l), EBUSY);
  EQ(pthread_rwlock_tryrdlock(&l), EAGAIN);
  for (long i = 0; i < held; i++)
    if (pthread_rwlock_unlock(&l) != 0) {
      CHECK(0, "unlock %ld of %ld failed", i, held);
      break;
    }
  EQ(pthread_rwlock_trywrlock(&l), 0);
  EQ(pthread_rwlock_unlock(&l), 0);
  EQ(pthread_rwlock_rdlock(&l), 0);
  EQ(pthread_rwlock_unlock(&l), 0);
  printf("%ld read holds before EAGAIN; %d failure(s)\n", held, failures);
  return failures;
}
