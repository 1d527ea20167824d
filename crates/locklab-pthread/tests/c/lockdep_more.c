/* Lockdep must keep a program's behaviour and judge it right: robust-mutex recovery (EOWNERDEAD
 * means the caller holds the mutex), double unlocks, recursive reads of a writer-preferring rwlock
 * without a writer in this run, and the documented semantics of signal(), siginterrupt(),
 * sigaction() flags and a handler on a small alternate stack. argv[1] picks the scenario; each
 * exits 0 when it behaved as glibc documents. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)

static pthread_mutex_t *shared_robust(int type) {
    pthread_mutex_t *m = mmap(NULL, sizeof *m, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    pthread_mutexattr_t at;
    pthread_mutexattr_init(&at);
    pthread_mutexattr_settype(&at, type);
    pthread_mutexattr_setpshared(&at, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&at, PTHREAD_MUTEX_ROBUST);
    CHECK(pthread_mutex_init(m, &at) == 0);
    return m;
}

/* A child process takes the mutex and dies holding it. */
static void owner_dies(pthread_mutex_t *m) {
    pid_t p = fork();
    CHECK(p >= 0);
    if (p == 0) { pthread_mutex_lock(m); _exit(0); }
    int st;
    CHECK(waitpid(p, &st, 0) == p);
}

static pthread_mutex_t *unrecoverable;
static void *lock_unrecoverable(void *x) {
    (void)x;
    CHECK(pthread_mutex_lock(unrecoverable) == ENOTRECOVERABLE);
    return NULL; /* not a holder: exits holding nothing */
}

static void robust(void) {
    int types[] = {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ERRORCHECK};
    for (int k = 0; k < 2; k++) {
        pthread_mutex_t *m = shared_robust(types[k]);
        for (int how = 0; how < 3; how++) {
            owner_dies(m);
            int r;
            if (how == 0) r = pthread_mutex_lock(m);
            else if (how == 1) r = pthread_mutex_trylock(m);
            else {
                struct timespec t;
                clock_gettime(CLOCK_REALTIME, &t);
                t.tv_sec += 5;
                r = pthread_mutex_timedlock(m, &t);
            }
            CHECK(r == EOWNERDEAD);
            CHECK(pthread_mutex_consistent(m) == 0);
            CHECK(pthread_mutex_unlock(m) == 0);
            /* Usable again. */
            CHECK(pthread_mutex_lock(m) == 0);
            CHECK(pthread_mutex_unlock(m) == 0);
        }
        /* Not made consistent: unrecoverable, and a later lock does not take it. */
        owner_dies(m);
        CHECK(pthread_mutex_lock(m) == EOWNERDEAD);
        CHECK(pthread_mutex_unlock(m) == 0);
        unrecoverable = m;
        pthread_t t;
        CHECK(pthread_create(&t, NULL, lock_unrecoverable, NULL) == 0);
        pthread_join(t, NULL);
    }
}

static pthread_mutex_t D = PTHREAD_MUTEX_INITIALIZER;

static pthread_mutex_t S = PTHREAD_MUTEX_INITIALIZER;
static void *post(void *x) { (void)x; usleep(20000); CHECK(pthread_mutex_unlock(&S) == 0); return NULL; }

static pthread_rwlock_t W;

static volatile sig_atomic_t hits;
static void on_alarm(int sig) { (void)sig; hits++; }

/* A read that an alarm interrupts: EINTR once siginterrupt() asked for it (glibc's signal() keeps
 * that choice), restarted (no EINTR) by default. */
static int read_interrupted(void) {
    int p[2];
    CHECK(pipe(p) == 0);
    char c;
    alarm(1);
    ssize_t n = read(p[0], &c, 1);
    int e = errno;
    alarm(0);
    close(p[0]);
    close(p[1]);
    return n < 0 && e == EINTR;
}

static void *writer_later(void *x) { (void)x; sleep(2); return NULL; }

static void siginterrupt_scenario(void) {
    CHECK(signal(SIGALRM, on_alarm) != SIG_ERR);
    CHECK(siginterrupt(SIGALRM, 1) == 0);
    CHECK(read_interrupted());
    /* signal() again after siginterrupt(): glibc keeps the interrupt choice. */
    CHECK(signal(SIGALRM, on_alarm) == on_alarm);
    CHECK(read_interrupted());
    struct sigaction q;
    CHECK(sigaction(SIGALRM, NULL, &q) == 0);
    CHECK(q.sa_handler == on_alarm && !(q.sa_flags & SA_RESTART));
    /* Back to restarting: the read would wait for ever, so a pipe with a writer after 2 s. */
    CHECK(siginterrupt(SIGALRM, 0) == 0);
    CHECK(sigaction(SIGALRM, NULL, &q) == 0);
    CHECK(q.sa_handler == on_alarm && (q.sa_flags & SA_RESTART));
    CHECK(hits == 2);
}

