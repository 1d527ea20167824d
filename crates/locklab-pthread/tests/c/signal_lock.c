/* Two things real programs do with a blocked pthread_mutex_lock that POSIX does not promise and
 * glibc survives: (1) a signal handler that takes the very mutex its thread is blocked on (the
 * handler's lock must not queue behind the thread's own interrupted wait); (2) siglongjmp out of a
 * blocked lock, the old SIGALRM time-out idiom (the abandoned wait must leave nothing behind: the
 * holder's later unlock and later lockers must work). Run with the default mutex choice. */
#include "check.h"
#include <setjmp.h>
#include <signal.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static volatile sig_atomic_t handled;
static sigjmp_buf jb;
static pthread_t victim;
static volatile int blocked;

static void take_in_handler(int sig) {
  (void)sig;
  pthread_mutex_lock(&m); /* the lock its thread is blocked on */
  handled++;
  pthread_mutex_unlock(&m);
}

static void *blocked_locker(void *arg) {
  (void)arg;
  blocked = 1;
  pthread_mutex_lock(&m);
  pthread_mutex_unlock(&m);
  return NULL;
}

static void jump_out(int sig) {
  (void)sig;
  siglongjmp(jb, 1);
}

static void *timed_out_locker(void *arg) {
  (void)arg;
  if (sigsetjmp(jb, 1) == 0) {
    blocked = 1;
    pthread_mutex_lock(&m); /* abandoned by the signal below */
    pthread_mutex_unlock(&m);
    return (void *)0;
  }
  return (void *)1; /* jumped out of the blocked lock */
}

static void *plain_locker(void *arg) {
  (void)arg;
  pthread_mutex_lock(&m);
  pthread_mutex_unlock(&m);
  return NULL;
}

int main(void) {
  check_preload();
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = take_in_handler;
  sigaction(SIGUSR1, &sa, NULL);
  /* (1), several rounds: the thread blocks (it spins first, then sleeps), the handler runs inside. */
  for (int round = 0; round < 10; round++) {
    blocked = 0;
    pthread_mutex_lock(&m);
    pthread_create(&victim, NULL, blocked_locker, NULL);
    while (!blocked) usleep(1000);
    usleep(20000);
    pthread_kill(victim, SIGUSR1);
    usleep(20000);
    pthread_mutex_unlock(&m);
    pthread_join(victim, NULL);
  }
  EQ(handled, 10);
  /* (2) */
  sa.sa_handler = jump_out;
  sigaction(SIGUSR2, &sa, NULL);
  int jumped = 0;
  for (int round = 0; round < 10; round++) {
    blocked = 0;
    pthread_mutex_lock(&m);
    pthread_t t, u;
    pthread_create(&t, NULL, timed_out_locker, NULL);
    while (!blocked) usleep(1000);
    usleep(20000);
    pthread_create(&u, NULL, plain_locker, NULL); /* a waiter behind the abandoned one */
    usleep(20000);
    pthread_kill(t, SIGUSR2);
    void *r;
    pthread_join(t, &r);
    jumped += r == (void *)1;
    pthread_mutex_unlock(&m); /* the holder's unlock */
    pthread_join(u, NULL);    /* the other waiter gets the lock */
    EQ(pthread_mutex_trylock(&m), 0);
    pthread_mutex_unlock(&m);
  }
  EQ(jumped, 10);
  printf("signal_lock: %d handler locks, %d jumps out of a blocked lock\n", (int)handled, jumped);
  return finish("signal_lock");
}
