/* PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP: readers cannot starve a writer. Four readers keep
 * the lock read-held at every moment (their holds overlap); a writer must still get in, with
 * pthread_rwlock_wrlock, timedwrlock and clockwrlock (2 s each), 10 times each. */
#include "check.h"

static pthread_rwlock_t l;
static volatile int stop;
static long reads;

static void *reader(void *arg) {
  (void)arg;
  while (!stop) {
    pthread_rwlock_rdlock(&l);
    __atomic_fetch_add(&reads, 1, __ATOMIC_RELAXED);
    usleep(200);
    pthread_rwlock_unlock(&l);
  }
  return NULL;
}

int main(void) {
  check_preload();
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
  pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  EQ(pthread_rwlock_init(&l, &a), 0);
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, reader, NULL);
  usleep(50000);
  int got[3] = {0, 0, 0};
  double worst = 0;
  for (int i = 0; i < 30; i++) {
    double t0 = now_s();
    int r;
    if (i % 3 == 0) {
      r = pthread_rwlock_wrlock(&l);
    } else if (i % 3 == 1) {
      struct timespec d = in_ms(CLOCK_REALTIME, 2000);
      r = pthread_rwlock_timedwrlock(&l, &d);
    } else {
      struct timespec d = in_ms(CLOCK_MONOTONIC, 2000);
      r = pthread_rwlock_clockwrlock(&l, CLOCK_MONOTONIC, &d);
    }
    double w = now_s() - t0;
    if (w > worst) worst = w;
    if (r == 0) {
      got[i % 3]++;
      pthread_rwlock_unlock(&l);
    }
    usleep(2000);
  }
  stop = 1;
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  printf("rw_prefer_writer: wrlock %d/10, timedwrlock %d/10, clockwrlock %d/10, longest wait %.3f s, %ld reads\n",
         got[0], got[1], got[2], worst, reads);
  EQ(got[0] + got[1] + got[2], 30);
  CHECK(worst < 1.0, "a writer waited %.3f s", worst);
  return finish("rw_prefer_writer");
}
