/* pthread_cond_* conformance: wake-ups under load (a bounded queue with more threads than CPUs, no
 * lost wake-up, every item delivered once), signal and broadcast, time-outs on each clock (the
 * attribute's clock, clockwait), error codes, every mutex kind as the condvar's mutex, a wait in a
 * forked child, and C11 cnd_* / mtx_*. Passes under glibc alone. */
#include "check.h"
#include <sys/wait.h>
#include <threads.h>

#define SLOTS 4
#define ITEMS 20000
#define PRODUCERS 3
#define CONSUMERS 3

static pthread_mutex_t qm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER, not_full = PTHREAD_COND_INITIALIZER;
static long queue[SLOTS], head, tail, count, consumed_sum, consumed_n;
static int use_broadcast;

static void *producer(void *arg) {
  long base = (long)arg * ITEMS;
  for (long i = 1; i <= ITEMS; i++) {
    pthread_mutex_lock(&qm);
    while (count == SLOTS) pthread_cond_wait(&not_full, &qm);
    queue[tail] = base + i;
    tail = (tail + 1) % SLOTS;
    count++;
    if (use_broadcast) pthread_cond_broadcast(&not_empty); else pthread_cond_signal(&not_empty);
    pthread_mutex_unlock(&qm);
  }
  return NULL;
}

static void *consumer(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&qm);
    while (count == 0 && consumed_n < (long)PRODUCERS * ITEMS) pthread_cond_wait(&not_empty, &qm);
    if (count == 0) {
      pthread_mutex_unlock(&qm);
      return NULL;
    }
    consumed_sum += queue[head];
    head = (head + 1) % SLOTS;
    count--;
    if (++consumed_n == (long)PRODUCERS * ITEMS) pthread_cond_broadcast(&not_empty);
    if (use_broadcast) pthread_cond_broadcast(&not_full); else pthread_cond_signal(&not_full);
    pthread_mutex_unlock(&qm);
  }
}

static void queue_under_load(int broadcast) {
  pthread_t t[PRODUCERS + CONSUMERS];
  use_broadcast = broadcast;
  head = tail = count = consumed_sum = consumed_n = 0;
  for (long i = 0; i < PRODUCERS; i++) pthread_create(&t[i], NULL, producer, (void *)i);
  for (long i = 0; i < CONSUMERS; i++) pthread_create(&t[PRODUCERS + i], NULL, consumer, NULL);
  for (int i = 0; i < PRODUCERS + CONSUMERS; i++) pthread_join(t[i], NULL);
  long n = (long)PRODUCERS * ITEMS, want = 0;
  for (long p = 0; p < PRODUCERS; p++) want += p * ITEMS * ITEMS + (long)ITEMS * (ITEMS + 1) / 2;
  EQ(consumed_n, n);
  EQ(consumed_sum, want);
}

/* Ping-pong: each side waits for its turn; a lost wake-up hangs (the harness's timeout fails it). */
static pthread_mutex_t pm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pc = PTHREAD_COND_INITIALIZER;
static int turn;
static void *pong(void *arg) {
  (void)arg;
  for (int i = 0; i < 20000; i++) {
    pthread_mutex_lock(&pm);
    while (turn != 1) pthread_cond_wait(&pc, &pm);
    turn = 0;
    pthread_cond_signal(&pc);
    pthread_mutex_unlock(&pm);
  }
  return NULL;
}
static void ping_pong(void) {
  pthread_t t;
  pthread_create(&t, NULL, pong, NULL);
  for (int i = 0; i < 20000; i++) {
    pthread_mutex_lock(&pm);
    turn = 1;
    pthread_cond_signal(&pc);
    while (turn != 0) pthread_cond_wait(&pc, &pm);
    pthread_mutex_unlock(&pm);
  }
  pthread_join(t, NULL);
}

