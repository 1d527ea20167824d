/* Two promises of a mutex's unlock that glibc keeps and programs rely on.
 *
 * 1. Nothing touches the mutex after the unlock has released it. POSIX lets the last user of a
 *    reference-counted object destroy the mutex as soon as it has locked and unlocked it (glibc bug
 *    13690 is about exactly this): here every object's last user destroys its mutex and writes a
 *    marker over the lock word, as a new object in reused memory would. The other users' unlocks,
 *    which often find a locker counted but not yet asleep, must not change the marker.
 * 2. A timed locker is woken by the unlock it waits for, even in a fork child whose parent forked
 *    while a woken sleeper had not yet run (the child has no such thread): it gets the lock soon
 *    after the unlock, not at its deadline 10 s later. Each round's child reports how long its
 *    timed locker waited; more than a second is a failure.
 *
 * Prints "unlock_then_reuse: N failure(s)"; exits non-zero on any. */
#include "check.h"
#include <sched.h>
#include <stdatomic.h>
#include <sys/wait.h>

#define MARKER 0xFFFFFFFFu

struct object {
  pthread_mutex_t m;
  atomic_int users;
};

static struct object *objects;
static int nthreads, nobjects;

static void busy_ns(long ns) {
  double end = now_s() + ns * 1e-9;
  while (now_s() < end) {
  }
}

static void *user(void *arg) {
  unsigned seed = (unsigned)(long)arg * 2654435761u + 1;
  for (int k = 0; k < nobjects; k++) {
    struct object *o = &objects[k];
    seed = seed * 1103515245u + 12345u;
    pthread_mutex_lock(&o->m);
    int last = atomic_fetch_sub(&o->users, 1) == 1;
    if (!last)
      busy_ns(2000 + (seed >> 16) % 6000); /* the next user counts itself meanwhile */
    pthread_mutex_unlock(&o->m);
    if (last) {
      pthread_mutex_lock(&o->m);
      pthread_mutex_unlock(&o->m);
      EQ(pthread_mutex_destroy(&o->m), 0);
      *(volatile unsigned *)&o->m = MARKER; /* the memory is another object's now */
    }
  }
  return NULL;
}

static void destroy_after_last_unlock(void) {
  nthreads = 3;
  nobjects = 20000;
  objects = calloc(nobjects, sizeof *objects);
  for (int k = 0; k < nobjects; k++) {
    pthread_mutex_init(&objects[k].m, NULL);
    objects[k].users = nthreads;
  }
  pthread_t t[3];
  for (long i = 0; i < nthreads; i++)
    pthread_create(&t[i], NULL, user, (void *)i);
  for (int i = 0; i < nthreads; i++)
    pthread_join(t[i], NULL);
  int written = 0;
  for (int k = 0; k < nobjects; k++)
    written += *(unsigned *)&objects[k].m != MARKER;
  CHECK(written == 0, "%d of %d destroyed mutexes written after their release", written, nobjects);
  free(objects);
}

static pthread_mutex_t shared = PTHREAD_MUTEX_INITIALIZER;
static atomic_int stop;

static void *contender(void *arg) {
  (void)arg;
  while (!atomic_load(&stop)) {
    pthread_mutex_lock(&shared);
    pthread_mutex_unlock(&shared);
    usleep(100);
  }
  return NULL;
}

static void *timed_locker(void *arg) {
  (void)arg;
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 10;
  double t0 = now_s();
  int r = pthread_mutex_timedlock(&shared, &deadline);
  long waited_ms = (long)((now_s() - t0) * 1000);
  if (r == 0)
    pthread_mutex_unlock(&shared);
  return (void *)waited_ms;
}

static void timed_locker_in_a_fork_child(void) {
  /* One CPU: a sleeper woken by the unlock below has not run when the fork happens. */
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  sched_setaffinity(0, sizeof one, &one);
  pthread_t t[3];
  for (int i = 0; i < 3; i++)
    pthread_create(&t[i], NULL, contender, NULL);
  for (int round = 0; round < 5; round++) {
    pthread_mutex_lock(&shared);
    usleep(3000); /* the contenders go to sleep on the mutex */
    pthread_mutex_unlock(&shared); /* wakes one of them */
    pthread_mutex_lock(&shared);  /* and forks holding the mutex, as an atfork handler would */
    pid_t child = fork();
    if (child == 0) {
      pthread_mutex_unlock(&shared);
      pthread_mutex_lock(&shared);
      pthread_t w;
      pthread_create(&w, NULL, timed_locker, NULL);
      usleep(20000);
      pthread_mutex_unlock(&shared);
      void *waited;
      pthread_join(w, &waited);
      _exit((long)waited > 1000 ? 1 : 0);
    }
    pthread_mutex_unlock(&shared);
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "round %d: the child's timed locker waited for its deadline", round);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < 3; i++)
    pthread_join(t[i], NULL);
}

int main(void) {
  check_preload();
  destroy_after_last_unlock();
  timed_locker_in_a_fork_child();
  return finish("unlock_then_reuse");
}
