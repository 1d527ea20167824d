/* LOCKLAB_MUTEX=glibc-adaptive: glibc runs every mutex, and every mutex of the normal type (static,
 * default-initialised, PTHREAD_MUTEX_NORMAL, process-shared) becomes glibc's adaptive type; the
 * other types keep their kind and semantics. The program reads glibc's __kind field (what the choice
 * changes) and checks what a program can observe: errorcheck and recursive answers, a normal mutex
 * unlocked by another thread, a condvar wait, and mutual exclusion under 4 threads.
 * EXPECT_ADAPTIVE=1: normal mutexes must read as adaptive (3) once used; otherwise as normal (0). */
#include "check.h"

#define THREADS 4
#define ITERS 50000
static pthread_mutex_t counter_lock = PTHREAD_MUTEX_INITIALIZER;
static long counter;

static void *count(void *arg) {
  (void)arg;
  for (int i = 0; i < ITERS; i++) {
    pthread_mutex_lock(&counter_lock);
    counter++;
    pthread_mutex_unlock(&counter_lock);
  }
  return NULL;
}

static pthread_mutex_t handed = PTHREAD_MUTEX_INITIALIZER;
static void *unlock_other(void *arg) {
  (void)arg;
  return (void *)(long)pthread_mutex_unlock(&handed);
}

static pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int ready;
static void *signaller(void *arg) {
  (void)arg;
  pthread_mutex_lock(&cm);
  ready = 1;
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&cm);
  return NULL;
}

static int kind(pthread_mutex_t *m) { return m->__data.__kind; }

int main(void) {
  check_preload();
  const char *e = getenv("EXPECT_ADAPTIVE");
  int adaptive = e && *e == '1';
  int normal_kind = adaptive ? PTHREAD_MUTEX_ADAPTIVE_NP : PTHREAD_MUTEX_NORMAL;

  /* A static mutex: its kind changes at the first lock, not before. */
  static pthread_mutex_t s = PTHREAD_MUTEX_INITIALIZER;
  EQ(kind(&s), 0);
  EQ(pthread_mutex_lock(&s), 0);
  EQ(kind(&s), normal_kind);
  EQ(pthread_mutex_trylock(&s), EBUSY);
  EQ(pthread_mutex_unlock(&s), 0);

  /* init with no attribute, and with PTHREAD_MUTEX_NORMAL, process-shared. */
  pthread_mutex_t d;
  EQ(pthread_mutex_init(&d, NULL), 0);
  EQ(kind(&d), normal_kind);
  EQ(pthread_mutex_destroy(&d), 0);
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_NORMAL);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  EQ(pthread_mutex_init(&d, &a), 0);
  EQ(kind(&d) & 127, normal_kind);
  EQ(kind(&d) & 128, 128);
  EQ(pthread_mutex_lock(&d), 0);
  EQ(pthread_mutex_unlock(&d), 0);
  EQ(pthread_mutex_destroy(&d), 0);

  /* errorcheck and recursive keep their kind and answers. */
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_PRIVATE);
  EQ(pthread_mutex_init(&d, &a), 0);
  EQ(pthread_mutex_lock(&d), 0);
  EQ(kind(&d), PTHREAD_MUTEX_ERRORCHECK);
  EQ(pthread_mutex_lock(&d), EDEADLK);
  EQ(pthread_mutex_unlock(&d), 0);
  EQ(pthread_mutex_unlock(&d), EPERM);
  EQ(pthread_mutex_destroy(&d), 0);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  EQ(pthread_mutex_init(&d, &a), 0);
  EQ(pthread_mutex_lock(&d), 0);
  EQ(pthread_mutex_lock(&d), 0);
  EQ(kind(&d), PTHREAD_MUTEX_RECURSIVE);
  EQ(pthread_mutex_unlock(&d), 0);
  EQ(pthread_mutex_unlock(&d), 0);
  EQ(pthread_mutex_unlock(&d), EPERM);
  EQ(pthread_mutex_destroy(&d), 0);
  pthread_mutexattr_destroy(&a);

  /* A normal (now adaptive) mutex may be unlocked by another thread, as glibc allows. */
  EQ(pthread_mutex_lock(&handed), 0);
  EQ(in_thread(unlock_other, NULL), 0);
  EQ(pthread_mutex_trylock(&handed), 0);
  EQ(kind(&handed), normal_kind);
  EQ(pthread_mutex_unlock(&handed), 0);

  /* A condvar wait with it. */
  pthread_t t;
  pthread_mutex_lock(&cm);
  pthread_create(&t, NULL, signaller, NULL);
  while (!ready)
    EQ(pthread_cond_wait(&cv, &cm), 0);
  EQ(kind(&cm), normal_kind);
  pthread_mutex_unlock(&cm);
  pthread_join(t, NULL);

  /* Mutual exclusion. */
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++)
    pthread_create(&th[i], NULL, count, NULL);
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  EQ(counter, (long)THREADS * ITERS);
  return finish("glibc_adaptive");
}
