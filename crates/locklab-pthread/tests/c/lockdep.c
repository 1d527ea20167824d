/* Programs that could deadlock but do not in this run (the threads never overlap), and programs
 * whose lock orders are fine: run under LOCKLAB_LOCKDEP=1, the first kind must be reported and the
 * second must not. argv[1] picks the scenario; every scenario exits 0 when it ran as written. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <time.h>
#include <errno.h>
#include <unistd.h>

static pthread_mutex_t A = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t B = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t C = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t R = PTHREAD_RWLOCK_INITIALIZER;

static void run(void *(*f)(void *), void *arg) {
    pthread_t t;
    if (pthread_create(&t, NULL, f, arg) != 0) exit(2);
    pthread_join(t, NULL);
}

static void *lock_a_b(void *x) { (void)x; pthread_mutex_lock(&A); pthread_mutex_lock(&B); pthread_mutex_unlock(&B); pthread_mutex_unlock(&A); return NULL; }
static void *lock_b_a(void *x) { (void)x; pthread_mutex_lock(&B); pthread_mutex_lock(&A); pthread_mutex_unlock(&A); pthread_mutex_unlock(&B); return NULL; }
static void *lock_b_c(void *x) { (void)x; pthread_mutex_lock(&B); pthread_mutex_lock(&C); pthread_mutex_unlock(&C); pthread_mutex_unlock(&B); return NULL; }
static void *lock_c_a(void *x) { (void)x; pthread_mutex_lock(&C); pthread_mutex_lock(&A); pthread_mutex_unlock(&A); pthread_mutex_unlock(&C); return NULL; }
static void *lock_b_trya(void *x) {
    (void)x;
    pthread_mutex_lock(&B);
    if (pthread_mutex_trylock(&A) == 0) pthread_mutex_unlock(&A);
    pthread_mutex_unlock(&B);
    return NULL;
}
static void *lock_b(void *x) { (void)x; pthread_mutex_lock(&B); pthread_mutex_unlock(&B); return NULL; }

static pthread_mutex_t forks[5];
static void *philosopher(void *x) {
    long i = (long)x;
    pthread_mutex_t *l = &forks[i], *r = &forks[(i + 1) % 5];
    if (getenv("ORDERED") && i == 4) { pthread_mutex_t *t = l; l = r; r = t; }
    pthread_mutex_lock(l);
    pthread_mutex_lock(r);
    pthread_mutex_unlock(r);
    pthread_mutex_unlock(l);
    return NULL;
}

static void *read_then_a(void *x) { (void)x; pthread_rwlock_rdlock(&R); pthread_mutex_lock(&A); pthread_mutex_unlock(&A); pthread_rwlock_unlock(&R); return NULL; }
static void *a_then_write(void *x) { (void)x; pthread_mutex_lock(&A); pthread_rwlock_wrlock(&R); pthread_rwlock_unlock(&R); pthread_mutex_unlock(&A); return NULL; }
static void *a_then_read(void *x) { (void)x; pthread_mutex_lock(&A); pthread_rwlock_rdlock(&R); pthread_rwlock_unlock(&R); pthread_mutex_unlock(&A); return NULL; }

static pthread_rwlock_t W;
static void *read_twice(void *x) { (void)x; pthread_rwlock_rdlock(&W); pthread_rwlock_rdlock(&W); pthread_rwlock_unlock(&W); pthread_rwlock_unlock(&W); return NULL; }
static void *write_once(void *x) { (void)x; pthread_rwlock_wrlock(&W); pthread_rwlock_unlock(&W); return NULL; }

static void on_usr1(int sig) { (void)sig; pthread_mutex_lock(&C); pthread_mutex_unlock(&C); }

static void *exit_holding(void *x) { (void)x; pthread_mutex_lock(&C); return NULL; }
static void *post(void *x) { (void)x; usleep(20000); pthread_mutex_unlock(&A); return NULL; }

int main(int argc, char **argv) {
    const char *s = argc > 1 ? argv[1] : "";
    if (!strcmp(s, "abba")) {
        run(lock_a_b, NULL);
        run(lock_b_a, NULL);
    } else if (!strcmp(s, "cycle3")) {
        run(lock_a_b, NULL);
        run(lock_b_c, NULL);
        run(lock_c_a, NULL);
    } else if (!strcmp(s, "consistent")) {
        for (int i = 0; i < 3; i++) { run(lock_a_b, NULL); run(lock_b_c, NULL); run(lock_b, NULL); }
    } else if (!strcmp(s, "trylock")) {
        run(lock_a_b, NULL);
        run(lock_b_trya, NULL);
    } else if (!strcmp(s, "philosophers")) {
        for (int i = 0; i < 5; i++) pthread_mutex_init(&forks[i], NULL);
        for (long i = 0; i < 5; i++) run(philosopher, (void *)i);
    } else if (!strcmp(s, "instances")) {
        /* Many mutexes of one class (one init site), one at a time and nested in a fixed order. */
        enum { N = 200 };
        pthread_mutex_t *m = calloc(N, sizeof *m);
        for (int i = 0; i < N; i++) pthread_mutex_init(&m[i], NULL);
        for (int r = 0; r < 3; r++)
            for (int i = 0; i < N; i++) { pthread_mutex_lock(&m[i]); pthread_mutex_unlock(&m[i]); }
        for (int i = 0; i + 2 < N; i += 3) {
            pthread_mutex_lock(&m[i]); pthread_mutex_lock(&m[i + 1]); pthread_mutex_lock(&m[i + 2]);
            pthread_mutex_unlock(&m[i + 2]); pthread_mutex_unlock(&m[i + 1]); pthread_mutex_unlock(&m[i]);
        }
        for (int i = 0; i < N; i++) pthread_mutex_destroy(&m[i]);
        free(m);
    } else if (!strcmp(s, "rw_abba")) {
        run(read_then_a, NULL);
        run(a_then_write, NULL);
    } else if (!strcmp(s, "rw_readers")) {
        /* Readers of a reader-preferring rwlock never wait for each other: no deadlock. */
        run(read_then_a, NULL);
        run(a_then_read, NULL);
    } else if (!strcmp(s, "recursive_read")) {
        pthread_rwlockattr_t at;
        pthread_rwlockattr_init(&at);
        pthread_rwlockattr_setkind_np(&at, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        pthread_rwlock_init(&W, &at);
        run(read_twice, NULL);
        run(write_once, NULL);
    } else if (!strcmp(s, "recursive_read_ok")) {
        pthread_rwlock_init(&W, NULL); /* reader-preferring: recursive reads are fine */
        run(read_twice, NULL);
        run(write_once, NULL);
    } else if (!strcmp(s, "signal")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_usr1;
        sigaction(SIGUSR1, &sa, NULL);
        raise(SIGUSR1);
        pthread_mutex_lock(&C);
        pthread_mutex_unlock(&C);
        struct sigaction back;
        sigaction(SIGUSR1, NULL, &back);
        if (back.sa_handler != on_usr1) { puts("sigaction did not return the program's handler"); return 1; }
    } else if (!strcmp(s, "signal_blocked")) {
        /* Held only with the signal blocked: safe. */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_usr1;
        sigaction(SIGUSR1, &sa, NULL);
        raise(SIGUSR1);
        sigset_t set, old;
        sigemptyset(&set);
        sigaddset(&set, SIGUSR1);
        pthread_sigmask(SIG_BLOCK, &set, &old);
        pthread_mutex_lock(&C);
        pthread_mutex_unlock(&C);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    } else if (!strcmp(s, "cond_holding")) {
        pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 1000000;
        if (t.tv_nsec >= 1000000000) { t.tv_sec++; t.tv_nsec -= 1000000000; }
        pthread_mutex_lock(&A);
        pthread_mutex_lock(&B);
        int r = pthread_cond_timedwait(&cv, &B, &t);
        pthread_mutex_unlock(&B);
        pthread_mutex_unlock(&A);
        if (r != ETIMEDOUT) return 1;
    } else if (!strcmp(s, "misuse")) {
        pthread_mutexattr_t at;
        pthread_mutexattr_init(&at);
        pthread_mutexattr_settype(&at, PTHREAD_MUTEX_ERRORCHECK);
        pthread_mutex_t e;
        pthread_mutex_init(&e, &at);
        if (pthread_mutex_unlock(&e) != EPERM) return 1;          /* unlock, not held */
        pthread_mutex_lock(&e);
        if (pthread_mutex_lock(&e) != EDEADLK) return 1;          /* relock: an error, not reported */
        if (pthread_mutex_destroy(&e) != EBUSY) return 1;          /* destroy, held */
        pthread_mutex_unlock(&e);
        pthread_mutex_destroy(&e);
        run(exit_holding, NULL);                                    /* exit, holding C */
    } else if (!strcmp(s, "semaphore")) {
        /* A normal mutex as a binary semaphore (glibc lets another thread unlock it): the holder
         * takes it again and waits for the other thread's unlock. */
        pthread_t t;
        pthread_mutex_lock(&A);
        pthread_create(&t, NULL, post, NULL);
        pthread_mutex_lock(&A);
        pthread_join(t, NULL);
        pthread_mutex_unlock(&A);
        pthread_mutex_lock(&A);
        pthread_mutex_lock(&B);
        pthread_mutex_unlock(&B);
        pthread_mutex_unlock(&A);
    } else if (!strcmp(s, "c11")) {
        mtx_t x, y;
        mtx_init(&x, mtx_plain);
        mtx_init(&y, mtx_plain);
        mtx_lock(&x); mtx_lock(&y); mtx_unlock(&y); mtx_unlock(&x);
        mtx_lock(&y); mtx_lock(&x); mtx_unlock(&x); mtx_unlock(&y);
        mtx_destroy(&x);
        mtx_destroy(&y);
    } else if (!strcmp(s, "spin")) {
        pthread_spinlock_t p;
        pthread_spin_init(&p, 0);
        pthread_spin_lock(&p); pthread_mutex_lock(&A); pthread_mutex_unlock(&A); pthread_spin_unlock(&p);
        pthread_mutex_lock(&A); pthread_spin_lock(&p); pthread_spin_unlock(&p); pthread_mutex_unlock(&A);
        pthread_spin_destroy(&p);
    } else {
        fprintf(stderr, "unknown scenario %s\n", s);
        return 2;
    }
    return 0;
}