static volatile sig_atomic_t nodefer_ok, mask_ok, info_ok, reset_calls;
static void on_usr1_nodefer(int sig) {
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    nodefer_ok = !sigismember(&cur, sig) && sigismember(&cur, SIGUSR2);
}
static void on_usr1_masked(int sig) {
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    mask_ok = sigismember(&cur, sig) && sigismember(&cur, SIGUSR2);
}
static void on_info(int sig, siginfo_t *si, void *ctx) {
    info_ok = ctx != NULL && si->si_signo == sig && si->si_code == SI_QUEUE && si->si_value.sival_int == 42;
}
static void on_reset(int sig) { (void)sig; reset_calls++; }

static void semantics(void) {
    struct sigaction sa, q;
    /* SA_NODEFER: the signal itself not blocked in its handler; sa_mask's signals are. */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1_nodefer;
    sa.sa_flags = SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR2);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    raise(SIGUSR1);
    CHECK(nodefer_ok);
    CHECK(sigaction(SIGUSR1, NULL, &q) == 0);
    CHECK(q.sa_handler == on_usr1_nodefer && (q.sa_flags & SA_NODEFER) && !(q.sa_flags & SA_SIGINFO));
    CHECK(sigismember(&q.sa_mask, SIGUSR2));
    /* Without it: blocked. */
    sa.sa_handler = on_usr1_masked;
    sa.sa_flags = 0;
    CHECK(sigaction(SIGUSR1, &sa, &q) == 0);
    CHECK(q.sa_handler == on_usr1_nodefer);
    raise(SIGUSR1);
    CHECK(mask_ok);
    /* SA_SIGINFO: the value sent, the context. */
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_info;
    sa.sa_flags = SA_SIGINFO;
    CHECK(sigaction(SIGUSR2, &sa, NULL) == 0);
    CHECK(sigqueue(getpid(), SIGUSR2, (union sigval){.sival_int = 42}) == 0);
    CHECK(info_ok);
    CHECK(sigaction(SIGUSR2, NULL, &q) == 0);
    CHECK(q.sa_sigaction == on_info && (q.sa_flags & SA_SIGINFO));
    /* SA_RESETHAND: one delivery, then the default (queried as SIG_DFL). */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_reset;
    sa.sa_flags = SA_RESETHAND;
    CHECK(sigaction(SIGWINCH, &sa, NULL) == 0);
    raise(SIGWINCH);
    CHECK(reset_calls == 1);
    CHECK(sigaction(SIGWINCH, NULL, &q) == 0);
    CHECK(q.sa_handler == SIG_DFL);
    raise(SIGWINCH); /* default: ignored */
    CHECK(reset_calls == 1);
    /* signal(): BSD semantics, the old handler returned; SIG_IGN and SIG_DFL pass through. */
    CHECK(signal(SIGUSR1, SIG_IGN) == on_usr1_masked);
    raise(SIGUSR1);
    CHECK(signal(SIGUSR1, on_reset) == SIG_IGN);
    CHECK(sigaction(SIGUSR1, NULL, &q) == 0);
    CHECK(q.sa_handler == on_reset && (q.sa_flags & SA_RESTART) && !(q.sa_flags & (SA_RESETHAND | SA_NODEFER | SA_SIGINFO)));
    raise(SIGUSR1);
    CHECK(reset_calls == 2);
    CHECK(signal(SIGUSR1, SIG_DFL) == on_reset);
    /* sysv_signal: one-shot. */
    CHECK(sysv_signal(SIGUSR1, on_reset) == SIG_DFL);
    raise(SIGUSR1);
    CHECK(reset_calls == 3);
    CHECK(sigaction(SIGUSR1, NULL, &q) == 0);
    CHECK(q.sa_handler == SIG_DFL);
    /* sigset: the old disposition back. */
    CHECK(sigset(SIGUSR1, on_reset) == SIG_DFL);
    raise(SIGUSR1);
    CHECK(reset_calls == 4);
    CHECK(sigset(SIGUSR1, SIG_IGN) == on_reset);
}

