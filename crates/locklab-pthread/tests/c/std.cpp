// The C++ standard library's locks on top of the pthread calls: std::mutex (never initialised nor
// destroyed: all-zero), std::recursive_mutex, std::shared_mutex (a pthread rwlock),
// std::condition_variable (wait_until on steady_clock is pthread_cond_clockwait), std::timed_mutex
// (try_lock_until on steady_clock is pthread_mutex_clocklock), under more threads than CPUs.
#include <atomic>
#include <cassert>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

static int failures;
#define CHECK(c)                                                   \
  do {                                                             \
    if (!(c)) {                                                    \
      failures++;                                                  \
      std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);     \
    }                                                              \
  } while (0)

using namespace std::chrono;

int main() {
  // std::mutex + condition_variable: a bounded queue, 4 producers, 4 consumers.
  {
    std::mutex m;
    std::condition_variable not_empty, not_full;
    std::deque<long> q;
    long sum = 0, n = 0;
    const long per = 20000;
    std::vector<std::thread> ts;
    for (int p = 0; p < 4; p++)
      ts.emplace_back([&] {
        for (long i = 1; i <= per; i++) {
          std::unique_lock<std::mutex> g(m);
          not_full.wait(g, [&] { return q.size() < 8; });
          q.push_back(i);
          not_empty.notify_one();
        }
      });
    for (int c = 0; c < 4; c++)
      ts.emplace_back([&] {
        for (;;) {
          std::unique_lock<std::mutex> g(m);
          not_empty.wait(g, [&] { return !q.empty() || n == 4 * per; });
          if (q.empty()) return;
          sum += q.front();
          q.pop_front();
          if (++n == 4 * per) not_empty.notify_all();
          not_full.notify_one();
        }
      });
    for (auto &t : ts) t.join();
    CHECK(n == 4 * per);
    CHECK(sum == 4 * per * (per + 1) / 2);
  }
  // condition_variable::wait_until(steady_clock) times out on time.
  {
    std::mutex m;
    std::condition_variable cv;
    std::unique_lock<std::mutex> g(m);
    auto t0 = steady_clock::now();
    auto r = cv.wait_until(g, t0 + milliseconds(100));
    auto waited = steady_clock::now() - t0;
    CHECK(r == std::cv_status::timeout);
    CHECK(waited >= milliseconds(95) && waited < seconds(5));
    CHECK(cv.wait_for(g, milliseconds(20)) == std::cv_status::timeout);
  }
  // timed_mutex with steady_clock (clocklock) and system_clock (timedlock).
  {
    std::timed_mutex tm;
    tm.lock();
    std::thread t([&] {
      auto t0 = steady_clock::now();
      CHECK(!tm.try_lock_until(t0 + milliseconds(100)));
      CHECK(steady_clock::now() - t0 >= milliseconds(95));
      CHECK(!tm.try_lock_for(milliseconds(30)));
      CHECK(!tm.try_lock_until(system_clock::now() + milliseconds(30)));
    });
    t.join();
    tm.unlock();
    CHECK(tm.try_lock_until(steady_clock::now() + milliseconds(100)));
    tm.unlock();
  }
  // recursive_mutex.
  {
    std::recursive_mutex rm;
    rm.lock();
    rm.lock();
    CHECK(rm.try_lock());
    std::thread t([&] { CHECK(!rm.try_lock()); });
    t.join();
    rm.unlock();
    rm.unlock();
    rm.unlock();
  }
  // shared_mutex: readers share, writers exclude, under 6 threads.
  {
    std::shared_mutex sm;
    long a = 0, b = 0;
    std::atomic<long> torn{0}, shared_seen{0};
    std::atomic<int> readers_in{0};
    std::vector<std::thread> ts;
    for (int i = 0; i < 6; i++)
      ts.emplace_back([&, i] {
        for (int k = 0; k < 20000; k++) {
          if ((k + i) % 10 == 0) {
            std::unique_lock<std::shared_mutex> g(sm);
            a++;
            b++;
          } else {
            std::shared_lock<std::shared_mutex> g(sm);
            if (readers_in.fetch_add(1) > 0) shared_seen++;
            if (a != b) torn++;
            readers_in.fetch_sub(1);
          }
        }
      });
    for (auto &t : ts) t.join();
    CHECK(torn == 0);
    CHECK(a == 6 * 2000);
    // Two readers hold it at once.
    sm.lock_shared();
    std::thread t([&] {
      CHECK(sm.try_lock_shared());
      sm.unlock_shared();
      CHECK(!sm.try_lock());
    });
    t.join();
    sm.unlock_shared();
  }
  std::printf("std: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}
