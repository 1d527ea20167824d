/* Adversarial and stress: locks taken before any library constructor has run (.preinit_array), a
 * malloc of the program's own that takes a pthread mutex (so a lock path that allocated would recurse
 * into it), many threads created and exiting (each registers and returns its per-thread state), and
 * more threads than CPUs hammering one mutex with a checked invariant. Passes under glibc alone. */
#include "check.h"
#include <stdint.h>

/* --- the program's own allocator, under a pthread mutex ------------------------------------------ */
static pthread_mutex_t heap_lock = PTHREAD_MUTEX_INITIALIZER;
static _Alignas(64) unsigned char heap[64 << 20];
static size_t heap_used;
static long in_malloc; /* > 0: a thread is inside our malloc (re-entry would deadlock or count) */
static long reentered;

static void *bump(size_t n, size_t align) {
  if (align < 16) align = 16;
  pthread_mutex_lock(&heap_lock);
  if (__atomic_add_fetch(&in_malloc, 1, __ATOMIC_RELAXED) != 1) reentered++;
  size_t at = (heap_used + align - 1) & ~(align - 1);
  void *p = NULL;
  if (at + n + 16 <= sizeof heap) {
    *(size_t *)(heap + at) = n;
    p = heap + at + 16;
    heap_used = at + n + 16;
  }
  __atomic_sub_fetch(&in_malloc, 1, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&heap_lock);
  return p;
}
void *malloc(size_t n) { return bump(n, 16); }
void *calloc(size_t a, size_t b) {
  void *p = bump(a * b, 16);
  if (p) memset(p, 0, a * b);
  return p;
}
void *realloc(void *old, size_t n) {
  void *p = bump(n, 16);
  if (p && old) {
    size_t was = *(size_t *)((unsigned char *)old - 16);
    memcpy(p, old, was < n ? was : n);
  }
  return p;
}
void free(void *p) { (void)p; }
void *memalign(size_t align, size_t n) { return bump(n, align); }
void *aligned_alloc(size_t align, size_t n) { return bump(n, align); }
int posix_memalign(void **out, size_t align, size_t n) {
  *out = bump(n, align);
  return *out ? 0 : ENOMEM;
}

/* --- before any constructor -------------------------------------------------------------------- */
static pthread_mutex_t early_m = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_rwlock_t early_l = PTHREAD_RWLOCK_INITIALIZER;
static pthread_cond_t early_c = PTHREAD_COND_INITIALIZER;
static int early_ok;
static pthread_mutex_t early_plain = PTHREAD_MUTEX_INITIALIZER;
static unsigned char early_held[sizeof(pthread_mutex_t)];
static void before_constructors(void) {
  pthread_mutex_lock(&early_plain);
  memcpy(early_held, &early_plain, sizeof early_held);
  pthread_mutex_unlock(&early_plain);
  int ok = pthread_mutex_lock(&early_m) == 0 && pthread_mutex_lock(&early_m) == 0 &&
           pthread_mutex_unlock(&early_m) == 0;
  struct timespec t = {0, 0};
  ok = ok && pthread_cond_timedwait(&early_c, &early_m, &t) == ETIMEDOUT;
  ok = ok && pthread_mutex_unlock(&early_m) == 0;
  ok = ok && pthread_rwlock_rdlock(&early_l) == 0 && pthread_rwlock_unlock(&early_l) == 0;
  early_ok = ok;
}
__attribute__((section(".preinit_array"), used)) static void (*preinit)(void) = before_constructors;

/* --- threads that come and go, allocating (so locking heap_lock, contended) ---------------------- */
static void *short_lived(void *arg) {
  for (int i = 0; i < 50; i++) {
    char *p = malloc(32 + i);
    p[0] = (char)i;
  }
  return arg;
}

/* --- more threads than CPUs on one mutex ------------------------------------------------------- */
#define THREADS 8
#define ROUNDS 100000
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static long inside, counter, overlaps;
static void *hammer(void *arg) {
  (void)arg;
  for (int i = 0; i < ROUNDS; i++) {
    if (i % 3 == 0) {
      while (pthread_mutex_trylock(&m) != 0) {
      }
    } else {
      pthread_mutex_lock(&m);
    }
    if (__atomic_add_fetch(&inside, 1, __ATOMIC_RELAXED) != 1) overlaps++;
    counter++;
    __atomic_sub_fetch(&inside, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&m);
  }
  return NULL;
}

int main(void) {
  check_preload();
  EQ(early_ok, 1);
  /* The choice the environment made is the one the early lock used (glibc's environ is not set yet
   * when .preinit_array runs): mcs and ticket keep their state at byte 24, the others at byte 0. */
  const char *choice = getenv("LOCKLAB_MUTEX");
  int at24 = choice && (!strcmp(choice, "mcs") || !strcmp(choice, "ticket"));
  long w0 = 0, w24 = 0;
  memcpy(&w0, early_held, 4);
  memcpy(&w24, early_held + 24, 8);
  CHECK(at24 ? (w24 != 0 && w0 == 0) : (w0 != 0 && w24 == 0), "held early: word0 %lx word24 %lx",
        w0, w24);
  for (int round = 0; round < 20; round++) {
    pthread_t t[16];
    for (int i = 0; i < 16; i++) EQ(pthread_create(&t[i], NULL, short_lived, NULL), 0);
    for (int i = 0; i < 16; i++) pthread_join(t[i], NULL);
  }
  EQ(reentered, 0);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, hammer, NULL);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  EQ(overlaps, 0);
  EQ(counter, (long)THREADS * ROUNDS);
  return finish("stress");
}
