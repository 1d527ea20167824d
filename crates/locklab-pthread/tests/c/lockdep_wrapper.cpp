// Locks made by a wrapper class whose constructor calls pthread_mutex_init (as nearly every C++
// code base has: RocksDB's port::Mutex, LevelDB's, Chromium's base::Lock): every such lock has one
// init call site, so a class per init site alone puts all of a program's locks in one class, and a
// consistent order through another lock (database lock -> statistics lock -> cache lock) reads as
// a cycle. The class must follow where the wrapper is constructed.
// Scenarios (argv[1]):
//   wrapped      correct: db -> stats, stats -> cache (db and cache made at different places);
//   wrapped_abba a real ABBA between two wrapped locks made at different places (reported);
//   array_abba   a real inversion between two wrapped locks made by one loop (reported).
#include <pthread.h>
#include <cstdio>
#include <cstring>

class Mutex {
 public:
  __attribute__((noinline)) Mutex() { pthread_mutex_init(&m_, nullptr); }
  __attribute__((noinline)) ~Mutex() { pthread_mutex_destroy(&m_); }
  __attribute__((noinline)) void Lock() { pthread_mutex_lock(&m_); }
  __attribute__((noinline)) void Unlock() { pthread_mutex_unlock(&m_); }

 private:
  pthread_mutex_t m_;
};

struct Db {
  Mutex mu;
  long rows = 0;
};
struct Cache {
  Mutex mu;
  long hits = 0;
};

__attribute__((noinline)) static Db *make_db() { return new Db(); }
__attribute__((noinline)) static Cache *make_cache() { return new Cache(); }

static pthread_mutex_t stats;

static void *in_thread(void *(*f)(void *), void *arg) {
  pthread_t t;
  void *r;
  pthread_create(&t, nullptr, f, arg);
  pthread_join(t, &r);
  return r;
}

static Db *db;
static Cache *cache;
static Mutex *pair;

static void *db_then_stats(void *) {
  db->mu.Lock();
  pthread_mutex_lock(&stats);
  db->rows++;
  pthread_mutex_unlock(&stats);
  db->mu.Unlock();
  return nullptr;
}
static void *stats_then_cache(void *) {
  pthread_mutex_lock(&stats);
  cache->mu.Lock();
  cache->hits++;
  cache->mu.Unlock();
  pthread_mutex_unlock(&stats);
  return nullptr;
}
static void *db_then_cache(void *) {
  db->mu.Lock();
  cache->mu.Lock();
  cache->mu.Unlock();
  db->mu.Unlock();
  return nullptr;
}
static void *cache_then_db(void *) {
  cache->mu.Lock();
  db->mu.Lock();
  db->mu.Unlock();
  cache->mu.Unlock();
  return nullptr;
}
static void *first_then_second(void *) {
  pair[0].Lock();
  pair[1].Lock();
  pair[1].Unlock();
  pair[0].Unlock();
  return nullptr;
}
static void *second_then_first(void *) {
  pair[1].Lock();
  pair[0].Lock();
  pair[0].Unlock();
  pair[1].Unlock();
  return nullptr;
}

int main(int argc, char **argv) {
  const char *s = argc > 1 ? argv[1] : "wrapped";
  pthread_mutex_init(&stats, nullptr);
  db = make_db();
  cache = make_cache();
  pair = new Mutex[argc + 1];  // a run-time count: one constructor call site, in a loop
  if (!strcmp(s, "wrapped")) {
    in_thread(db_then_stats, nullptr);
    in_thread(stats_then_cache, nullptr);
  } else if (!strcmp(s, "wrapped_abba")) {
    in_thread(db_then_cache, nullptr);
    in_thread(cache_then_db, nullptr);
  } else if (!strcmp(s, "array_abba")) {
    in_thread(first_then_second, nullptr);
    in_thread(second_then_first, nullptr);
  } else {
    fprintf(stderr, "unknown scenario %s\n", s);
    return 2;
  }
  delete[] pair;
  delete cache;
  delete db;
  printf("lockdep_wrapper %s: done\n", s);
  return 0;
}
