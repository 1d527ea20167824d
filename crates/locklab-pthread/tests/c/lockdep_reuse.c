/* Lock memory reused without *_destroy (glibc allows it for default mutexes and rwlocks; C++'s
 * std::mutex and std::shared_mutex never call destroy): the dead lock's class and orders must not
 * meet the new lock's. Scenarios (argv[1]):
 *   pool      slots memset on allocation: a slot's lock first guards a connection (taken before the
 *             registry), then, zeroed, a buffer (taken under the registry);
 *   list      hand-over-hand down a malloc'd list, freed and rebuilt in the other order (the
 *             allocator returns the same addresses);
 *   rwpool    the pool with rwlocks (PTHREAD_RWLOCK_INITIALIZER, written by memset);
 *   reused_abba  a slot reused, then a real ABBA between the new lock and the registry (reported). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t registry = PTHREAD_MUTEX_INITIALIZER;

struct slot {
  pthread_mutex_t m;
  pthread_rwlock_t rw;
  long data;
};
static struct slot pool[8];

/* The program's own allocator: a zeroed slot (a real memset call, not inlined). */
static void *(*volatile do_memset)(void *, int, size_t) = memset;
static struct slot *slot_get(int i) {
  do_memset(&pool[i], 0, sizeof pool[i]);
  return &pool[i];
}

static void pool_scenario(int rw, int abba) {
  for (int i = 0; i < 8; i++) {
    struct slot *s = slot_get(i);
    /* a connection: its lock, then the registry */
    if (rw) pthread_rwlock_wrlock(&s->rw); else pthread_mutex_lock(&s->m);
    pthread_mutex_lock(&registry);
    s->data++;
    pthread_mutex_unlock(&registry);
    if (rw) pthread_rwlock_unlock(&s->rw); else pthread_mutex_unlock(&s->m);
  }
  for (int i = 0; i < 8; i++) {
    struct slot *s = slot_get(i); /* reused for a buffer */
    pthread_mutex_lock(&registry);
    if (rw) pthread_rwlock_wrlock(&s->rw); else pthread_mutex_lock(&s->m);
    s->data++;
    if (rw) pthread_rwlock_unlock(&s->rw); else pthread_mutex_unlock(&s->m);
    pthread_mutex_unlock(&registry);
    if (abba && i == 0) {
      /* the same buffer, its lock before the registry: a real inversion in one life */
      pthread_mutex_lock(&s->m);
      pthread_mutex_lock(&registry);
      pthread_mutex_unlock(&registry);
      pthread_mutex_unlock(&s->m);
    }
  }
}

struct node {
  pthread_mutex_t m;
  struct node *next;
};

static void walk(struct node *h) {
  pthread_mutex_lock(&h->m);
  while (h->next) {
    pthread_mutex_lock(&h->next->m);
    pthread_mutex_unlock(&h->m);
    h = h->next;
  }
  pthread_mutex_unlock(&h->m);
}

static struct node *node_new(void) {
  /* malloc, not calloc: glibc's calloc skips the per-thread cache that hands freed blocks back */
  return do_memset(malloc(sizeof(struct node)), 0, sizeof(struct node));
}

static void list_scenario(void) {
  enum { N = 6 };
  struct node *n[N];
  for (int i = 0; i < N; i++) n[i] = node_new();
  for (int i = 0; i + 1 < N; i++) n[i]->next = n[i + 1];
  walk(n[0]);
  void *addr[N];
  for (int i = 0; i < N; i++) {
    addr[i] = n[i];
    free(n[i]);
  }
  /* rebuilt: same sizes, so the allocator hands the blocks back (in its own order) */
  struct node *m[N];
  for (int i = 0; i < N; i++) m[i] = node_new();
  /* link them so that the walk visits the old addresses in the opposite order */
  struct node *by_old[N] = {0};
  int matched = 0;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++)
      if ((void *)m[j] == addr[i]) by_old[i] = m[j], matched++;
  if (matched == N) {
    for (int i = N - 1; i > 0; i--) by_old[i]->next = by_old[i - 1];
    walk(by_old[N - 1]);
  } else {
    for (int i = 0; i + 1 < N; i++) m[i]->next = m[i + 1];
    walk(m[0]);
  }
  printf("list: %d of %d addresses reused\n", matched, N);
  for (int i = 0; i < N; i++) free(m[i]);
}

int main(int argc, char **argv) {
  const char *s = argc > 1 ? argv[1] : "pool";
  if (!strcmp(s, "pool")) pool_scenario(0, 0);
  else if (!strcmp(s, "rwpool")) pool_scenario(1, 0);
  else if (!strcmp(s, "reused_abba")) pool_scenario(0, 1);
  else if (!strcmp(s, "list")) list_scenario();
  else {
    fprintf(stderr, "unknown scenario %s\n", s);
    return 2;
  }
  printf("lockdep_reuse %s: done\n", s);
  return 0;
}
