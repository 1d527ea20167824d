/* The standard atfork pattern with threads queued on the lock at fork(): the prepare handler locks,
 * the parent and child handlers unlock. Three threads keep the mutex (and a spinlock, taken the same
 * way) contended, so waiters are queued whenever fork() runs; each child must be able to lock both
 * again and exit (a child that hangs is killed by its alarm and counted). The spinlock part runs
 * with FORK_QUEUED_SPIN=1 (the test runs it once per spinlock choice). */
#include "check.h"
#include <signal.h>
#include <sys/wait.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_spinlock_t s;
static volatile int stop;
static volatile long work;
static int spin;

static void prepare(void) {
  pthread_mutex_lock(&m);
  if (spin) pthread_spin_lock(&s);
}
static void parent(void) {
  if (spin) pthread_spin_unlock(&s);
  pthread_mutex_unlock(&m);
}
static void child(void) {
  if (spin) pthread_spin_unlock(&s);
  pthread_mutex_unlock(&m);
}

static void *hammer(void *arg) {
  (void)arg;
  while (!stop) {
    pthread_mutex_lock(&m);
    for (int i = 0; i < 100; i++) work++;
    pthread_mutex_unlock(&m);
    if (spin) {
      pthread_spin_lock(&s);
      for (int i = 0; i < 100; i++) work++;
      pthread_spin_unlock(&s);
    }
  }
  return NULL;
}

int main(void) {
  check_preload();
  spin = getenv("FORK_QUEUED_SPIN") && *getenv("FORK_QUEUED_SPIN") == '1';
  pthread_spin_init(&s, PTHREAD_PROCESS_PRIVATE);
  pthread_atfork(prepare, parent, child);
  pthread_t t[3];
  for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, hammer, NULL);
  usleep(10000);
  int hung = 0, forks = 40;
  for (int i = 0; i < forks; i++) {
    pid_t p = fork();
    if (p == 0) {
      alarm(5);
      for (int k = 0; k < 3; k++) {
        pthread_mutex_lock(&m);
        if (spin) {
          pthread_spin_lock(&s);
          pthread_spin_unlock(&s);
        }
        pthread_mutex_unlock(&m);
      }
      _exit(0);
    }
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      hung++;
      printf("fork %d: child %s %d\n", i, WIFSIGNALED(st) ? "killed by signal" : "exited with",
             WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    }
    usleep(1000);
  }
  stop = 1;
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  printf("fork_queued: %d forks, %d children hung or died\n", forks, hung);
  EQ(hung, 0);
  return finish("fork_queued");
}