static void timeouts(void) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  pthread_mutex_lock(&m);
  double t0 = now_s();
  struct timespec t = in_ms(CLOCK_REALTIME, 100);
  EQ(pthread_cond_timedwait(&c, &m, &t), ETIMEDOUT);
  double w = now_s() - t0;
  CHECK(w >= 0.095 && w < 5, "timedwait waited %.3f s for 0.1 s", w);
  EQ(m.__data.__owner, gettid()); /* the mutex is held again */
  struct timespec bad = {t.tv_sec, 1000000000L};
  EQ(pthread_cond_timedwait(&c, &m, &bad), EINVAL);
  struct timespec past = {0, 0};
  EQ(pthread_cond_timedwait(&c, &m, &past), ETIMEDOUT);

  /* clockwait on each clock; an unsupported clock is EINVAL. */
  t0 = now_s();
  t = in_ms(CLOCK_MONOTONIC, 100);
  EQ(pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &t), ETIMEDOUT);
  w = now_s() - t0;
  CHECK(w >= 0.095 && w < 5, "clockwait waited %.3f s for 0.1 s", w);
  t = in_ms(CLOCK_REALTIME, 50);
  EQ(pthread_cond_clockwait(&c, &m, CLOCK_REALTIME, &t), ETIMEDOUT);
  EQ(pthread_cond_clockwait(&c, &m, CLOCK_THREAD_CPUTIME_ID, &t), EINVAL);

  /* A condvar on CLOCK_MONOTONIC: its timedwait's time is monotonic (a realtime time, decades
   * ahead of the monotonic clock, would not time out). */
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  EQ(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC), 0);
  pthread_cond_t mc;
  EQ(pthread_cond_init(&mc, &ca), 0);
  clockid_t got;
  pthread_condattr_getclock(&ca, &got);
  EQ(got, CLOCK_MONOTONIC);
  pthread_condattr_destroy(&ca);
  t0 = now_s();
  t = in_ms(CLOCK_MONOTONIC, 100);
  EQ(pthread_cond_timedwait(&mc, &m, &t), ETIMEDOUT);
  w = now_s() - t0;
  CHECK(w >= 0.095 && w < 5, "monotonic timedwait waited %.3f s for 0.1 s", w);
  EQ(pthread_cond_destroy(&mc), 0);

  /* Signals and broadcasts with nobody waiting are no-ops. */
  EQ(pthread_cond_signal(&c), 0);
  EQ(pthread_cond_broadcast(&c), 0);
  pthread_mutex_unlock(&m);
  EQ(pthread_cond_destroy(&c), 0);
}

/* Each mutex kind as the condvar's mutex; errorcheck without holding it is EPERM. */
struct kind_arg {
  pthread_mutex_t *m;
  pthread_cond_t *c;
  int *flag;
};
static void *set_flag(void *p) {
  struct kind_arg *a = p;
  pthread_mutex_lock(a->m);
  *a->flag = 1;
  pthread_cond_broadcast(a->c);
  pthread_mutex_unlock(a->m);
  return NULL;
}
static void mutex_kinds(void) {
  int types[] = {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ERRORCHECK,
                 PTHREAD_MUTEX_ADAPTIVE_NP};
  for (unsigned i = 0; i < 4; i++) {
    pthread_mutexattr_t a;
    pthread_mutex_t m;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    int flag = 0;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, types[i]);
    pthread_mutex_init(&m, &a);
    pthread_mutexattr_destroy(&a);
    if (types[i] == PTHREAD_MUTEX_ERRORCHECK) EQ(pthread_cond_wait(&c, &m), EPERM);
    pthread_mutex_lock(&m);
    struct kind_arg arg = {&m, &c, &flag};
    pthread_t t;
    pthread_create(&t, NULL, set_flag, &arg);
    while (!flag) EQ(pthread_cond_wait(&c, &m), 0);
    EQ(m.__data.__owner, gettid());
    EQ(pthread_mutex_unlock(&m), 0);
    pthread_join(t, NULL);
    EQ(pthread_mutex_destroy(&m), 0);
  }
}

