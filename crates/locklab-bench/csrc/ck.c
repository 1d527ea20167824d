/*
 * The lab's shim over Concurrency Kit (the `ck-*` rows): its MCS, CLH, ticket and TAS (fetch-and-
 * store) spinlocks, its reader-writer lock, its big-reader lock and its epoch reclamation.
 *
 * locklab's own code (the workspace's licence), compiled against Debian's libck-dev (BSD); CK's
 * locks are static inline functions in its headers, so they are compiled here, as a C program using
 * them would be, and each lab operation is one call into this file.
 *
 * Every lock lives in its own 128-byte-aligned allocation (ll_ck_new), so no row shares a cache line
 * with the data it protects or with another lock.
 *
 * Per-thread state the locks need:
 *   MCS   a queue node per acquisition; the lab holds one lock at a time per thread, so one
 *         thread-local node serves every MCS lock (lock and unlock are separate calls).
 *   CLH   a node per thread that the lock recycles (after an unlock the thread owns its
 *         predecessor's node); allocated on the thread's first lock, never freed (one per thread).
 *   brlock a registered reader per (thread, lock): a small thread-local table keyed by the lock's
 *         address and a serial number (so a new lock at a freed one's address never reuses a stale
 *         reader); readers are freed with their lock.
 *   epoch a record per thread in one process-wide epoch domain, registered on first use; at thread
 *         exit (a pthread key destructor) its pending callbacks run after a grace period
 *         (ck_epoch_barrier) and the record is unregistered (ck_epoch_recycle reuses it).
 */
#include <ck_brlock.h>
#include <ck_epoch.h>
#include <ck_rwlock.h>
#include <ck_spinlock.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { LL_CK_MCS = 1, LL_CK_CLH, LL_CK_TICKET, LL_CK_TAS, LL_CK_RWLOCK, LL_CK_BRLOCK };

struct ll_ck {
	int kind;
	unsigned long serial;
	union {
		ck_spinlock_mcs_t mcs;
		struct {
			ck_spinlock_clh_t *tail;
			ck_spinlock_clh_t *unowned;
		} clh;
		ck_spinlock_ticket_t ticket;
		ck_spinlock_fas_t tas;
		ck_rwlock_t rw;
		ck_brlock_t br;
	} u;
};

static unsigned long serials;

void *ll_ck_new(int kind)
{
	struct ll_ck *l = aligned_alloc(128, 128);
	if (l == NULL)
		return NULL;
	memset(l, 0, 128);
	l->kind = kind;
	l->serial = __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED);
	switch (kind) {
	case LL_CK_MCS:
		ck_spinlock_mcs_init(&l->u.mcs);
		break;
	case LL_CK_CLH:
		l->u.clh.unowned = aligned_alloc(64, 64);
		if (l->u.clh.unowned == NULL) {
			free(l);
			return NULL;
		}
		ck_spinlock_clh_init(&l->u.clh.tail, l->u.clh.unowned);
		break;
	case LL_CK_TICKET:
		ck_spinlock_ticket_init(&l->u.ticket);
		break;
	case LL_CK_TAS:
		ck_spinlock_fas_init(&l->u.tas);
		break;
	case LL_CK_RWLOCK:
		ck_rwlock_init(&l->u.rw);
		break;
	case LL_CK_BRLOCK:
		ck_brlock_init(&l->u.br);
		break;
	default:
		free(l);
		return NULL;
	}
	return l;
}

/* Frees an unheld lock nobody uses any more. */
void ll_ck_free(void *p)
{
	struct ll_ck *l = p;
	if (l->kind == LL_CK_CLH) {
		/* The free lock's tail is the last released node, which its releaser no longer owns (it
		 * took its predecessor's): the lock owns exactly that one node. */
		free(l->u.clh.tail);
	} else if (l->kind == LL_CK_BRLOCK) {
		struct ck_brlock_reader *r = l->u.br.readers, *next;
		for (; r != NULL; r = next) {
			next = r->next;
			free(r);
		}
	}
	free(l);
}

static __thread struct ck_spinlock_mcs mcs_node;
static __thread ck_spinlock_clh_t *clh_node;

void ll_ck_mcs_lock(void *p)
{
	ck_spinlock_mcs_lock(&((struct ll_ck *)p)->u.mcs, &mcs_node);
}

void ll_ck_mcs_unlock(void *p)
{
	ck_spinlock_mcs_unlock(&((struct ll_ck *)p)->u.mcs, &mcs_node);
}

void ll_ck_clh_lock(void *p)
{
	if (__builtin_expect(clh_node == NULL, 0)) {
		clh_node = aligned_alloc(64, 64);
		if (clh_node == NULL)
			abort();
	}
	ck_spinlock_clh_lock(&((struct ll_ck *)p)->u.clh.tail, clh_node);
}

void ll_ck_clh_unlock(void *p)
{
	(void)p;
	ck_spinlock_clh_unlock(&clh_node);
}

void ll_ck_ticket_lock(void *p)
{
	ck_spinlock_ticket_lock(&((struct ll_ck *)p)->u.ticket);
}

