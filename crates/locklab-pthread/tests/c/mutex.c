/* pthread_mutex_* conformance: every kind, its error codes, static initializers, timeouts and clocks,
 * unlock by another thread, destroy, the old aliases, robust and process-shared mutexes across fork
 * (glibc's, delegated), and fork with atfork handlers that lock. Passes under glibc alone. */
#include "check.h"
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>

/* The old aliases exist only as compatibility symbols, as old binaries reference them. */
#if defined(__x86_64__)
#define OLD "GLIBC_2.2.5"
#else
#define OLD "GLIBC_2.17"
#endif
__asm__(".symver old_mutex_lock, __pthread_mutex_lock@" OLD);
__asm__(".symver old_mutex_unlock, __pthread_mutex_unlock@" OLD);
__asm__(".symver old_mutex_trylock, __pthread_mutex_trylock@" OLD);
extern int old_mutex_lock(pthread_mutex_t *);
extern int old_mutex_unlock(pthread_mutex_t *);
extern int old_mutex_trylock(pthread_mutex_t *);

static pthread_mutex_t s_normal = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t s_rec = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_mutex_t s_err = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
static pthread_mutex_t s_adapt = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;

static void *try_in_thread(void *m) { return (void *)(long)pthread_mutex_trylock(m); }
static void *unlock_in_thread(void *m) { return (void *)(long)pthread_mutex_unlock(m); }
static void *lock_in_thread(void *m) { return (void *)(long)pthread_mutex_lock(m); }

static void kinds(void) {
  /* Normal (static): trylock on a held mutex is EBUSY, another thread may unlock it. */
  EQ(pthread_mutex_lock(&s_normal), 0);
  EQ(pthread_mutex_trylock(&s_normal), EBUSY);
  EQ(in_thread(try_in_thread, &s_normal), EBUSY);
  EQ(in_thread(unlock_in_thread, &s_normal), 0); /* glibc allows it; programs do it */
  EQ(pthread_mutex_trylock(&s_normal), 0);
  EQ(pthread_mutex_unlock(&s_normal), 0);
  /* Locked by another thread that exits, then unlocked here. */
  EQ(in_thread(lock_in_thread, &s_normal), 0);
  EQ(pthread_mutex_trylock(&s_normal), EBUSY);
  EQ(pthread_mutex_unlock(&s_normal), 0);
  EQ(pthread_mutex_lock(&s_normal), 0);
  EQ(pthread_mutex_unlock(&s_normal), 0);

  /* Recursive (static NP initializer): the count, EPERM for others. */
  EQ(pthread_mutex_lock(&s_rec), 0);
  EQ(pthread_mutex_lock(&s_rec), 0);
  EQ(pthread_mutex_trylock(&s_rec), 0);
  EQ(in_thread(try_in_thread, &s_rec), EBUSY);
  EQ(in_thread(unlock_in_thread, &s_rec), EPERM);
  EQ(pthread_mutex_unlock(&s_rec), 0);
  EQ(pthread_mutex_unlock(&s_rec), 0);
  EQ(in_thread(try_in_thread, &s_rec), EBUSY); /* still held once */
  EQ(pthread_mutex_unlock(&s_rec), 0);
  EQ(pthread_mutex_unlock(&s_rec), EPERM); /* not held */
  EQ(in_thread(try_in_thread, &s_rec), 0);   /* the thread exits holding it */
  EQ(pthread_mutex_trylock(&s_rec), EBUSY);

  /* Errorcheck (static NP initializer). */
  EQ(pthread_mutex_lock(&s_err), 0);
  EQ(pthread_mutex_lock(&s_err), EDEADLK);
  EQ(pthread_mutex_trylock(&s_err), EBUSY);
  EQ(in_thread(unlock_in_thread, &s_err), EPERM);
  EQ(pthread_mutex_unlock(&s_err), 0);
  EQ(pthread_mutex_unlock(&s_err), EPERM);

  /* Adaptive (static NP initializer) behaves as normal. */
  EQ(pthread_mutex_lock(&s_adapt), 0);
  EQ(pthread_mutex_trylock(&s_adapt), EBUSY);
  EQ(pthread_mutex_unlock(&s_adapt), 0);

  /* The same kinds through attributes, and the fields glibc's users read. */
  int types[] = {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ERRORCHECK,
                 PTHREAD_MUTEX_ADAPTIVE_NP, PTHREAD_MUTEX_DEFAULT};
  for (unsigned i = 0; i < sizeof types / sizeof *types; i++) {
    pthread_mutexattr_t a;
    pthread_mutex_t m;
    memset(&m, 0xa5, sizeof m);
    pthread_mutexattr_init(&a);
    EQ(pthread_mutexattr_settype(&a, types[i]), 0);
    EQ(pthread_mutex_init(&m, &a), 0);
    pthread_mutexattr_destroy(&a);
    /* LOCKLAB_MUTEX=glibc-adaptive makes every normal mutex glibc's adaptive kind, by design. */
    const char *choice = getenv("LOCKLAB_MUTEX");
    int adapted = choice && strcmp(choice, "glibc-adaptive") == 0 && (types[i] & 3) == 0;
    EQ(m.__data.__kind & 3, adapted ? PTHREAD_MUTEX_ADAPTIVE_NP : types[i] & 3);
    EQ(m.__data.__owner, 0);
    EQ(pthread_mutex_lock(&m), 0);
    EQ(m.__data.__owner, gettid()); /* the owner TID, where gdb looks */
    EQ(pthread_mutex_trylock(&m), types[i] == PTHREAD_MUTEX_RECURSIVE ? 0 : EBUSY);
    if (types[i] == PTHREAD_MUTEX_RECURSIVE) {
      EQ(m.__data.__count, 2);
      EQ(pthread_mutex_unlock(&m), 0);
    }
    EQ(pthread_mutex_destroy(&m), EBUSY);
    EQ(pthread_mutex_unlock(&m), 0);
    EQ(m.__data.__owner, 0);
    EQ(pthread_mutex_destroy(&m), 0);
  }

  /* All-zero memory is a valid mutex at any moment (std::mutex never calls init). */
  pthread_mutex_t *z = calloc(1, sizeof *z);
  EQ(pthread_mutex_lock(z), 0);
  EQ(pthread_mutex_unlock(z), 0);
  free(z);

  /* The old aliases. */
  pthread_mutex_t al = PTHREAD_MUTEX_INITIALIZER;
  EQ(old_mutex_lock(&al), 0);
  EQ(old_mutex_trylock(&al), EBUSY);
  EQ(old_mutex_unlock(&al), 0);

  /* Priority ceiling on a non-PP mutex: EINVAL; consistent on a non-robust one: EINVAL. */
  int ceiling;
  EQ(pthread_mutex_getprioceiling(&al, &ceiling), EINVAL);
  EQ(pthread_mutex_consistent(&al), EINVAL);
}

