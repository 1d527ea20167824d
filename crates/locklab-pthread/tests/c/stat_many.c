/* Lock statistics with many (lock, call site) pairs in one thread: 70,000 mutexes, each locked three
 * times from one call site (70,000 pairs, far past the first per-thread table); every pair must be
 * in the table the library writes at exit, none dropped. Prints how long the last pass took per
 * lock (every pair already known). */
#include "check.h"

#define LOCKS 70000

__attribute__((noinline)) static void pass(pthread_mutex_t *m) {
  for (int i = 0; i < LOCKS; i++) {
    pthread_mutex_lock(&m[i]);
    pthread_mutex_unlock(&m[i]);
  }
}

int main(void) {
  check_preload();
  pthread_mutex_t *m = calloc(LOCKS, sizeof *m);
  double t0 = now_s();
  pass(m);
  double first = now_s() - t0;
  pass(m);
  t0 = now_s();
  pass(m);
  printf("stat_many: %.0f ns per lock+unlock recording a new pair, %.0f ns once known\n",
         first / LOCKS * 1e9, (now_s() - t0) / LOCKS * 1e9);
  return finish("stat_many");
}
