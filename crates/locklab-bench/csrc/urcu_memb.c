/*
 * The lab's shim over liburcu's memb flavour (the `liburcu-memb` rows).
 *
 * locklab's own code (the workspace's licence). It is compiled with liburcu's inline fast paths
 * (_LGPL_SOURCE, as liburcu's own benchmarks are) and linked dynamically against the LGPL library,
 * which the system provides (Debian: liburcu-dev); no liburcu code is copied here.
 *
 * What the lab calls, once per operation, through the FFI:
 *   ll_memb_read_lock / ll_memb_read_unlock   the read-side section (registers the thread first)
 *   ll_memb_call_rcu                          liburcu's call_rcu (its default, process-wide queue)
 *   ll_memb_synchronize                       synchronize_rcu (the rcu-sync workload)
 *   ll_memb_barrier                           rcu_barrier (after a trial, untimed)
 * A thread registers on its first call and unregisters when it exits (a pthread key destructor),
 * so a grace period never waits for a thread that is gone.
 */
#define _LGPL_SOURCE
#define RCU_MEMBARRIER
#include <urcu.h>
#include <urcu/call-rcu.h>
#include <stddef.h>

#define LL_REGISTER() urcu_memb_register_thread()
#define LL_UNREGISTER() urcu_memb_unregister_thread()
#include "shim_register.h"

void ll_memb_read_lock(void)
{
	ensure_registered();
	urcu_memb_read_lock();
}

void ll_memb_read_unlock(void)
{
	urcu_memb_read_unlock();
}

void ll_memb_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *))
{
	ensure_registered();
	urcu_memb_call_rcu(head, func);
}

void ll_memb_synchronize(void)
{
	ensure_registered();
	urcu_memb_synchronize_rcu();
}

void ll_memb_barrier(void)
{
	ensure_registered();
	urcu_memb_barrier();
}

/* The lab checks that its own copy of struct rcu_head has this size before it uses call_rcu. */
size_t ll_urcu_head_size(void)
{
	return sizeof(struct rcu_head);
}
