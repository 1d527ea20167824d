/* A process-shared mutex and condvar in a shared file mapping, used by this process (with the
 * library, when run so) and by a helper process started without it (the library removed from its
 * environment, as a setuid helper or a program started outside `locklab run` would be): each side
 * waits for the other's signal, so both must use one and the same protocol (glibc's). Then two
 * threads of this process ping-pong on a process-shared condvar paired with a private mutex (the
 * library's own), with cancellation of a waiter on it. */
#include "check.h"
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>

struct shared {
  pthread_mutex_t m;
  pthread_cond_t c;
  int turn, rounds;
};

static int play(struct shared *s, int me, int rounds) {
  for (int i = 0; i < rounds; i++) {
    pthread_mutex_lock(&s->m);
    while (s->turn != me) {
      struct timespec t = in_ms(CLOCK_REALTIME, 5000);
      if (pthread_cond_timedwait(&s->c, &s->m, &t) == ETIMEDOUT) {
        pthread_mutex_unlock(&s->m);
        return 1; /* never woken */
      }
    }
    s->turn = 1 - me;
    s->rounds++;
    pthread_cond_broadcast(&s->c);
    pthread_mutex_unlock(&s->m);
  }
  return 0;
}

static pthread_mutex_t pm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t *pc;
static int pturn;

static void *pong(void *arg) {
  long me = (long)arg;
  for (int i = 0; i < 2000; i++) {
    pthread_mutex_lock(&pm);
    while (pturn != me) pthread_cond_wait(pc, &pm);
    pturn = 1 - me;
    pthread_cond_signal(pc);
    pthread_mutex_unlock(&pm);
  }
  return NULL;
}

static void unlock_pm(void *arg) { pthread_mutex_unlock((pthread_mutex_t *)arg); }

static void *wait_forever(void *arg) {
  (void)arg;
  pthread_mutex_lock(&pm);
  pthread_cleanup_push(unlock_pm, &pm);
  for (;;) pthread_cond_wait(pc, &pm);
  pthread_cleanup_pop(1);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc == 3) { /* the helper, without the library */
    int fd = open(argv[2], O_RDWR);
    struct shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return play(s, 1, 200);
  }
  check_preload();
  char path[] = "/tmp/locklab-cond-pshared-XXXXXX";
  int fd = mkstemp(path);
  EQ(ftruncate(fd, 4096), 0);
  struct shared *s = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  EQ(pthread_mutex_init(&s->m, &ma), 0);
  EQ(pthread_cond_init(&s->c, &ca), 0);
  pid_t p = fork();
  if (p == 0) {
    unsetenv("LD_PRELOAD");
    execl("/proc/self/exe", argv[0], "helper", path, (char *)NULL);
    _exit(127);
  }
  int r = play(s, 0, 200);
  int st = 0;
  waitpid(p, &st, 0);
  unlink(path);
  printf("cond_pshared: %d rounds between the two processes\n", s->rounds);
  EQ(r, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the helper without the library was never woken");
  EQ(s->rounds, 400);
  EQ(pthread_cond_destroy(&s->c), 0);

  pc = (pthread_cond_t *)((char *)s + 1024);
  EQ(pthread_cond_init(pc, &ca), 0);
  pthread_t t[2];
  double t0 = now_s();
  for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, pong, (void *)i);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("cond_pshared: 4000 hand-overs on a shared condvar with a private mutex in %.2f s\n", now_s() - t0);
  pthread_t w;
  pthread_create(&w, NULL, wait_forever, NULL);
  usleep(20000);
  pthread_cancel(w);
  void *res;
  pthread_join(w, &res);
  CHECK(res == PTHREAD_CANCELED, "the waiter was not cancelled");
  EQ(pthread_mutex_trylock(&pm), 0); /* its cleanup released the mutex */
  pthread_mutex_unlock(&pm);
  EQ(pthread_cond_destroy(pc), 0);
  return finish("cond_pshared");
}
