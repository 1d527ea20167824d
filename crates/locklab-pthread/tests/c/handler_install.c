/* Installing signal handlers, as glibc keeps it, under a library that runs every handler behind a
 * wrapper of its own:
 *
 * 1. flip: a POSIX timer sends SIGALRM every 20 us while the program switches SIGALRM between A
 *    (plain, SIGUSR2 in its mask) and B (SA_SIGINFO, empty mask). The kernel installs an action's
 *    handler, flags and mask in one step: A always runs with SIGUSR2 blocked, B always with it
 *    unblocked and with the timer's siginfo.
 * 2. chain: two threads each replace SIGUSR1's action many times, asking for the old one: each call
 *    replaces exactly one action, so every installation but the last is reported old exactly once.
 * 3. raw copy: an action installed with sigaction() and copied to another signal with the raw
 *    rt_sigaction system call still runs its handler there.
 * 5. refused: installations glibc or the kernel refuses (SIGKILL, SIGSTOP, glibc's own 32 and 33,
 *    numbers out of range) answer EINVAL and change nothing; under the library, 300 refused ones
 *    with distinct handlers leave its wrappers for the handlers installed after them (a raw query
 *    shows a wrapper's address, not the program's handler).
 * 4. tls: a handler that only counts, run while the thread is inside malloc, after the program
 *    loaded libraries with thread-local variables (argv[1]: such a library, copied 16 times per
 *    round): it must run, and return (a handler must not allocate: it would deadlock on malloc's
 *    lock the interrupted call holds).
 *
 * Prints "handler_install: N failure(s)". */
#include "check.h"
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>

/* 1. flip */
static atomic_long a_ok, a_bad, b_ok, b_bad;

static int usr2_blocked(void) {
  sigset_t cur;
  pthread_sigmask(SIG_BLOCK, NULL, &cur);
  return sigismember(&cur, SIGUSR2);
}

static void on_a(int sig) {
  (void)sig;
  if (usr2_blocked())
    a_ok++;
  else
    a_bad++;
}

static void on_b(int sig, siginfo_t *info, void *ctx) {
  (void)sig;
  if (ctx && info && info->si_code == SI_TIMER && info->si_value.sival_int == 777 && !usr2_blocked())
    b_ok++;
  else
    b_bad++;
}

static void flip(void) {
  struct sigaction a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  a.sa_handler = on_a;
  sigemptyset(&a.sa_mask);
  sigaddset(&a.sa_mask, SIGUSR2);
  a.sa_flags = SA_RESTART;
  b.sa_sigaction = on_b;
  sigemptyset(&b.sa_mask);
  b.sa_flags = SA_SIGINFO | SA_RESTART;
  EQ(sigaction(SIGALRM, &a, NULL), 0);
  timer_t t;
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_SIGNAL;
  ev.sigev_signo = SIGALRM;
  ev.sigev_value.sival_int = 777;
  EQ(timer_create(CLOCK_MONOTONIC, &ev, &t), 0);
  struct itimerspec its = {{0, 20000}, {0, 20000}};
  EQ(timer_settime(t, 0, &its, NULL), 0);
  double end = now_s() + 0.5;
  for (long i = 0; now_s() < end; i++)
    sigaction(SIGALRM, i & 1 ? &a : &b, NULL);
  timer_delete(t);
  signal(SIGALRM, SIG_IGN);
  printf("flip: A %ld (wrong mask %ld), B %ld (wrong mask or siginfo %ld)\n", (long)a_ok, (long)a_bad,
         (long)b_ok, (long)b_bad);
  EQ(a_bad, 0);
  EQ(b_bad, 0);
  CHECK(a_ok > 0 && b_ok > 0, "both handlers ran");
}

/* 2. chain */
#define ROUNDS 50000
static void on_c0(int sig) { (void)sig; }
static void on_c1(int sig) { (void)sig; }
static atomic_int go;

static void *installer(void *arg) {
  long me = (long)arg;
  struct sigaction mine, old;
  memset(&mine, 0, sizeof mine);
  mine.sa_handler = me ? on_c1 : on_c0;
  long seen[3] = {0, 0, 0}; /* old: c0, c1, default */
  while (!go)
    ;
  for (int i = 0; i < ROUNDS; i++) {
    if (sigaction(SIGUSR1, &mine, &old) != 0)
      return (void *)-1L;
    if (old.sa_handler == on_c0)
      seen[0]++;
    else if (old.sa_handler == on_c1)
      seen[1]++;
    else if (old.sa_handler == SIG_DFL)
      seen[2]++;
    else
      return (void *)-2L;
  }
  return (void *)(seen[0] | seen[1] << 20 | seen[2] << 40);
}