/* A forked child waits on a condvar (and times out) with what it inherited. */
static void in_child(void) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  pid_t pid = fork();
  if (pid == 0) {
    struct timespec t = in_ms(CLOCK_REALTIME, 20);
    pthread_mutex_lock(&m);
    int r = pthread_cond_timedwait(&c, &m, &t);
    pthread_mutex_unlock(&m);
    _exit(r == ETIMEDOUT ? 0 : 1);
  }
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
}

/* A condvar destroyed right after the broadcast that woke its waiters, and its memory reused at once
 * (POSIX allows it): the waiters must not touch it after destroy returns. */
#define REUSE_WAITERS 4
static pthread_mutex_t reuse_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t *reuse_c;
static int reuse_ready, reuse_go;
static void *reuse_waiter(void *arg) {
  (void)arg;
  pthread_mutex_lock(&reuse_m);
  reuse_ready++;
  while (!reuse_go) pthread_cond_wait(reuse_c, &reuse_m);
  pthread_mutex_unlock(&reuse_m);
  return NULL;
}
static void destroy_after_broadcast(void) {
  for (int round = 0; round < 50; round++) {
    unsigned char *mem = malloc(sizeof(pthread_cond_t));
    reuse_c = (pthread_cond_t *)mem;
    EQ(pthread_cond_init(reuse_c, NULL), 0);
    reuse_ready = reuse_go = 0;
    pthread_t t[REUSE_WAITERS];
    for (int i = 0; i < REUSE_WAITERS; i++) pthread_create(&t[i], NULL, reuse_waiter, NULL);
    for (;;) {
      pthread_mutex_lock(&reuse_m);
      if (reuse_ready == REUSE_WAITERS) break; /* all are in the wait (they released the mutex) */
      pthread_mutex_unlock(&reuse_m);
      usleep(100);
    }
    reuse_go = 1;
    EQ(pthread_cond_broadcast(reuse_c), 0);
    EQ(pthread_cond_destroy(reuse_c), 0);
    memset(mem, 0xab, sizeof(pthread_cond_t));
    pthread_mutex_unlock(&reuse_m);
    for (int i = 0; i < REUSE_WAITERS; i++) pthread_join(t[i], NULL);
    int intact = 1;
    for (unsigned i = 0; i < sizeof(pthread_cond_t); i++) intact &= mem[i] == 0xab;
    CHECK(intact, "a waiter wrote to the condvar after pthread_cond_destroy returned (round %d)", round);
    free(mem);
  }
}

/* Cancellation: a thread blocked in pthread_cond_wait is cancelled; its cleanup handler runs with the
 * mutex held again (POSIX), unlocks it, and the join reports PTHREAD_CANCELED. */
static pthread_mutex_t cancel_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cancel_c = PTHREAD_COND_INITIALIZER;
static volatile int cancel_waiting, cleanup_held;
static void cleanup(void *arg) {
  (void)arg;
  cleanup_held = pthread_mutex_trylock(&cancel_m) == EBUSY; /* held (by us) */
  pthread_mutex_unlock(&cancel_m);
}
static void *cancel_waiter(void *arg) {
  (void)arg;
  pthread_mutex_lock(&cancel_m);
  pthread_cleanup_push(cleanup, NULL);
  cancel_waiting = 1;
  for (;;) pthread_cond_wait(&cancel_c, &cancel_m);
  pthread_cleanup_pop(1);
  return NULL;
}
static void cancellation(void) {
  pthread_t t;
  pthread_create(&t, NULL, cancel_waiter, NULL);
  while (!cancel_waiting) usleep(1000);
  pthread_mutex_lock(&cancel_m); /* the waiter is inside the wait now */
  pthread_mutex_unlock(&cancel_m);
  usleep(20000);
  EQ(pthread_cancel(t), 0);
  void *r;
  EQ(pthread_join(t, &r), 0);
  CHECK(r == PTHREAD_CANCELED, "the waiter was not cancelled");
  EQ(cleanup_held, 1);
  EQ(pthread_mutex_trylock(&cancel_m), 0); /* released by the cleanup handler */
  EQ(pthread_mutex_unlock(&cancel_m), 0);
}