void ll_ck_ticket_unlock(void *p)
{
	ck_spinlock_ticket_unlock(&((struct ll_ck *)p)->u.ticket);
}

void ll_ck_tas_lock(void *p)
{
	ck_spinlock_fas_lock(&((struct ll_ck *)p)->u.tas);
}

void ll_ck_tas_unlock(void *p)
{
	ck_spinlock_fas_unlock(&((struct ll_ck *)p)->u.tas);
}

void ll_ck_rwlock_write_lock(void *p)
{
	ck_rwlock_write_lock(&((struct ll_ck *)p)->u.rw);
}

void ll_ck_rwlock_write_unlock(void *p)
{
	ck_rwlock_write_unlock(&((struct ll_ck *)p)->u.rw);
}

void ll_ck_rwlock_read_lock(void *p)
{
	ck_rwlock_read_lock(&((struct ll_ck *)p)->u.rw);
}

void ll_ck_rwlock_read_unlock(void *p)
{
	ck_rwlock_read_unlock(&((struct ll_ck *)p)->u.rw);
}

#define BR_SLOTS 16
static __thread struct {
	struct ll_ck *lock;
	unsigned long serial;
	struct ck_brlock_reader *reader;
} br_slots[BR_SLOTS];
static __thread unsigned br_next;

static struct ck_brlock_reader *br_reader(struct ll_ck *l)
{
	for (unsigned i = 0; i < BR_SLOTS; i++)
		if (br_slots[i].lock == l && br_slots[i].serial == l->serial)
			return br_slots[i].reader;
	struct ck_brlock_reader *r = aligned_alloc(64, 64);
	if (r == NULL)
		abort();
	memset(r, 0, 64);
	/* Registration takes the writer's side of the lock: never called while this thread holds it. */
	ck_brlock_read_register(&l->u.br, r);
	unsigned i = br_next++ % BR_SLOTS;
	br_slots[i].lock = l;
	br_slots[i].serial = l->serial;
	br_slots[i].reader = r;
	return r;
}

void ll_ck_brlock_write_lock(void *p)
{
	ck_brlock_write_lock(&((struct ll_ck *)p)->u.br);
}

void ll_ck_brlock_write_unlock(void *p)
{
	ck_brlock_write_unlock(&((struct ll_ck *)p)->u.br);
}

void ll_ck_brlock_read_lock(void *p)
{
	struct ll_ck *l = p;
	ck_brlock_read_lock(&l->u.br, br_reader(l));
}

void ll_ck_brlock_read_unlock(void *p)
{
	/* The reader this thread locked with is in its table (the lock is held: not evicted since). */
	struct ll_ck *l = p;
	for (unsigned i = 0; i < BR_SLOTS; i++)
		if (br_slots[i].lock == l && br_slots[i].serial == l->serial) {
			ck_brlock_read_unlock(br_slots[i].reader);
			return;
		}
	abort();
}

/* --- epoch ------------------------------------------------------------------------------------ */

static ck_epoch_t epoch;
static pthread_once_t epoch_once = PTHREAD_ONCE_INIT;
static pthread_key_t epoch_key;
static __thread ck_epoch_record_t *record;
static __thread unsigned retired;

static void record_exit(void *r)
{
	ck_epoch_record_t *rec = r;
	ck_epoch_barrier(rec);
	ck_epoch_unregister(rec);
	record = NULL;
}

static void epoch_setup(void)
{
	ck_epoch_init(&epoch);
	pthread_key_create(&epoch_key, record_exit);
}

static ck_epoch_record_t *my_record(void)
{
	if (__builtin_expect(record == NULL, 0)) {
		pthread_once(&epoch_once, epoch_setup);
		ck_epoch_record_t *r = ck_epoch_recycle(&epoch, NULL);
		if (r == NULL) {
			r = aligned_alloc(64, (sizeof(*r) + 63) / 64 * 64);
			if (r == NULL)
				abort();
			ck_epoch_register(&epoch, r, NULL);
		}
		record = r;
		pthread_setspecific(epoch_key, r);
	}
	return record;
}

void ll_ck_epoch_begin(void)
{
	ck_epoch_begin(my_record(), NULL);
}

void ll_ck_epoch_end(void)
{
	ck_epoch_end(record, NULL);
}

/* How many retirements a thread makes between two polls (CK's callbacks run only when their
 * thread polls or waits: its documented use is a deferral followed by periodic ck_epoch_poll). */
#define POLL_EVERY 32

void ll_ck_epoch_call(ck_epoch_entry_t *e, ck_epoch_cb_t *cb)
{
	ck_epoch_record_t *r = my_record();
	ck_epoch_call(r, e, cb);
	if (++retired % POLL_EVERY == 0)
		ck_epoch_poll(r);
}

void ll_ck_epoch_synchronize(void)
{
	ck_epoch_synchronize(my_record());
}

void ll_ck_epoch_barrier(void)
{
	ck_epoch_barrier(my_record());
}

size_t ll_ck_entry_size(void)
{
	return sizeof(ck_epoch_entry_t);
}
