// A correct C++ program whose locks live in objects and are never passed to an init function (every
// std::mutex, std::recursive_mutex and std::shared_mutex is such an object): lockdep must report
// nothing on it. The patterns are the common ones:
//  - a bank: accounts in a vector, each with its own std::mutex, transfers lock two accounts in index
//    order, from several call sites (deposit-like paths touch single accounts first, so the first
//    acquisition of each account comes from different code);
//  - std::scoped_lock of two accounts in either argument order (std::lock's deadlock avoidance, only
//    try_lock after the first);
//  - a hash table with one mutex per bucket, a move between two buckets in bucket order, buckets first
//    touched by insert or by lookup;
//  - hand-over-hand locking down a linked list whose head node is freed and a new tail node appended
//    between passes (the allocator hands the new tail the old head's memory);
//  - objects freed and new ones of another kind made at the same addresses, whose locks are taken in
//    the other order relative to a registry lock;
//  - a reader-writer cache (std::shared_mutex) nested inside a per-shard std::mutex, always in that
//    order; a worker pool on std::condition_variable.
// Usage: lockdep_objects [ROUNDS] (default 2000). Exits 0.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <thread>
#include <vector>

struct Account {
  std::mutex m;
  long balance = 100;
};

static std::vector<Account> bank(64);

__attribute__((noinline)) static void deposit(size_t i, long v) {
  std::lock_guard<std::mutex> g(bank[i].m);
  bank[i].balance += v;
}

__attribute__((noinline)) static long peek(size_t i) {
  std::lock_guard<std::mutex> g(bank[i].m);
  return bank[i].balance;
}

// Index order: the lower index first.
__attribute__((noinline)) static void transfer(size_t from, size_t to, long v) {
  if (from == to) return;
  size_t lo = std::min(from, to), hi = std::max(from, to);
  std::lock_guard<std::mutex> a(bank[lo].m);
  std::lock_guard<std::mutex> b(bank[hi].m);
  bank[from].balance -= v;
  bank[to].balance += v;
}

__attribute__((noinline)) static void swap_scoped(size_t x, size_t y) {
  if (x == y) return;
  std::scoped_lock g(bank[x].m, bank[y].m);
  std::swap(bank[x].balance, bank[y].balance);
}

// --- a hash table with a mutex per bucket ---------------------------------------------------------
struct Bucket {
  std::mutex m;
  std::list<int> keys;
};
static Bucket table[32];

__attribute__((noinline)) static void insert(int k) {
  Bucket &b = table[k % 32];
  std::lock_guard<std::mutex> g(b.m);
  b.keys.push_back(k);
}

__attribute__((noinline)) static bool lookup(int k) {
  Bucket &b = table[k % 32];
  std::lock_guard<std::mutex> g(b.m);
  return std::find(b.keys.begin(), b.keys.end(), k) != b.keys.end();
}

__attribute__((noinline)) static void move_key(int k, int to_bucket) {
  size_t from = k % 32, to = to_bucket % 32;
  if (from == to) return;
  std::lock_guard<std::mutex> a(table[std::min(from, to)].m);
  std::lock_guard<std::mutex> b(table[std::max(from, to)].m);
  auto &src = table[from].keys;
  auto it = std::find(src.begin(), src.end(), k);
  if (it != src.end()) {
    src.erase(it);
    table[to].keys.push_back(k);
  }
}

// --- hand-over-hand down a list -------------------------------------------------------------------
struct Node {
  std::mutex m;
  Node *next = nullptr;
  int v = 0;
};

static Node *list_head;
static std::mutex list_root;

__attribute__((noinline)) static long walk() {
  std::unique_lock<std::mutex> root(list_root);
  Node *n = list_head;
  if (!n) return 0;
  n->m.lock();
  root.unlock();
  long sum = 0;
  while (n) {
    sum += n->v;
    Node *next = n->next;
    if (next) next->m.lock();
    n->m.unlock();
    n = next;
  }
  return sum;
}

// Retires the head node (freed) and appends a new one at the tail, under the root lock and, hand
// over hand, every node's lock: the allocator may hand the new node the old head's memory, so
// the same address is first at the front of the list, later at its end.
__attribute__((noinline)) static void recycle() {
  std::lock_guard<std::mutex> root(list_root);
  Node *first = list_head;
  if (!first || !first->next) return;
  first->m.lock();
  Node *n = first->next;
  n->m.lock();
  list_head = n;
  first->m.unlock();
  delete first;
  while (n->next) {
    n->next->m.lock();
    Node *next = n->next;
    n->m.unlock();
    n = next;
  }
  Node *fresh = new Node();
  fresh->v = n->v + 1;
  n->next = fresh;
  n->m.unlock();
}