/* C11. */
static mtx_t cm;
static cnd_t cc;
static int c11_flag;
static int c11_thread(void *arg) {
  (void)arg;
  mtx_lock(&cm);
  c11_flag = 1;
  cnd_signal(&cc);
  mtx_unlock(&cm);
  return 0;
}
static void c11(void) {
  EQ(mtx_init(&cm, mtx_plain), thrd_success);
  EQ(cnd_init(&cc), thrd_success);
  EQ(mtx_lock(&cm), thrd_success);
  EQ(mtx_trylock(&cm), thrd_busy);
  thrd_t t;
  thrd_create(&t, c11_thread, NULL);
  while (!c11_flag) EQ(cnd_wait(&cc, &cm), thrd_success);
  struct timespec ts = in_ms(CLOCK_REALTIME, 30);
  EQ(cnd_timedwait(&cc, &cm, &ts), thrd_timedout);
  EQ(mtx_unlock(&cm), thrd_success);
  thrd_join(t, NULL);
  cnd_broadcast(&cc);
  cnd_destroy(&cc);
  mtx_destroy(&cm);

  mtx_t r;
  EQ(mtx_init(&r, mtx_plain | mtx_recursive), thrd_success);
  EQ(mtx_lock(&r), thrd_success);
  EQ(mtx_lock(&r), thrd_success);
  EQ(mtx_trylock(&r), thrd_success);
  for (int i = 0; i < 3; i++) EQ(mtx_unlock(&r), thrd_success);
  mtx_destroy(&r);

  mtx_t tm;
  EQ(mtx_init(&tm, mtx_timed), thrd_success);
  EQ(mtx_lock(&tm), thrd_success);
  ts = in_ms(CLOCK_REALTIME, 30);
  /* glibc's mtx_timedlock on a held non-recursive mutex by its owner: the owner waits it out. */
  EQ(mtx_timedlock(&tm, &ts), thrd_timedout);
  EQ(mtx_unlock(&tm), thrd_success);
  ts = in_ms(CLOCK_REALTIME, 30);
  EQ(mtx_timedlock(&tm, &ts), thrd_success);
  EQ(mtx_unlock(&tm), thrd_success);
  mtx_destroy(&tm);

  /* glibc 2.36's mtx_init ignores mtx_timed, makes the mutex recursive when what is left is exactly
   * mtx_recursive, plain otherwise (unknown bits included), and never fails on the type. */
  int types[] = {mtx_plain, mtx_timed, mtx_recursive, mtx_recursive | mtx_timed, 0x40, 0x41, 99, 4, 5, -1};
  for (unsigned i = 0; i < sizeof types / sizeof *types; i++) {
    int ty = types[i], recursive = (ty & ~mtx_timed) == mtx_recursive;
    mtx_t u;
    CHECK(mtx_init(&u, ty) == thrd_success, "mtx_init type %d", ty);
    EQ(mtx_lock(&u), thrd_success);
    CHECK(mtx_trylock(&u) == (recursive ? thrd_success : thrd_busy), "mtx_init type %d: recursive %d", ty, recursive);
    if (recursive) EQ(mtx_unlock(&u), thrd_success);
    EQ(mtx_unlock(&u), thrd_success);
    mtx_destroy(&u);
  }
}

int main(void) {
  check_preload();
  queue_under_load(0);
  queue_under_load(1);
  ping_pong();
  timeouts();
  mutex_kinds();
  in_child();
  cancellation();
  destroy_after_broadcast();
  c11();
  return finish("cond");
}
