/* The preload library's uncontended cost against glibc's, in one process and one run.
 *
 * Build and run (from the workspace root, after `cargo build --release`):
 *   gcc -O2 -o /tmp/uncontended crates/locklab-pthread/bench/uncontended.c -ldl -lpthread
 *   LD_PRELOAD=target/release/liblocklab_pthread.so /tmp/uncontended
 *
 * Under the preload, `pthread_mutex_lock` and friends are the library's, and `dlsym` on
 * `libc.so.6` itself (`dlopen` with `RTLD_NOLOAD`) finds glibc's own (`RTLD_NEXT` from the
 * executable would find the preloaded library's, which comes next in the search order). A second
 * thread is alive (glibc and the library both skip locked instructions while a process has one
 * thread), and blocks of 1,000,000 lock + unlock
 * pairs alternate between the two implementations, each on its own object: the machine's drift
 * (a busy neighbour, frequency) falls on both. Printed per operation: each side's best block and the
 * median (and quartiles) of the paired blocks' ratios, ours / glibc's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
typedef int (*fm)(pthread_mutex_t *);
typedef int (*fr)(pthread_rwlock_t *);
static pthread_mutex_t m1 = PTHREAD_MUTEX_INITIALIZER, m2 = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t r1 = PTHREAD_RWLOCK_INITIALIZER, r2 = PTHREAD_RWLOCK_INITIALIZER;
static volatile int stop;
static void *idle(void *a) { while (!stop) usleep(1000); return a; }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
#define N 1000000
static double runm(fm l, fm u, pthread_mutex_t *m) { double t0 = now(); for (long i = 0; i < N; i++) { l(m); u(m); } return (now() - t0) / N; }
static double runr(fr l, fr u, pthread_rwlock_t *m) { double t0 = now(); for (long i = 0; i < N; i++) { l(m); u(m); } return (now() - t0) / N; }
static int cmp(const void *a, const void *b) { double x = *(double*)a, y = *(double*)b; return x < y ? -1 : x > y; }
int main(void) {
  void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (!libc) { fprintf(stderr, "uncontended: libc.so.6 is not loaded\n"); return 1; }
  fm gl = dlsym(libc, "pthread_mutex_lock"), gu = dlsym(libc, "pthread_mutex_unlock");
  fr grl = dlsym(libc, "pthread_rwlock_rdlock"), gru = dlsym(libc, "pthread_rwlock_unlock");
  fr gwl = dlsym(libc, "pthread_rwlock_wrlock");
  if (!gl || !gu || !grl || !gru || !gwl || (void *)gl == (void *)pthread_mutex_lock) {
    fprintf(stderr, "uncontended: glibc's functions are the ones called: run it with LD_PRELOAD=liblocklab_pthread.so\n");
    return 2;
  }
  pthread_t t; pthread_create(&t, 0, idle, 0);
  enum { R = 41 };
  double a[6][R];
  for (int r = 0; r < R; r++) {
    a[0][r] = runm(pthread_mutex_lock, pthread_mutex_unlock, &m1);
    a[1][r] = runm(gl, gu, &m2);
    a[2][r] = runr(pthread_rwlock_rdlock, pthread_rwlock_unlock, &r1);
    a[3][r] = runr(grl, gru, &r2);
    a[4][r] = runr(pthread_rwlock_wrlock, pthread_rwlock_unlock, &r1);
    a[5][r] = runr(gwl, gru, &r2);
  }
  stop = 1; pthread_join(t, 0);
  const char *nm[] = {"mutex", "rdlock", "wrlock"};
  for (int k = 0; k < 3; k++) {
    double ratio[R];
    for (int r = 0; r < R; r++) ratio[r] = a[2*k][r] / a[2*k+1][r];
    qsort(ratio, R, sizeof(double), cmp);
    qsort(a[2*k], R, sizeof(double), cmp); qsort(a[2*k+1], R, sizeof(double), cmp);
    printf("%-7s ours %.2f ns  glibc %.2f ns (best)  median ratio of paired blocks %.3f [%.3f-%.3f]\n", nm[k], a[2*k][0], a[2*k+1][0], ratio[R/2], ratio[R/4], ratio[3*R/4]);
  }
}
