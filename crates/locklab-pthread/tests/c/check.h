/* Shared helpers of the conformance programs: CHECK prints "FAIL ..." and counts; each program exits
 * with the number of failures. When LOCKLAB_EXPECT_PRELOAD is set the program first checks that
 * pthread_mutex_lock really is liblocklab_pthread's (so a run "with the library" cannot silently test
 * glibc). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int failures;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      failures++;                                                              \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                   \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
      fflush(stdout);                                                          \
    }                                                                          \
  } while (0)

#define EQ(a, b) CHECK((a) == (b), "%ld != %ld", (long)(a), (long)(b))

static void check_preload(void) {
  const char *want = getenv("LOCKLAB_EXPECT_PRELOAD");
  Dl_info info;
  void *f = dlsym(RTLD_DEFAULT, "pthread_mutex_lock");
  int ours = f && dladdr(f, &info) && info.dli_fname && strstr(info.dli_fname, "locklab");
  if (want && *want == '1')
    CHECK(ours, "pthread_mutex_lock is not liblocklab_pthread's");
  else
    CHECK(!ours, "liblocklab_pthread is loaded in a glibc run");
}

__attribute__((unused)) static struct timespec in_ms(clockid_t clock, long ms) {
  struct timespec t;
  clock_gettime(clock, &t);
  t.tv_sec += ms / 1000;
  t.tv_nsec += (ms % 1000) * 1000000L;
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  return t;
}

__attribute__((unused)) static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

/* Runs f(arg) on a new thread and returns what it returned (a pthread call's result). */
__attribute__((unused)) static long in_thread(void *(*f)(void *), void *arg) {
  pthread_t t;
  void *r;
  pthread_create(&t, NULL, f, arg);
  pthread_join(t, &r);
  return (long)r;
}

/* Whether thread `tid` of this process is asleep (state S in /proc). */
__attribute__((unused)) static int thread_asleep(pid_t tid) {
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  return p && p[1] == ' ' && p[2] == 'S';
}

static int finish(const char *name) {
  printf("%s: %d failure(s)\n", name, failures);
  return failures ? 1 : 0;
}
