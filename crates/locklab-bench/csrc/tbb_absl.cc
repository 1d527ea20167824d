// The lab's shim over oneTBB's mutexes (the `tbb-*` rows) and Abseil's Mutex (`absl-mutex`,
// `absl-rwlock`).
//
// locklab's own code (the workspace's licence), compiled against Debian's libtbb-dev and libabsl-dev
// (both Apache-2.0). Each lock lives in its own 128-byte-aligned allocation; each lab operation is one
// call into this file. TBB's queuing locks take a scoped_lock (their queue node) per acquisition: the
// lab holds one lock at a time per thread, so a thread-local scoped_lock serves each queuing kind.
#include <new>

#ifdef LL_HAVE_TBB
#include <oneapi/tbb/queuing_mutex.h>
#include <oneapi/tbb/queuing_rw_mutex.h>
#include <oneapi/tbb/spin_mutex.h>
#include <oneapi/tbb/spin_rw_mutex.h>

namespace {
thread_local tbb::queuing_mutex::scoped_lock q_node;
thread_local tbb::queuing_rw_mutex::scoped_lock qrw_node;

template <class T> void *make() noexcept {
  void *p = ::operator new(sizeof(T) < 128 ? 128 : sizeof(T), std::align_val_t(128), std::nothrow);
  return p ? new (p) T() : nullptr;
}
template <class T> void destroy(void *p) noexcept {
  static_cast<T *>(p)->~T();
  ::operator delete(p, std::align_val_t(128));
}
} // namespace

extern "C" {
void *ll_tbb_spin_new() { return make<tbb::spin_mutex>(); }
void ll_tbb_spin_free(void *p) { destroy<tbb::spin_mutex>(p); }
void ll_tbb_spin_lock(void *p) { static_cast<tbb::spin_mutex *>(p)->lock(); }
void ll_tbb_spin_unlock(void *p) { static_cast<tbb::spin_mutex *>(p)->unlock(); }

void *ll_tbb_queuing_new() { return make<tbb::queuing_mutex>(); }
void ll_tbb_queuing_free(void *p) { destroy<tbb::queuing_mutex>(p); }
void ll_tbb_queuing_lock(void *p) { q_node.acquire(*static_cast<tbb::queuing_mutex *>(p)); }
void ll_tbb_queuing_unlock(void *) { q_node.release(); }

void *ll_tbb_spin_rw_new() { return make<tbb::spin_rw_mutex>(); }
void ll_tbb_spin_rw_free(void *p) { destroy<tbb::spin_rw_mutex>(p); }
void ll_tbb_spin_rw_lock(void *p) { static_cast<tbb::spin_rw_mutex *>(p)->lock(); }
void ll_tbb_spin_rw_unlock(void *p) { static_cast<tbb::spin_rw_mutex *>(p)->unlock(); }
void ll_tbb_spin_rw_read_lock(void *p) { static_cast<tbb::spin_rw_mutex *>(p)->lock_shared(); }
void ll_tbb_spin_rw_read_unlock(void *p) { static_cast<tbb::spin_rw_mutex *>(p)->unlock_shared(); }

void *ll_tbb_queuing_rw_new() { return make<tbb::queuing_rw_mutex>(); }
void ll_tbb_queuing_rw_free(void *p) { destroy<tbb::queuing_rw_mutex>(p); }
void ll_tbb_queuing_rw_lock(void *p) {
  qrw_node.acquire(*static_cast<tbb::queuing_rw_mutex *>(p), true);
}
void ll_tbb_queuing_rw_unlock(void *) { qrw_node.release(); }
void ll_tbb_queuing_rw_read_lock(void *p) {
  qrw_node.acquire(*static_cast<tbb::queuing_rw_mutex *>(p), false);
}
void ll_tbb_queuing_rw_read_unlock(void *) { qrw_node.release(); }
}
#endif

#ifdef LL_HAVE_ABSL
#include <absl/synchronization/mutex.h>

extern "C" {
void *ll_absl_new() {
  void *p = ::operator new(128, std::align_val_t(128), std::nothrow);
  return p ? new (p) absl::Mutex() : nullptr;
}
void ll_absl_free(void *p) {
  static_cast<absl::Mutex *>(p)->~Mutex();
  ::operator delete(p, std::align_val_t(128));
}
void ll_absl_lock(void *p) { static_cast<absl::Mutex *>(p)->Lock(); }
void ll_absl_unlock(void *p) { static_cast<absl::Mutex *>(p)->Unlock(); }
void ll_absl_read_lock(void *p) { static_cast<absl::Mutex *>(p)->ReaderLock(); }
void ll_absl_read_unlock(void *p) { static_cast<absl::Mutex *>(p)->ReaderUnlock(); }
}
#endif
