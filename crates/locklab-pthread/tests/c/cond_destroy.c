/* pthread_cond_destroy returns only after every woken waiter's last touch of the condvar, however
 * long that waiter takes to run again, and without burning CPU meanwhile: the memory may be reused at
 * once (POSIX's example frees it). The woken waiter is held up in a signal handler for 1.5 s; after
 * destroy the main thread fills the condvar's memory with a pattern, which must survive. */
#include "check.h"
#include <signal.h>
#include <sys/mman.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t *c;
static int ready, waiting;

static void stall(int sig) {
  (void)sig;
  struct timespec t = {1, 500000000};
  nanosleep(&t, NULL);
}

static void *waiter(void *arg) {
  (void)arg;
  pthread_mutex_lock(&m);
  waiting = 1;
  while (!ready) pthread_cond_wait(c, &m);
  pthread_mutex_unlock(&m);
  return NULL;
}

static double thread_cpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

int main(void) {
  check_preload();
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = stall;
  sigaction(SIGUSR1, &sa, NULL);
  unsigned char *mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  c = (pthread_cond_t *)mem;
  EQ(pthread_cond_init(c, NULL), 0);
  pthread_t t;
  pthread_create(&t, NULL, waiter, NULL);
  for (;;) {
    pthread_mutex_lock(&m);
    int w = waiting;
    pthread_mutex_unlock(&m);
    if (w) break;
    usleep(1000);
  }
  usleep(50000); /* asleep in the wait */
  pthread_mutex_lock(&m);
  ready = 1;
  pthread_cond_broadcast(c);
  pthread_kill(t, SIGUSR1); /* woken, then held up before it leaves the wait */
  pthread_mutex_unlock(&m);
  double cpu0 = thread_cpu(), t0 = now_s();
  EQ(pthread_cond_destroy(c), 0);
  double waited = now_s() - t0, cpu = thread_cpu() - cpu0;
  memset(mem, 0xa5, sizeof(pthread_cond_t)); /* reused */
  pthread_join(t, NULL);
  int intact = 1;
  for (size_t i = 0; i < sizeof(pthread_cond_t); i++) intact &= mem[i] == 0xa5;
  printf("cond_destroy: destroy waited %.2f s using %.3f s of CPU; memory intact: %d\n", waited, cpu, intact);
  CHECK(intact, "a woken waiter wrote into the condvar's memory after pthread_cond_destroy returned");
  CHECK(cpu < 0.3, "destroy burned %.3f s of CPU while it waited", cpu);
  return finish("cond_destroy");
}
