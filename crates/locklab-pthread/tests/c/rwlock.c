/* pthread_rwlock_* and pthread_spin_* conformance: readers share; a thread that reads may read again
 * while a writer waits (glibc's default, which real programs rely on); error codes; time-outs and
 * clocks; the writer-preferring static initializer; process-shared rwlocks across fork (delegated);
 * the old aliases; spinlocks. Passes under glibc alone. */
#include "check.h"
#include <sys/mman.h>
#include <sys/wait.h>

#if defined(__x86_64__)
#define OLD "GLIBC_2.2.5"
#else
#define OLD "GLIBC_2.17"
#endif
__asm__(".symver old_rdlock, __pthread_rwlock_rdlock@" OLD);
__asm__(".symver old_unlock, __pthread_rwlock_unlock@" OLD);
extern int old_rdlock(pthread_rwlock_t *);
extern int old_unlock(pthread_rwlock_t *);

static pthread_rwlock_t l = PTHREAD_RWLOCK_INITIALIZER;
static volatile int writer_in;

static void *tryrd(void *p) { return (void *)(long)pthread_rwlock_tryrdlock(p); }
static void *trywr(void *p) { return (void *)(long)pthread_rwlock_trywrlock(p); }
static void *rd_then_unlock(void *p) {
  long r = pthread_rwlock_rdlock(p);
  if (r == 0) pthread_rwlock_unlock(p);
  return (void *)r;
}
static void *writer(void *p) {
  pthread_rwlock_wrlock(p);
  writer_in = 1;
  pthread_rwlock_unlock(p);
  return NULL;
}

static void basics(void) {
  EQ(pthread_rwlock_rdlock(&l), 0);
  EQ(in_thread(tryrd, &l), 0); /* readers share (that thread exits holding a read lock...) */
  EQ(pthread_rwlock_unlock(&l), 0); /* ...which is its business: count it back */
  EQ(in_thread(trywr, &l), EBUSY);
  EQ(pthread_rwlock_trywrlock(&l), EBUSY);
  EQ(pthread_rwlock_unlock(&l), 0);
  EQ(pthread_rwlock_wrlock(&l), 0);
  EQ(l.__data.__cur_writer, gettid());
  EQ(pthread_rwlock_wrlock(&l), EDEADLK);
  EQ(pthread_rwlock_rdlock(&l), EDEADLK);
  EQ(pthread_rwlock_trywrlock(&l), EBUSY);
  EQ(pthread_rwlock_tryrdlock(&l), EBUSY);
  EQ(in_thread(tryrd, &l), EBUSY);
  EQ(pthread_rwlock_unlock(&l), 0);
  EQ(l.__data.__cur_writer, 0);
  EQ(old_rdlock(&l), 0);
  EQ(old_unlock(&l), 0);
  EQ(pthread_rwlock_destroy(&l), 0);
  EQ(pthread_rwlock_init(&l, NULL), 0);
}

/* Recursive reads with a writer waiting: must not deadlock (default and PREFER_WRITER_NP kinds). */
static void recursive_read_with_waiting_writer(int kind) {
  pthread_rwlock_t r;
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
  pthread_rwlockattr_setkind_np(&a, kind);
  EQ(pthread_rwlock_init(&r, &a), 0);
  pthread_rwlockattr_destroy(&a);
  writer_in = 0;
  EQ(pthread_rwlock_rdlock(&r), 0);
  pthread_t w;
  pthread_create(&w, NULL, writer, &r);
  usleep(50000); /* the writer is waiting now */
  EQ(writer_in, 0);
  EQ(pthread_rwlock_rdlock(&r), 0); /* the recursive read */
  EQ(in_thread(rd_then_unlock, &r), 0); /* and a new reader, as glibc lets in */
  EQ(pthread_rwlock_unlock(&r), 0);
  EQ(pthread_rwlock_unlock(&r), 0);
  pthread_join(w, NULL);
  EQ(writer_in, 1);
  EQ(pthread_rwlock_destroy(&r), 0);
}