static pthread_mutex_t held_elsewhere = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t release_it = PTHREAD_MUTEX_INITIALIZER;
static void *hold(void *arg) {
  (void)arg;
  pthread_mutex_lock(&held_elsewhere);
  pthread_mutex_lock(&release_it); /* main holds it until the timed tests are done */
  pthread_mutex_unlock(&release_it);
  pthread_mutex_unlock(&held_elsewhere);
  return NULL;
}

static void timed(void) {
  pthread_mutex_t free_m = PTHREAD_MUTEX_INITIALIZER;
  struct timespec bad = {0, 2000000000L};
  /* A free mutex: taken even with an invalid time (glibc checks the time only when it must wait). */
  EQ(pthread_mutex_timedlock(&free_m, &bad), 0);
  EQ(pthread_mutex_unlock(&free_m), 0);
  struct timespec t = in_ms(CLOCK_MONOTONIC, 10);
  EQ(pthread_mutex_clocklock(&free_m, CLOCK_MONOTONIC, &t), 0);
  EQ(pthread_mutex_unlock(&free_m), 0);
  EQ(pthread_mutex_clocklock(&free_m, CLOCK_PROCESS_CPUTIME_ID, &t), EINVAL);

  pthread_mutex_lock(&release_it);
  pthread_t th;
  pthread_create(&th, NULL, hold, NULL);
  while (pthread_mutex_trylock(&held_elsewhere) == 0) { /* wait for the holder */
    pthread_mutex_unlock(&held_elsewhere);
    usleep(1000);
  }
  EQ(pthread_mutex_timedlock(&held_elsewhere, &bad), EINVAL);
  double t0 = now_s();
  t = in_ms(CLOCK_REALTIME, 100);
  EQ(pthread_mutex_timedlock(&held_elsewhere, &t), ETIMEDOUT);
  double waited = now_s() - t0;
  CHECK(waited >= 0.095 && waited < 5, "timedlock waited %.3f s for 0.1 s", waited);
  t0 = now_s();
  t = in_ms(CLOCK_MONOTONIC, 100);
  EQ(pthread_mutex_clocklock(&held_elsewhere, CLOCK_MONOTONIC, &t), ETIMEDOUT);
  waited = now_s() - t0;
  CHECK(waited >= 0.095 && waited < 5, "clocklock waited %.3f s for 0.1 s", waited);
  struct timespec past = {0, 0};
  EQ(pthread_mutex_timedlock(&held_elsewhere, &past), ETIMEDOUT);
  /* Before the epoch: timed out, whatever the nanoseconds say (glibc checks the seconds first). */
  struct timespec before_epoch = {-1, -1};
  EQ(pthread_mutex_timedlock(&held_elsewhere, &before_epoch), ETIMEDOUT);
  EQ(pthread_mutex_clocklock(&held_elsewhere, CLOCK_MONOTONIC, &before_epoch), ETIMEDOUT);
  struct timespec bad_ns = {0, -1};
  EQ(pthread_mutex_timedlock(&held_elsewhere, &bad_ns), EINVAL);
  /* A timed lock that succeeds once the holder lets go. */
  pthread_mutex_unlock(&release_it);
  t = in_ms(CLOCK_REALTIME, 5000);
  EQ(pthread_mutex_timedlock(&held_elsewhere, &t), 0);
  EQ(pthread_mutex_unlock(&held_elsewhere), 0);
  pthread_join(th, NULL);

  /* Errorcheck relock through the timed call: EDEADLK, at once. */
  pthread_mutex_t e = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
  EQ(pthread_mutex_lock(&e), 0);
  t = in_ms(CLOCK_REALTIME, 1000);
  EQ(pthread_mutex_timedlock(&e, &t), EDEADLK);
  EQ(pthread_mutex_unlock(&e), 0);
}