static void chain(void) {
  signal(SIGUSR1, SIG_DFL);
  pthread_t t[2];
  for (long i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, installer, (void *)i);
  go = 1;
  long seen[3] = {0, 0, 0};
  for (int i = 0; i < 2; i++) {
    void *r;
    pthread_join(t[i], &r);
    long v = (long)r;
    CHECK(v >= 0, "installer %d failed (%ld)", i, v);
    if (v < 0)
      return;
    seen[0] += v & 0xfffff;
    seen[1] += v >> 20 & 0xfffff;
    seen[2] += v >> 40;
  }
  struct sigaction last;
  EQ(sigaction(SIGUSR1, NULL, &last), 0);
  int final1 = last.sa_handler == on_c1;
  CHECK(last.sa_handler == on_c0 || final1, "the final action is one of the two");
  printf("chain: old c0 %ld, c1 %ld, default %ld\n", seen[0], seen[1], seen[2]);
  EQ(seen[0], ROUNDS - !final1);
  EQ(seen[1], ROUNDS - final1);
  EQ(seen[2], 1);
  signal(SIGUSR1, SIG_DFL);
}

/* 3. raw copy: the kernel's struct for rt_sigaction on x86-64 and aarch64 */
struct kaction {
  void *handler;
  unsigned long flags;
  void *restorer;
  unsigned long mask;
};
static atomic_int copied_ran;
static void on_copied(int sig) {
  if (sig == SIGUSR2)
    copied_ran++;
}

/* Installs h for SIGUSR1 with sigaction(), then reads the kernel's action with the raw call. */
static struct kaction install_and_read_raw(void (*h)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = h;
  EQ(sigaction(SIGUSR1, &sa, NULL), 0);
  struct kaction k;
  memset(&k, 0, sizeof k);
  EQ(syscall(SYS_rt_sigaction, SIGUSR1, NULL, &k, 8), 0);
  return k;
}

static void raw_copy(void) {
  struct kaction k = install_and_read_raw(on_copied);
  EQ(syscall(SYS_rt_sigaction, SIGUSR2, &k, NULL, 8), 0);
  raise(SIGUSR2);
  EQ(copied_ran, 1);
  struct sigaction q;
  EQ(sigaction(SIGUSR2, NULL, &q), 0);
  CHECK(q.sa_handler == on_copied, "the copy reads back as the program's handler");
  signal(SIGUSR1, SIG_DFL);
  signal(SIGUSR2, SIG_DFL);
}

/* 5. refused */
static void on_later(int sig) { (void)sig; }

static void refused(void) {
  int bad[] = {SIGKILL, SIGSTOP, 32, 33, 0, -1, 65};
  for (int i = 0; i < 300; i++) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    /* Distinct addresses, never called: every installation is refused. */
    sa.sa_handler = (void (*)(int))((char *)on_later + 1 + i);
    int sig = bad[i % 7];
    errno = 0;
    EQ(sigaction(sig, &sa, NULL), -1);
    EQ(errno, EINVAL);
  }
  struct kaction k = install_and_read_raw(on_later);
  const char *pre = getenv("LOCKLAB_EXPECT_PRELOAD");
  if (pre && *pre == '1')
    CHECK(k.handler != (void *)on_later, "the library's wrapper is installed after refused installations");
  else
    CHECK(k.handler == (void *)on_later, "glibc installs the handler itself");
  signal(SIGUSR1, SIG_DFL);
}

/* 4. tls */
static atomic_int handled;
static atomic_int stop_alloc;
static pid_t main_tid;
static void on_count(int sig) {
  (void)sig;
  handled++;
}

static void copy_file(const char *from, const char *to) {
  int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0700);
  char buf[65536];
  ssize_t n;
  while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
    if (write(out, buf, n) != n)
      break;
  close(in);
  close(out);
}

static const char *tls_lib;
static void *loader(void *arg) {
  (void)arg;
  char dir[] = "/tmp/handler_install.XXXXXX";
  if (!mkdtemp(dir)) {
    stop_alloc = 1;
    return (void *)1L;
  }
  long lost = 0;
  for (int round = 0; round < 8 && !lost; round++) {
    for (int i = 0; i < 16; i++) {
      char path[128];
      snprintf(path, sizeof path, "%s/tls%d_%d.so", dir, round, i);
      copy_file(tls_lib, path);
      void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      unlink(path);
      if (!h) {
        printf("dlopen: %s\n", dlerror());
        lost = 2;
        break;
      }
    }
    int before = handled;
    syscall(SYS_tgkill, getpid(), main_tid, SIGUSR1);
    double end = now_s() + 3;
    while (handled == before && now_s() < end)
      usleep(1000);
    if (handled == before)
      lost = 1;
  }
  rmdir(dir);
  stop_alloc = 1;
  return (void *)lost;
}

static void tls(void) {
  EQ(signal(SIGUSR1, on_count) != SIG_ERR, 1);
  main_tid = gettid();
  pthread_t t;
  pthread_create(&t, NULL, loader, NULL);
  unsigned long sum = 0;
  while (!stop_alloc) {
    for (int i = 0; i < 64; i++) {
      char *p = malloc(2048 + (i * 977) % 30000);
      if (p) {
        p[0] = (char)i;
        sum += (unsigned char)p[0];
      }
      free(p);
    }
  }
  void *r;
  pthread_join(t, &r);
  printf("tls: handler ran %d times (%lu)\n", (int)handled, sum & 1);
  EQ((long)r, 0);
  signal(SIGUSR1, SIG_DFL);
}

int main(int argc, char **argv) {
  check_preload();
  flip();
  chain();
  raw_copy();
  refused();
  if (argc > 1) {
    tls_lib = argv[1];
    tls();
  }
  return finish("handler_install");
}