/* A handler on a 4 KiB alternate stack that takes locks (one nested in another). */
static pthread_mutex_t H1 = PTHREAD_MUTEX_INITIALIZER, H2 = PTHREAD_MUTEX_INITIALIZER;
static volatile sig_atomic_t on_alt;
static void on_usr2_alt(int sig) {
    (void)sig;
    stack_t cur;
    sigaltstack(NULL, &cur);
    on_alt = (cur.ss_flags & SS_ONSTACK) != 0;
    pthread_mutex_lock(&H1);
    pthread_mutex_lock(&H2);
    pthread_mutex_unlock(&H2);
    pthread_mutex_unlock(&H1);
}
static void altstack(void) {
    /* 4 KiB (twice the classic MINSIGSTKSZ) leaves a handler 2 KiB beside a classic 2 KiB frame;
     * a CPU with a bigger frame (AVX-512's is about 3.4 KiB) gets that frame plus the same 2 KiB. */
    long frame = sysconf(_SC_MINSIGSTKSZ);
    size_t size = frame > 2048 ? (size_t)frame + 2048 : 4096;
    /* A guard page right below the stack: an overflow faults instead of writing past it. */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *region = mmap(NULL, page + size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(region != MAP_FAILED);
    CHECK(mprotect(region, page, PROT_NONE) == 0);
    stack_t ss = {.ss_sp = region + page, .ss_size = size, .ss_flags = 0};
    CHECK(sigaltstack(&ss, NULL) == 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr2_alt;
    sa.sa_flags = SA_ONSTACK;
    CHECK(sigaction(SIGUSR2, &sa, NULL) == 0);
    /* H2 then H1 here, H1 then H2 in the handler: the handler's first lock finds a cycle, and
     * both are held with the signal unblocked: the reports are composed on the small stack. */
    pthread_mutex_lock(&H2);
    pthread_mutex_lock(&H1);
    pthread_mutex_unlock(&H1);
    pthread_mutex_unlock(&H2);
    for (int i = 0; i < 3; i++) {
        raise(SIGUSR2);
        CHECK(on_alt);
    }
}

static pthread_mutex_t G = PTHREAD_MUTEX_INITIALIZER;
static void on_usr1_g(int sig) { (void)sig; pthread_mutex_lock(&G); pthread_mutex_unlock(&G); }

static void hold_g(int block) {
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    if (block) pthread_sigmask(SIG_BLOCK, &set, &old);
    pthread_mutex_lock(&G);
    pthread_mutex_unlock(&G);
    if (block) pthread_sigmask(SIG_SETMASK, &old, NULL);
}

int main(int argc, char **argv) {
    const char *s = argc > 1 ? argv[1] : "";
    if (!strcmp(s, "robust")) {
        robust();
    } else if (!strcmp(s, "double_unlock")) {
        CHECK(pthread_mutex_lock(&D) == 0);
        CHECK(pthread_mutex_unlock(&D) == 0);
        CHECK(pthread_mutex_unlock(&D) == 0); /* glibc: a free normal mutex's unlock does nothing */
    } else if (!strcmp(s, "semaphore")) {
        /* A binary semaphore: locked here, unlocked by another thread, many times. */
        for (int i = 0; i < 3; i++) {
            CHECK(pthread_mutex_lock(&S) == 0);
            pthread_t t;
            CHECK(pthread_create(&t, NULL, post, NULL) == 0);
            CHECK(pthread_mutex_lock(&S) == 0); /* waits for the post */
            pthread_join(t, NULL);
            CHECK(pthread_mutex_unlock(&S) == 0);
        }
    } else if (!strcmp(s, "rr_no_writer")) {
        pthread_rwlockattr_t at;
        pthread_rwlockattr_init(&at);
        pthread_rwlockattr_setkind_np(&at, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        pthread_rwlock_init(&W, &at);
        CHECK(pthread_rwlock_rdlock(&W) == 0);
        CHECK(pthread_rwlock_rdlock(&W) == 0);
        pthread_rwlock_unlock(&W);
        pthread_rwlock_unlock(&W);
        (void)writer_later;
    } else if (!strcmp(s, "siginterrupt")) {
        siginterrupt_scenario();
    } else if (!strcmp(s, "semantics")) {
        semantics();
    } else if (!strcmp(s, "altstack")) {
        altstack();
    } else if (!strcmp(s, "sig_later_unblocked")) {
        signal(SIGUSR1, on_usr1_g);
        hold_g(1);
        raise(SIGUSR1);
        hold_g(0); /* held with SIGUSR1 unblocked: its handler could interrupt the holder */
    } else if (!strcmp(s, "sig_unblocked_before_handler")) {
        hold_g(0); /* no handler yet: nothing can interrupt this hold */
        signal(SIGUSR1, on_usr1_g);
        raise(SIGUSR1);
        hold_g(1); /* from now on only with SIGUSR1 blocked */
        hold_g(1);
    } else {
        fprintf(stderr, "unknown scenario %s\n", s);
        return 2;
    }
    return 0;
}
