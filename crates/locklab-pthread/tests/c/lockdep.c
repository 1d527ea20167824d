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
#include <dlfcn.h>
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

/* Objects never passed to an init function (zeroed memory, static initializers), of one kind,
 * nested in a consistent order: accounts locked two at a time in address order. */
struct account { pthread_mutex_t m; long balance; };
static void transfer(struct account *a, struct account *b, long amount) {
    struct account *lo = a < b ? a : b, *hi = a < b ? b : a;
    pthread_mutex_lock(&lo->m);
    pthread_mutex_lock(&hi->m);
    a->balance -= amount;
    b->balance += amount;
    pthread_mutex_unlock(&hi->m);
    pthread_mutex_unlock(&lo->m);
}
/* The same helper without the address order: what a real inversion looks like. */
static void transfer_unordered(struct account *a, struct account *b) {
    pthread_mutex_lock(&a->m);
    pthread_mutex_lock(&b->m);
    pthread_mutex_unlock(&b->m);
    pthread_mutex_unlock(&a->m);
}

enum { NBUCKETS = 16 };
static pthread_mutex_t buckets[NBUCKETS] = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER};
static long bucket_count[NBUCKETS];
__attribute__((noinline)) static void insert(int i) {
    pthread_mutex_lock(&buckets[i]); bucket_count[i]++; pthread_mutex_unlock(&buckets[i]);
}
__attribute__((noinline)) static long lookup(int i) {
    pthread_mutex_lock(&buckets[i]); long n = bucket_count[i]; pthread_mutex_unlock(&buckets[i]);
    return n;
}
/* Moves an entry between two buckets, the lower index locked first. */
__attribute__((noinline)) static void move_entry(int from, int to) {
    int lo = from < to ? from : to, hi = from < to ? to : from;
    pthread_mutex_lock(&buckets[lo]);
    pthread_mutex_lock(&buckets[hi]);
    bucket_count[from]--; bucket_count[to]++;
    pthread_mutex_unlock(&buckets[hi]);
    pthread_mutex_unlock(&buckets[lo]);
}

/* A list walked with lock coupling (hand over hand), zeroed nodes never initialised. */
struct node { pthread_mutex_t m; struct node *next; int v; };
static int walk(struct node *head) {
    int sum = 0;
    pthread_mutex_lock(&head->m);
    for (struct node *n = head; n; ) {
        sum += n->v;
        struct node *next = n->next;
        if (next) pthread_mutex_lock(&next->m);
        pthread_mutex_unlock(&n->m);
        n = next;
    }
    return sum;
}

__attribute__((noinline)) static void touch(struct node *n) {
    pthread_mutex_lock(&n->m); n->v++; pthread_mutex_unlock(&n->m);
}

static pthread_mutex_t G1 = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t G2 = PTHREAD_MUTEX_INITIALIZER;
/* One helper that takes its two arguments in the order given. */
__attribute__((noinline)) static void lock_pair(pthread_mutex_t *x, pthread_mutex_t *y) {
    pthread_mutex_lock(x); pthread_mutex_lock(y); pthread_mutex_unlock(y); pthread_mutex_unlock(x);
}
static void *pair_g1_g2(void *x) { (void)x; lock_pair(&G1, &G2); return NULL; }
static void *pair_g2_g1(void *x) { (void)x; lock_pair(&G2, &G1); return NULL; }

/* A cycle through three kinds of class: a zeroed account's lock, a lock made by pthread_mutex_init,
 * a static one; each order taken by its own thread and function. */