/* Robust + process-shared mutex in shared memory (delegated to glibc): EOWNERDEAD when the owner
 * process dies, pthread_mutex_consistent, and a counter both processes increment under a pshared lock. */
static void shared_and_robust(void) {
  struct shared {
    pthread_mutex_t robust;
    pthread_mutex_t pshared;
    long counter;
  } *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  EQ(pthread_mutex_init(&s->robust, &a), 0);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_STALLED);
  EQ(pthread_mutex_init(&s->pshared, &a), 0);
  pthread_mutexattr_destroy(&a);
  EQ(s->pshared.__data.__kind & 128, 128); /* glibc's pshared bit, kept */

  pid_t pid = fork();
  if (pid == 0) {
    pthread_mutex_lock(&s->robust);
    for (int i = 0; i < 100000; i++) {
      pthread_mutex_lock(&s->pshared);
      s->counter++;
      pthread_mutex_unlock(&s->pshared);
    }
    _exit(0); /* dies holding the robust mutex */
  }
  for (int i = 0; i < 100000; i++) {
    pthread_mutex_lock(&s->pshared);
    s->counter++;
    pthread_mutex_unlock(&s->pshared);
  }
  int st;
  waitpid(pid, &st, 0);
  EQ(s->counter, 200000);
  EQ(pthread_mutex_lock(&s->robust), EOWNERDEAD);
  EQ(pthread_mutex_consistent(&s->robust), 0);
  EQ(pthread_mutex_unlock(&s->robust), 0);
  EQ(pthread_mutex_lock(&s->robust), 0);
  EQ(pthread_mutex_unlock(&s->robust), 0);
  EQ(pthread_mutex_destroy(&s->robust), 0);
  EQ(pthread_mutex_destroy(&s->pshared), 0);

  /* Priority inherit and protect: glibc's. */
  pthread_mutex_t pi, pp;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT);
  EQ(pthread_mutex_init(&pi, &a), 0);
  EQ(pthread_mutex_lock(&pi), 0);
  EQ(pthread_mutex_trylock(&pi), EBUSY);
  EQ(pthread_mutex_unlock(&pi), 0);
  EQ(pthread_mutex_destroy(&pi), 0);
  pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_PROTECT);
  int min = sched_get_priority_min(SCHED_FIFO);
  pthread_mutexattr_setprioceiling(&a, min);
  EQ(pthread_mutex_init(&pp, &a), 0);
  int ceiling = -1;
  EQ(pthread_mutex_getprioceiling(&pp, &ceiling), 0);
  EQ(ceiling, min);
  EQ(pthread_mutex_destroy(&pp), 0);
  pthread_mutexattr_destroy(&a);
}

/* fork: the child locks what it inherited unlocked; atfork handlers that lock and unlock. */
static pthread_mutex_t atfork_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t atfork_e = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
static void prepare(void) { pthread_mutex_lock(&atfork_m); }
static void parent(void) { pthread_mutex_unlock(&atfork_m); }
static void child(void) { pthread_mutex_unlock(&atfork_m); }
static void with_fork(void) {
  pthread_atfork(prepare, parent, child);
  for (int i = 0; i < 20; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      int bad = 0;
      bad |= pthread_mutex_lock(&atfork_m) != 0;
      bad |= pthread_mutex_unlock(&atfork_m) != 0;
      bad |= pthread_mutex_lock(&atfork_e) != 0;          /* the child's own TID owns it */
      bad |= pthread_mutex_lock(&atfork_e) != EDEADLK;
      bad |= pthread_mutex_unlock(&atfork_e) != 0;
      bad |= pthread_mutex_lock(&s_normal) != 0;
      bad |= pthread_mutex_unlock(&s_normal) != 0;
      _exit(bad);
    }
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d failed (status %d)", i, st);
  }
  EQ(pthread_mutex_trylock(&atfork_m), 0);
  EQ(pthread_mutex_unlock(&atfork_m), 0);
}

int main(void) {
  check_preload();
  kinds();
  timed();
  shared_and_robust();
  with_fork();
  return finish("mutex");
}
