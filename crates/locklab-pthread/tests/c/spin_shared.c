/* Spinlocks in memory shared by processes.
 *
 * 1. With a helper process started without the library (as a setuid helper or a program started
 *    outside `locklab run` would be), in a shared file mapping: a lock initialised
 *    PTHREAD_PROCESS_SHARED by this process, then one initialised by the helper (glibc's
 *    pthread_spin_init). Each side must see the other's holds (trylock EBUSY while the other holds,
 *    0 when free, a lock that waits for the other's unlock), then two threads on each side increment
 *    a shared counter under the lock: every increment must count, and nobody may hang. Both sides
 *    must run one protocol, glibc's: on x86-64 free is 1 and held is 0 or below.
 * 2. Two processes that both have the library (a fork): a lock initialised PTHREAD_PROCESS_PRIVATE
 *    (glibc's works there whatever pshared says; not under LOCKLAB_SPIN=qspinlock, whose queue names
 *    threads by their slot in one process), then one initialised PTHREAD_PROCESS_SHARED. */
#include "check.h"
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define ROUNDS 200000
struct shared {
  pthread_spinlock_t lock;
  long counter;
  volatile int go;
};
static struct shared *sh;

static void *work(void *arg) {
  (void)arg;
  for (int i = 0; i < ROUNDS; i++) {
    pthread_spin_lock(&sh->lock);
    sh->counter++;
    pthread_spin_unlock(&sh->lock);
  }
  return NULL;
}

static void two_threads(void) {
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, work, NULL);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
}

/* The helper: one step of the protocol on the lock, without the library. */
static int helper(const char *mode) {
  alarm(30); /* a lock the two sides disagree on must fail the test, not hang it */
  if (!strcmp(mode, "init")) return pthread_spin_init(&sh->lock, PTHREAD_PROCESS_SHARED);
  if (!strcmp(mode, "busy")) return pthread_spin_trylock(&sh->lock) == EBUSY ? 0 : 1;
  if (!strcmp(mode, "take")) {
    if (pthread_spin_trylock(&sh->lock) != 0) return 1;
    return pthread_spin_unlock(&sh->lock);
  }
  if (!strcmp(mode, "hold")) {
    pthread_spin_lock(&sh->lock);
    sh->go = 1;
    usleep(100000);
    sh->counter++;
    return pthread_spin_unlock(&sh->lock);
  }
  if (!strcmp(mode, "work")) {
    two_threads();
    return 0;
  }
  return 2;
}

static const char *self, *path;

static pid_t start_helper(const char *mode) {
  pid_t p = fork();
  if (p == 0) {
    unsetenv("LD_PRELOAD");
    execl("/proc/self/exe", self, "helper", path, mode, (char *)NULL);
    _exit(127);
  }
  return p;
}

static int helper_ok(pid_t p) {
  int st = 0;
  waitpid(p, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* Part 1 on a lock already initialised (by `who`). */
static void with_helper(const char *who) {
  int before = failures;
  sh->counter = 0;
  sh->go = 0;
  CHECK(helper_ok(start_helper("take")), "%s: the helper could not take the free lock", who);
  int r = pthread_spin_trylock(&sh->lock);
  CHECK(r == 0, "%s: this process could not take the free lock", who);
  if (r != 0) return; /* the two sides disagree: the rest would hang */
  CHECK(helper_ok(start_helper("busy")), "%s: the helper took the lock this process holds", who);
  EQ(pthread_spin_unlock(&sh->lock), 0);
  CHECK(helper_ok(start_helper("take")), "%s: the helper could not take the lock this process freed", who);
  EQ(pthread_spin_lock(&sh->lock), 0);
  EQ(pthread_spin_unlock(&sh->lock), 0);
  if (failures != before) return;
  pid_t p = start_helper("hold");
  for (int i = 0; i < 20000 && !sh->go; i++) usleep(100);
  CHECK(sh->go, "%s: the helper never took the lock", who);
  EQ(pthread_spin_trylock(&sh->lock), EBUSY);
  EQ(pthread_spin_lock(&sh->lock), 0); /* waits for the helper's unlock */
  EQ(sh->counter, 1);
  EQ(pthread_spin_unlock(&sh->lock), 0);
  CHECK(helper_ok(p), "%s: the helper's hold failed", who);
  if (failures != before) return;
  p = start_helper("work");
  two_threads();
  CHECK(helper_ok(p), "%s: the helper's work failed", who);
  EQ(sh->counter, 1 + 4L * ROUNDS);
  EQ(pthread_spin_destroy(&sh->lock), 0);
}

/* Part 2. */
static long forked(int pshared) {
  sh->counter = 0;
  EQ(pthread_spin_init(&sh->lock, pshared), 0);
  pid_t p = fork();
  if (p == 0) {
    two_threads();
    _exit(0);
  }
  two_threads();
  CHECK(helper_ok(p), "the forked process failed");
  return sh->counter;
}

int main(int argc, char **argv) {
  if (argc == 4) { /* the helper, without the library */
    int fd = open(argv[2], O_RDWR);
    sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return helper(argv[3]);
  }
  check_preload();
  alarm(100);
  self = argv[0];
  char tmp[] = "/tmp/locklab-spin-shared-XXXXXX";
  int fd = mkstemp(tmp);
  path = tmp;
  EQ(ftruncate(fd, 4096), 0);
  sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

  EQ(pthread_spin_init(&sh->lock, PTHREAD_PROCESS_SHARED), 0);
  with_helper("initialised here");
  CHECK(helper_ok(start_helper("init")), "the helper's pthread_spin_init failed");
  with_helper("initialised by the helper");
  unlink(tmp);

  const char *spin = getenv("LOCKLAB_SPIN");
  int queued = getenv("LD_PRELOAD") && spin && strcmp(spin, "qspinlock") == 0;
  if (!queued) EQ(forked(PTHREAD_PROCESS_PRIVATE), 4L * ROUNDS);
  EQ(forked(PTHREAD_PROCESS_SHARED), 4L * ROUNDS);
  printf("spin_shared: with a helper without the library, and forked (%s)\n",
         queued ? "shared-marked only" : "private- and shared-marked");
  return finish("spin_shared");
}
