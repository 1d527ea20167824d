/* A spinlock initialised PTHREAD_PROCESS_PRIVATE but placed in memory shared by two processes
 * (glibc's spinlock works there whatever pshared says), then one initialised PTHREAD_PROCESS_SHARED:
 * two processes of two threads each increment a shared counter under it. Every increment must
 * count. With LOCKLAB_SPIN=qspinlock only the marked (shared) lock is used: its queue names threads
 * by their slot in one process, so a private-marked one cannot be shared (README). */
#include "check.h"
#include <sys/mman.h>
#include <sys/wait.h>

#define ROUNDS 200000
struct shared {
  pthread_spinlock_t lock;
  long counter;
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

static long run(int pshared) {
  sh->counter = 0;
  EQ(pthread_spin_init(&sh->lock, pshared), 0);
  pid_t p = fork();
  if (p == 0) {
    two_threads();
    _exit(0);
  }
  two_threads();
  int st;
  waitpid(p, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the other process failed: status %#x", st);
  return sh->counter;
}

int main(void) {
  check_preload();
  sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  const char *spin = getenv("LOCKLAB_SPIN");
  int queued = getenv("LD_PRELOAD") && (!spin || !*spin || strcmp(spin, "qspinlock") == 0);
  if (!queued) EQ(run(PTHREAD_PROCESS_PRIVATE), 4L * ROUNDS);
  EQ(run(PTHREAD_PROCESS_SHARED), 4L * ROUNDS);
  printf("spin_shared: %s\n", queued ? "shared-marked only (qspinlock)" : "private- and shared-marked");
  return finish("spin_shared");
}