/* The writer-preferring static initializer: a writer that waits keeps new readers out. */
static pthread_rwlock_t wp = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static void writer_nonrecursive(void) {
  EQ(wp.__data.__flags, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  EQ(pthread_rwlock_rdlock(&wp), 0);
  EQ(pthread_rwlock_unlock(&wp), 0);
  EQ(pthread_rwlock_wrlock(&wp), 0);
  EQ(pthread_rwlock_unlock(&wp), 0);
}

static void timed(void) {
  struct timespec bad = {0, -1};
  EQ(pthread_rwlock_timedrdlock(&l, &bad), EINVAL); /* checked up front, as glibc */
  struct timespec t = in_ms(CLOCK_MONOTONIC, 50);
  EQ(pthread_rwlock_clockwrlock(&l, CLOCK_PROCESS_CPUTIME_ID, &t), EINVAL);
  EQ(pthread_rwlock_rdlock(&l), 0);
  double t0 = now_s();
  t = in_ms(CLOCK_REALTIME, 100);
  EQ(pthread_rwlock_timedwrlock(&l, &t), ETIMEDOUT);
  double w = now_s() - t0;
  CHECK(w >= 0.095 && w < 5, "timedwrlock waited %.3f s", w);
  t = in_ms(CLOCK_MONOTONIC, 50);
  EQ(pthread_rwlock_clockwrlock(&l, CLOCK_MONOTONIC, &t), ETIMEDOUT);
  t = in_ms(CLOCK_REALTIME, 50);
  EQ(pthread_rwlock_timedrdlock(&l, &t), 0);
  t = in_ms(CLOCK_MONOTONIC, 50);
  EQ(pthread_rwlock_clockrdlock(&l, CLOCK_MONOTONIC, &t), 0);
  for (int i = 0; i < 3; i++) EQ(pthread_rwlock_unlock(&l), 0);
  EQ(pthread_rwlock_wrlock(&l), 0);
  t = in_ms(CLOCK_MONOTONIC, 50);
  EQ(pthread_rwlock_clockrdlock(&l, CLOCK_MONOTONIC, &t), EDEADLK);
  EQ(pthread_rwlock_unlock(&l), 0);
  t = in_ms(CLOCK_REALTIME, 50);
  EQ(pthread_rwlock_timedwrlock(&l, &t), 0);
  EQ(pthread_rwlock_unlock(&l), 0);
}

/* Readers and writers under load, more threads than CPUs: a writer's two stores are never seen apart. */
static pthread_rwlock_t lr = PTHREAD_RWLOCK_INITIALIZER;
static long a_val, b_val, torn;
static void *mixed(void *arg) {
  long id = (long)arg;
  for (int i = 0; i < 20000; i++) {
    if ((i + id) % 8 == 0) {
      pthread_rwlock_wrlock(&lr);
      a_val++;
      b_val++;
      pthread_rwlock_unlock(&lr);
    } else {
      pthread_rwlock_rdlock(&lr);
      if (a_val != b_val) __atomic_add_fetch(&torn, 1, __ATOMIC_RELAXED);
      pthread_rwlock_unlock(&lr);
    }
  }
  return NULL;
}
static void load(void) {
  pthread_t t[6];
  for (long i = 0; i < 6; i++) pthread_create(&t[i], NULL, mixed, (void *)i);
  for (int i = 0; i < 6; i++) pthread_join(t[i], NULL);
  EQ(torn, 0);
  EQ(a_val, 6 * 20000 / 8);
}

/* A process-shared rwlock in shared memory (glibc's): both processes count under it. */
static void shared(void) {
  struct s {
    pthread_rwlock_t l;
    long n;
  } *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
  pthread_rwlockattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  EQ(pthread_rwlock_init(&s->l, &a), 0);
  pthread_rwlockattr_destroy(&a);
  EQ(s->l.__data.__shared != 0, 1);
  pid_t pid = fork();
  for (int i = 0; i < 50000; i++) {
    pthread_rwlock_wrlock(&s->l);
    s->n++;
    pthread_rwlock_unlock(&s->l);
  }
  if (pid == 0) _exit(0);
  waitpid(pid, NULL, 0);
  EQ(s->n, 100000);
}

/* Spinlocks. */
static pthread_spinlock_t sp;
static long sp_count;
static void *spin_add(void *arg) {
  (void)arg;
  for (int i = 0; i < 50000; i++) {
    pthread_spin_lock(&sp);
    sp_count++;
    pthread_spin_unlock(&sp);
  }
  return NULL;
}
static void spin(void) {
  EQ(pthread_spin_init(&sp, PTHREAD_PROCESS_PRIVATE), 0);
  EQ(pthread_spin_lock(&sp), 0);
  EQ(pthread_spin_trylock(&sp), EBUSY);
  EQ(pthread_spin_unlock(&sp), 0);
  EQ(pthread_spin_trylock(&sp), 0);
  EQ(pthread_spin_unlock(&sp), 0);
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, spin_add, NULL);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  EQ(sp_count, 200000);
  EQ(pthread_spin_destroy(&sp), 0);

  struct s {
    pthread_spinlock_t l;
    long n;
  } *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EQ(pthread_spin_init(&s->l, PTHREAD_PROCESS_SHARED), 0);
  pid_t pid = fork();
  for (int i = 0; i < 50000; i++) {
    pthread_spin_lock(&s->l);
    s->n++;
    pthread_spin_unlock(&s->l);
  }
  if (pid == 0) _exit(0);
  waitpid(pid, NULL, 0);
  EQ(s->n, 100000);
}

int main(void) {
  check_preload();
  basics();
  recursive_read_with_waiting_writer(PTHREAD_RWLOCK_PREFER_READER_NP);
  recursive_read_with_waiting_writer(PTHREAD_RWLOCK_PREFER_WRITER_NP);
  writer_nonrecursive();
  timed();
  load();
  shared();
  spin();
  return finish("rwlock");
}
