/* The lock statistics' program: known numbers of acquisitions at known call sites, contention and
 * holds of known length forced with sleeps, a condvar time-out, a recursive mutex, a failed trylock,
 * then (by argument) a fork, an exec, a SIGUSR1 snapshot, a program that closes every descriptor, and
 * a privilege drop. The Rust test reads the JSON the library wrote and checks each figure. */
#include "check.h"
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define N 20000
#define THREADS 4

pthread_mutex_t counted = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t waited = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t recursive = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_spinlock_t spin;
static long total;

__attribute__((noinline)) void counted_site(void) {
  pthread_mutex_lock(&counted);
  total++;
  pthread_mutex_unlock(&counted);
}

static void *counter(void *arg) {
  (void)arg;
  for (int i = 0; i < N; i++)
    counted_site();
  return NULL;
}

__attribute__((noinline)) void waiting_site(void) {
  pthread_mutex_lock(&waited);
  pthread_mutex_unlock(&waited);
}

static void *waiter(void *arg) {
  (void)arg;
  waiting_site();
  return NULL;
}

__attribute__((noinline)) void read_site(void) {
  pthread_rwlock_rdlock(&rw);
  pthread_rwlock_unlock(&rw);
}

static void *reader(void *arg) {
  (void)arg;
  read_site();
  return NULL;
}

__attribute__((noinline)) void hold_site(void) {
  pthread_mutex_lock(&waited);
  usleep(30000);
  pthread_mutex_unlock(&waited);
}

__attribute__((noinline)) void recursive_site(void) {
  pthread_mutex_lock(&recursive);
  pthread_mutex_lock(&recursive);
  pthread_mutex_unlock(&recursive);
  pthread_mutex_unlock(&recursive);
}

__attribute__((noinline)) void cond_site(void) {
  pthread_mutex_lock(&counted);
  struct timespec t = in_ms(CLOCK_REALTIME, 20);
  EQ(pthread_cond_timedwait(&cv, &counted, &t), ETIMEDOUT);
  pthread_cond_signal(&cv);
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&counted);
}

__attribute__((noinline)) void spin_site(void) {
  for (int i = 0; i < 1000; i++) {
    pthread_spin_lock(&spin);
    pthread_spin_unlock(&spin);
  }
}

__attribute__((noinline)) void write_site(void) {
  for (int i = 0; i < 10; i++) {
    pthread_rwlock_wrlock(&rw);
    pthread_rwlock_unlock(&rw);
  }
}

/* The expected file of this process (the template's %p replaced). */
static void own_file(char *buf, size_t n) {
  const char *t = getenv("LOCKLAB_STAT");
  size_t k = 0;
  for (; t && *t && k + 20 < n; t++) {
    if (t[0] == '%' && t[1] == 'p') {
      k += snprintf(buf + k, n - k, "%d", (int)getpid());
      t++;
    } else {
      buf[k++] = *t;
    }
  }
  buf[k] = 0;
}

int main(int argc, char **argv) {
  check_preload();
  const char *mode = argc > 1 ? argv[1] : "";
  pthread_spin_init(&spin, 0);

  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    pthread_create(&t[i], NULL, counter, NULL);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  EQ(total, (long)THREADS * N);

  /* One certain contention of >= 50 ms at waiting_site, and a hold of >= 50 ms by main. */
  pthread_mutex_lock(&waited);
  pthread_t w;
  pthread_create(&w, NULL, waiter, NULL);
  usleep(50000);
  pthread_mutex_unlock(&waited);
  pthread_join(w, NULL);

  /* A read that waits >= 50 ms behind a writer. */
  pthread_rwlock_wrlock(&rw);
  pthread_create(&w, NULL, reader, NULL);
  usleep(50000);
  pthread_rwlock_unlock(&rw);
  pthread_join(w, NULL);
  for (int i = 0; i < 99; i++)
    read_site();

  hold_site();
  recursive_site();
  cond_site();
  spin_site();
  write_site();
  /* A failed trylock is no acquisition. */
  pthread_mutex_lock(&counted);
  EQ(in_thread((void *(*)(void *))pthread_mutex_trylock, &counted), EBUSY);
  pthread_mutex_unlock(&counted);

  if (!strcmp(mode, "fork")) {
    pid_t pid = fork();
    if (pid == 0) {
      for (int i = 0; i < 7; i++)
        counted_site();
      exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    EQ(WEXITSTATUS(st), 0);
  } else if (!strcmp(mode, "exec")) {
    fflush(stdout);
    execl("/bin/true", "true", (char *)NULL);
    CHECK(0, "exec failed");
  } else if (!strcmp(mode, "signal")) {
    char path[4096];
    own_file(path, sizeof path);
    raise(SIGUSR1);
    counted_site(); /* the next lock operation writes the snapshot */
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && sb.st_size > 0, "no snapshot in %s", path);
  } else if (!strcmp(mode, "closefds")) {
    /* As a daemon does: close every descriptor it does not know, then open one of its own. */
    for (int fd = 3; fd < 1024; fd++)
      close(fd);
    char mine[4096];
    snprintf(mine, sizeof mine, "%s", argv[2]);
    int fd = open(mine, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 3, "open");
    CHECK(write(fd, "mine\n", 5) == 5, "write");
    /* fd stays open at exit: the library must not write into it. */
  } else if (!strcmp(mode, "setuid")) {
    CHECK(setgid(65534) == 0 && setuid(65534) == 0, "drop privileges");
  }
  printf("done %d\n", failures);
  return failures ? 1 : 3;
}