// --- objects freed and their memory reused for another kind -----------------------------------------
static std::mutex registry;
struct Connection {
  std::mutex m;
  int fd = 0;
};
struct Buffer {
  std::mutex m;
  char data[24];
};
static_assert(sizeof(Connection) <= 64 && sizeof(Buffer) <= 64, "one malloc size class");

__attribute__((noinline)) static void pool_round(int r) {
  // Connections: their lock is taken before the registry's.
  Connection *c[16];
  for (int i = 0; i < 16; i++) c[i] = new Connection();
  for (int i = 0; i < 16; i++) {
    std::lock_guard<std::mutex> a(c[i]->m);
    std::lock_guard<std::mutex> b(registry);
    c[i]->fd = r + i;
  }
  for (int i = 0; i < 16; i++) delete c[i];
  // Buffers, most likely at the same addresses: their lock is taken under the registry's.
  Buffer *b[16];
  for (int i = 0; i < 16; i++) b[i] = new Buffer();
  for (int i = 0; i < 16; i++) {
    std::lock_guard<std::mutex> g(registry);
    std::lock_guard<std::mutex> h(b[i]->m);
    b[i]->data[0] = (char)r;
  }
  for (int i = 0; i < 16; i++) delete b[i];
}

// --- shards with a reader-writer cache inside -----------------------------------------------------
struct Shard {
  std::mutex m;
  std::shared_mutex cache_lock;
  long cache = 0;
};
static Shard shards[8];

__attribute__((noinline)) static long shard_read(int i) {
  std::lock_guard<std::mutex> g(shards[i].m);
  std::shared_lock<std::shared_mutex> r(shards[i].cache_lock);
  return shards[i].cache;
}

__attribute__((noinline)) static void shard_write(int i, long v) {
  std::lock_guard<std::mutex> g(shards[i].m);
  std::unique_lock<std::shared_mutex> w(shards[i].cache_lock);
  shards[i].cache = v;
}

// --- a worker pool ----------------------------------------------------------------------------------
struct Pool {
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::function<void()>> q;
  bool done = false;
  std::vector<std::thread> workers;
  explicit Pool(int n) {
    for (int i = 0; i < n; i++)
      workers.emplace_back([this] {
        for (;;) {
          std::function<void()> job;
          {
            std::unique_lock<std::mutex> g(m);
            cv.wait(g, [this] { return done || !q.empty(); });
            if (q.empty()) return;
            job = std::move(q.front());
            q.pop_front();
          }
          job();
        }
      });
  }
  void push(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> g(m);
      q.push_back(std::move(f));
    }
    cv.notify_one();
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> g(m);
      done = true;
    }
    cv.notify_all();
    for (auto &t : workers) t.join();
  }
};

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 2000;
  // Single-account paths first, from different call sites.
  for (size_t i = 0; i < bank.size(); i += 2) deposit(i, 1);
  for (size_t i = 1; i < bank.size(); i += 2) (void)peek(i);
  for (int k = 0; k < 16; k++) insert(k);
  for (int k = 16; k < 32; k++) (void)lookup(k);
  // The list: 8 nodes.
  Node *prev = nullptr;
  for (int i = 0; i < 8; i++) {
    Node *n = new Node();
    n->v = i;
    if (prev) prev->next = n; else list_head = n;
    prev = n;
  }

  auto work = [rounds](unsigned seed) {
    for (int r = 0; r < rounds; r++) {
      seed = seed * 1103515245u + 12345u;
      size_t a = (seed >> 8) % bank.size(), b = (seed >> 20) % bank.size();
      transfer(a, b, 1);
      if (r % 7 == 0) swap_scoped(a, b);
      if (r % 5 == 0) move_key((int)(seed % 64), (int)(seed >> 16));
      if (r % 11 == 0) (void)walk();
      if (r % 13 == 0) shard_write((int)(seed % 8), r);
      (void)shard_read((int)((seed >> 4) % 8));
    }
  };
  // The ordered pairs first seen in a chain, then a pair that links its ends: transfer(0,1),
  // transfer(2,3), transfer(1,2).
  transfer(0, 1, 1);
  transfer(2, 3, 1);
  transfer(1, 2, 1);
  {
    Pool p(3);
    for (int t = 0; t < 4; t++) p.push([&work, t] { work(1234u + t); });
  }
  for (int r = 0; r < 20; r++) {
    recycle();
    (void)walk();
  }
  for (int r = 0; r < 50; r++) pool_round(r);
  long total = 0;
  for (size_t i = 0; i < bank.size(); i++) total += peek(i);
  printf("lockdep_objects: total %ld, list %ld\n", total, walk());
  return 0;
}
