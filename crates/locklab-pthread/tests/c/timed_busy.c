/* A timed lock gets a busy mutex that is released thousands of times a second: three threads take and
 * release it in a loop; a third takes it 40 times with pthread_mutex_timedlock (1 s each) and
 * pthread_mutex_clocklock, and every call must succeed. */
#include "check.h"

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static volatile int stop;
static volatile long shared;

static void *hammer(void *arg) {
  (void)arg;
  while (!stop) {
    pthread_mutex_lock(&m);
    for (int i = 0; i < 50; i++) shared++;
    pthread_mutex_unlock(&m);
  }
  return NULL;
}

int main(void) {
  check_preload();
  pthread_t t[3];
  for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, hammer, NULL);
  usleep(20000);
  int ok = 0, timeouts = 0;
  double t0 = now_s();
  for (int i = 0; i < 40; i++) {
    int r;
    if (i % 2 == 0) {
      struct timespec d = in_ms(CLOCK_REALTIME, 1000);
      r = pthread_mutex_timedlock(&m, &d);
    } else {
      struct timespec d = in_ms(CLOCK_MONOTONIC, 1000);
      r = pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &d);
    }
    if (r == 0) {
      ok++;
      shared++;
      pthread_mutex_unlock(&m);
    } else if (r == ETIMEDOUT) {
      timeouts++;
    }
  }
  stop = 1;
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  printf("timed_busy: %d of 40 timed locks succeeded, %d timed out, %.2f s\n", ok, timeouts, now_s() - t0);
  EQ(ok, 40);
  return finish("timed_busy");
}