static struct account *attack_acc;
static pthread_mutex_t attack_init;
static pthread_mutex_t attack_static = PTHREAD_MUTEX_INITIALIZER;
static void *acc_then_init(void *x) { (void)x; lock_pair(&attack_acc->m, &attack_init); return NULL; }
static void *init_then_static(void *x) { (void)x; lock_pair(&attack_init, &attack_static); return NULL; }
static void *static_then_acc(void *x) { (void)x; lock_pair(&attack_static, &attack_acc->m); return NULL; }

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
    } else if (!strcmp(s, "zeroed_accounts")) {
        /* calloc'd accounts (an all-zero mutex is PTHREAD_MUTEX_INITIALIZER), two at a time in
         * address order: consistent, whichever lock touched each account first. */
        enum { N = 64 };
        struct account *acc = calloc(N, sizeof *acc);
        transfer(&acc[0], &acc[1], 1);
        transfer(&acc[2], &acc[3], 1);
        transfer(&acc[1], &acc[2], 1);
        srand(7);
        for (int i = 0; i < 2000; i++) {
            int x = rand() % N, y = rand() % N;
            if (x != y) transfer(&acc[x], &acc[y], 1);
        }
        long sum = 0;
        for (int i = 0; i < N; i++) sum += acc[i].balance;
        free(acc);
        if (sum != 0) return 1;
    } else if (!strcmp(s, "zeroed_accounts_abba")) {
        /* The same accounts without the address order: 1 then 2, later 2 then 1. */
        struct account *acc = calloc(4, sizeof *acc);
        transfer_unordered(&acc[0], &acc[1]);
        transfer_unordered(&acc[1], &acc[2]);
        transfer_unordered(&acc[2], &acc[1]);
        free(acc);
    } else if (!strcmp(s, "static_buckets")) {
        /* Buckets first touched by insert, by lookup or by a move, then moved in index order. */
        for (int i = 0; i < NBUCKETS; i += 2) insert(i);
        for (int i = 1; i < NBUCKETS; i += 2) if (lookup(i) != 0) return 1;
        for (int i = 0; i + 1 < NBUCKETS; i++) insert(i), move_entry(i, i + 1), move_entry(i + 1, i);
        for (int i = NBUCKETS - 1; i > 0; i--) move_entry(i, i - 3 >= 0 ? i - 3 : 0);
    } else if (!strcmp(s, "zeroed_coupling")) {
        /* Lock coupling down a list of zeroed nodes, some first locked alone by another function. */
        enum { N = 8 };
        struct node *nodes = calloc(N, sizeof *nodes);
        for (int i = 0; i < N; i++) { nodes[i].v = i; nodes[i].next = i + 1 < N ? &nodes[i + 1] : NULL; }
        for (int i = 1; i < N; i += 2) touch(&nodes[i]);
        for (int r = 0; r < 3; r++) if (walk(&nodes[0]) != N * (N - 1) / 2 + N / 2) return 1;
        free(nodes);
    } else if (!strcmp(s, "static_abba_helper")) {
        /* Two never-initialised globals taken in both orders through one helper: a real AB-BA
         * whose four acquisitions share two sites. */
        run(pair_g1_g2, NULL);
        run(pair_g2_g1, NULL);
    } else if (!strcmp(s, "mixed_cycle")) {
        attack_acc = calloc(2, sizeof *attack_acc);
        pthread_mutex_init(&attack_init, NULL);
        run(acc_then_init, NULL);
        run(init_then_static, NULL);
        run(static_then_acc, NULL);
        free(attack_acc);
    } else if (!strcmp(s, "plugin_reload")) {
        /* argv[2] takes its static lock before A, then is closed; argv[3], loaded at the same
         * addresses, takes A before its own: each in one order only. */
        void *first = NULL;
        for (int i = 0; i < 2; i++) {
            void *h = dlopen(argv[2 + i], RTLD_NOW);
            if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
            void *(*lock_of)(void) = (void *(*)(void))dlsym(h, "plug_lock");
            void (*go)(pthread_mutex_t *) = (void (*)(pthread_mutex_t *))dlsym(h, "plug_run");
            if (!lock_of || !go) return 2;
            if (i == 0) first = lock_of();
            else if (lock_of() != first) { fprintf(stderr, "the second plugin is elsewhere\n"); return 3; }
            go(&A);
            dlclose(h);
        }
    } else if (!strcmp(s, "transfers")) {
        /* The cost of the consistent pattern: argv[2] accounts made at one init site (argv[3]
         * "zeroed": never initialised), argv[4] transfers in address order. */
        int n = argc > 2 ? atoi(argv[2]) : 200;
        int zeroed = argc > 3 && !strcmp(argv[3], "zeroed");
        long t = argc > 4 ? atol(argv[4]) : 20000;
        struct account *acc = calloc(n, sizeof *acc);
        if (!zeroed) for (int i = 0; i < n; i++) pthread_mutex_init(&acc[i].m, NULL);
        srand(11);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long i = 0; i < t; i++) {
            int x = rand() % n, y = rand() % n;
            if (x != y) transfer(&acc[x], &acc[y], 1);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double us = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / t;
        fprintf(stderr, "transfers: %d accounts, %ld transfers, %.3f us a transfer\n", n, t, us);
        free(acc);
    } else {
        fprintf(stderr, "unknown scenario %s\n", s);
        return 2;
    }
    return 0;
}
