/* A normal mutex used as a binary semaphore: one thread locks, another unlocks (glibc allows it for
 * normal mutexes; latency tools and old producer/consumer code do it). Two threads hand two mutexes
 * back and forth 20,000 times. */
#include "check.h"

#define ROUNDS 20000
static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
static long pings, pongs;

static void *ponger(void *arg) {
  (void)arg;
  for (int i = 0; i < ROUNDS; i++) {
    pthread_mutex_lock(&a); /* released by the pinger */
    pongs++;
    pthread_mutex_unlock(&b); /* taken by the pinger */
  }
  return NULL;
}

int main(void) {
  check_preload();
  pthread_mutex_lock(&a);
  pthread_mutex_lock(&b);
  pthread_t t;
  pthread_create(&t, NULL, ponger, NULL);
  double t0 = now_s();
  for (int i = 0; i < ROUNDS; i++) {
    pings++;
    pthread_mutex_unlock(&a);
    pthread_mutex_lock(&b);
  }
  pthread_join(t, NULL);
  printf("binary_sem: %ld pings, %ld pongs in %.2f s\n", pings, pongs, now_s() - t0);
  EQ(pongs, ROUNDS);
  return finish("binary_sem");
}
