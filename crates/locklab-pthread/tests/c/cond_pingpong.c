/* Condvar ping-pong under load, every kind of pair at once: for each scenario (mutex type default,
 * normal, errorcheck, recursive x private threads, process-shared threads, process-shared across a
 * fork, a process-shared condvar with a private mutex x CLOCK_REALTIME or CLOCK_MONOTONIC condvar) PAIRS pairs share one mutex and one condvar.
 * Side A holds the mutex, starts side B (a thread, or a forked process), then while the stop flag is
 * clear: timed-waits, signals. Side B: locks, while the flag is clear: broadcasts, timed-waits; then a
 * last broadcast. Every thread runs on a minimal stack (PTHREAD_STACK_MIN). After SECONDS the
 * process sends itself SIGUSR1, whose handler (on whichever thread gets it, maybe one inside a lock
 * call) sets the flag without the mutex, and every pair must finish; then every condvar and mutex
 * is destroyed. Any wait that times out means a wake-up was lost: its partner
 * always signals or broadcasts after the waiter has released the mutex and before it waits itself.
 *
 * Usage: cond_pingpong [SECONDS [PAIRS [WAIT_S]]] (defaults 3, 3, 30). Exit 0 when every pair
 * finished, 1 with one line per lost wake-up. */
#include "check.h"
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>

enum { MAX_PAIRS = 16 };

struct scenario {
  int type, mutex_pshared, cond_pshared, monotonic, fork;
};

struct pair {
  pthread_mutex_t m;
  pthread_cond_t c;
  clockid_t clock;
  int fork, scen;
  pid_t child;
  pthread_t tb;
  _Atomic long rounds;
  _Atomic int lost_a, lost_b, error;
};

struct shared {
  _Atomic int stop;
  struct pair pairs[32 * MAX_PAIRS];
};

static struct shared *sh;

static void on_usr1(int sig) {
  (void)sig;
  atomic_store(&sh->stop, 1);
}
static int wait_s = 30;
static pthread_attr_t small_stack;
static const char *type_name[] = {"normal", "recursive", "errorcheck", "default"};

static int type_index(int t) {
  switch (t) {
  case PTHREAD_MUTEX_NORMAL: return 0;
  case PTHREAD_MUTEX_RECURSIVE: return 1;
  case PTHREAD_MUTEX_ERRORCHECK: return 2;
  default: return 3;
  }
}

static struct scenario scen[32];
static int nscen;

static int timed(struct pair *p) {
  struct timespec t;
  clock_gettime(p->clock, &t);
  t.tv_sec += wait_s;
  return pthread_cond_timedwait(&p->c, &p->m, &t);
}

static void *side_b(void *arg) {
  struct pair *p = arg;
  if (pthread_mutex_lock(&p->m)) p->error = 1;
  while (!atomic_load(&sh->stop)) {
    if (pthread_cond_broadcast(&p->c)) p->error = 2;
    int r = timed(p);
    if (r == ETIMEDOUT) {
      p->lost_b = 1;
      break;
    }
    if (r) p->error = 3;
    p->rounds++;
  }
  if (pthread_cond_broadcast(&p->c)) p->error = 4;
  if (pthread_mutex_unlock(&p->m)) p->error = 5;
  return NULL;
}

static void *side_a(void *arg) {
  struct pair *p = arg;
  if (pthread_mutex_lock(&p->m)) p->error = 6;
  if (p->fork) {
    pid_t pid = fork();
    if (pid == 0) {
      side_b(p);
      _exit(0);
    }
    if (pid < 0) p->error = 7;
    p->child = pid;
  } else if (pthread_create(&p->tb, &small_stack, side_b, p)) {
    p->error = 8;
  }
  while (!atomic_load(&sh->stop)) {
    int r = timed(p);
    if (r == ETIMEDOUT) {
      p->lost_a = 1;
      break;
    }
    if (r) p->error = 9;
    if (pthread_cond_signal(&p->c)) p->error = 10;
  }
  if (pthread_mutex_unlock(&p->m)) p->error = 11;
  if (p->fork) {
    int st;
    if (waitpid(p->child, &st, 0) != p->child || !WIFEXITED(st) || WEXITSTATUS(st)) p->error = 12;
  } else {
    pthread_join(p->tb, NULL);
  }
  return NULL;
}

