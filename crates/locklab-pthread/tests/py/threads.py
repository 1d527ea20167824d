# CPython on the preload library: the GIL is a pthread mutex + condvar, and threading.Lock,
# Condition and queue.Queue sit on top. Threads hand work through a queue and count under a lock;
# the totals are checked. Exits 0 and prints "ok" when every check holds.
import queue
import sys
import threading

N_PRODUCERS, N_CONSUMERS, ITEMS = 3, 3, 3000
q = queue.Queue(maxsize=16)
total = 0
count = 0
lock = threading.Lock()
cond = threading.Condition()
done_producers = 0


def producer(base):
    global done_producers
    for i in range(ITEMS):
        q.put(base + i)
    with cond:
        done_producers += 1
        cond.notify_all()


def consumer():
    global total, count
    while True:
        item = q.get()
        if item is None:
            return
        with lock:
            total += item
            count += 1


threads = [threading.Thread(target=producer, args=(p * ITEMS,)) for p in range(N_PRODUCERS)]
threads += [threading.Thread(target=consumer) for _ in range(N_CONSUMERS)]
for t in threads:
    t.start()
with cond:
    while done_producers < N_PRODUCERS:
        cond.wait(timeout=5)
for _ in range(N_CONSUMERS):
    q.put(None)
for t in threads:
    t.join()

n = N_PRODUCERS * ITEMS
expected = n * (n - 1) // 2
if count != n or total != expected:
    print(f"FAIL count={count} total={total} expected {n} / {expected}")
    sys.exit(1)
# A timed wait that must time out.
with cond:
    if cond.wait(timeout=0.05):
        print("FAIL a wait with nobody notifying returned True")
        sys.exit(1)
print("ok")