int main(int argc, char **argv) {
  int seconds = argc > 1 ? atoi(argv[1]) : 3;
  int pairs = argc > 2 ? atoi(argv[2]) : 3;
  if (argc > 3) wait_s = atoi(argv[3]);
  if (pairs < 1 || pairs > MAX_PAIRS || seconds < 0 || wait_s < 1) {
    fprintf(stderr, "usage: cond_pingpong [SECONDS [PAIRS (1-%d) [WAIT_S]]]\n", MAX_PAIRS);
    return 2;
  }
  check_preload();
  int types[] = {PTHREAD_MUTEX_DEFAULT, PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ERRORCHECK,
                 PTHREAD_MUTEX_RECURSIVE};
  /* (mutex pshared, cond pshared, fork): private threads, shared threads, shared processes, a
   * shared condvar with a private mutex between threads. */
  int modes[4][3] = {{0, 0, 0}, {1, 1, 0}, {1, 1, 1}, {0, 1, 0}};
  for (int mono = 0; mono < 2; mono++)
    for (int mode = 0; mode < 4; mode++)
      for (int t = 0; t < 4; t++)
        scen[nscen++] = (struct scenario){types[t], modes[mode][0], modes[mode][1], mono,
                                          modes[mode][2]};

  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 2;
  int n = nscen * pairs;
  for (int i = 0; i < n; i++) {
    struct pair *p = &sh->pairs[i];
    struct scenario *s = &scen[i % nscen];
    pthread_mutexattr_t ma;
    pthread_condattr_t ca;
    pthread_mutexattr_init(&ma);
    pthread_condattr_init(&ca);
    EQ(pthread_mutexattr_settype(&ma, s->type), 0);
    if (s->mutex_pshared) EQ(pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED), 0);
    if (s->cond_pshared) EQ(pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED), 0);
    if (s->monotonic) EQ(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC), 0);
    EQ(pthread_mutex_init(&p->m, &ma), 0);
    EQ(pthread_cond_init(&p->c, &ca), 0);
    p->clock = s->monotonic ? CLOCK_MONOTONIC : CLOCK_REALTIME;
    p->fork = s->fork;
    p->scen = i % nscen;
    pthread_mutexattr_destroy(&ma);
    pthread_condattr_destroy(&ca);
  }
  pthread_attr_init(&small_stack);
  EQ(pthread_attr_setstacksize(&small_stack, (size_t)sysconf(_SC_THREAD_STACK_MIN)), 0);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  EQ(sigaction(SIGUSR1, &sa, NULL), 0);
  pthread_t ta[32 * MAX_PAIRS];
  for (int i = 0; i < n; i++) EQ(pthread_create(&ta[i], &small_stack, side_a, &sh->pairs[i]), 0);
  sleep(seconds);
  kill(getpid(), SIGUSR1);
  for (int i = 0; i < n; i++) pthread_join(ta[i], NULL);
  for (int i = 0; i < n; i++) {
    EQ(pthread_cond_destroy(&sh->pairs[i].c), 0);
    EQ(pthread_mutex_destroy(&sh->pairs[i].m), 0);
  }

  long total = 0;
  for (int i = 0; i < n; i++) {
    struct pair *p = &sh->pairs[i];
    struct scenario *s = &scen[p->scen];
    const char *how = s->fork            ? "process-shared, across processes"
                      : s->mutex_pshared ? "process-shared, threads"
                      : s->cond_pshared  ? "process-shared condvar, private mutex, threads"
                                         : "private, threads";
    if (p->lost_a || p->lost_b || p->error) {
      failures++;
      printf("FAIL pair %d (%s mutex, %s, %s clock): %s%s error %d after %ld rounds\n", i,
             type_name[type_index(s->type)], how, s->monotonic ? "monotonic" : "realtime",
             p->lost_a ? "side A lost a wake-up; " : "", p->lost_b ? "side B lost a wake-up; " : "",
             p->error, (long)p->rounds);
    }
    total += p->rounds;
  }
  printf("%d pairs, %ld rounds in %d s\n", n, total, seconds);
  return finish("cond_pingpong");
}
